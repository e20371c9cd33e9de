"""A running tritonserver, whatever started it: endpoints, readiness, log, stop."""

from __future__ import annotations

import http.client
import json
import re
import time
from pathlib import Path

from ...host.credentials import without_secrets
from ...host.endpoints import Endpoints
from ...host.processes import ServerProcess
from ...common.progress import Progress
from ...common.errors import TritonLLMError
from ...host.hardware import cores_shared_by


class ServerStartError(TritonLLMError, RuntimeError):
    pass


def tritonserver_args(
    repository: str | Path,
    ports: dict[str, int],
    *,
    binary: str | Path = "tritonserver",
    host: str | None = None,
    backends: str | Path | None = None,
    extra: tuple[str, ...] = (),
) -> list[str]:
    """tritonserver's command line, for every runtime: `ports` by endpoint (http, grpc, metrics; a missing one
    is switched off), `host` the address they listen on (None: tritonserver's default, all interfaces, which a
    container needs for its published ports)."""
    argv = [str(binary), f"--model-repository={repository}"]
    if backends is not None:
        argv.append(f"--backend-directory={backends}")
    argv += [
        "--disable-auto-complete-config",  # configs are complete; saves a python stub per model
        "--strict-readiness=true",
        # a session stops its server when no request is left, so the wait is for the models' unload: one stub at a time
        # per model (about 1 s each on 2 cores), and a BLS of max_batch_size instances never made 10 s. Nothing needs
        # a model's finalize: what is still loaded goes with the process group (its shared memory too, local.py)
        "--exit-timeout-secs=1",
    ]
    for endpoint in ("http", "grpc", "metrics"):
        if endpoint not in ports:
            argv.append(f"--allow-{endpoint}=false")
            continue
        if host is not None:
            argv.append(f"--{endpoint}-address={host}")
        argv.append(f"--{endpoint}-port={ports[endpoint]}")
    return argv + list(extra)


# how tritonserver says that another process bound a port it was given: gRPC "Address already in use", HTTP and
# metrics "Socket '127.0.0.1:N' already in use"
PORT_TAKEN = "already in use"
_ERROR_LINE = re.compile(r"^E\d{4} |Failed to initialize Python stub|failed to load")


def error_lines(path: Path, limit: int = 8, width: int = 600) -> str:
    """The server's error lines (model load failures and their Python exceptions), most recent last."""
    try:
        text = path.read_text(errors="replace")
    except OSError:
        return ""
    found = [line[:width] for line in text.splitlines() if _ERROR_LINE.search(line) and "CudaDriverHelper" not in line]
    return "\n".join(found[-limit:])


_FAILED_MODEL = re.compile(r"failed to load '([^']+)'[^:]*: (.*)")


def failed_model(path: Path) -> str | None:
    """The first model the server failed to load and why, in a few words: "tensorrt_llm: ImportError: No module ..."."""
    for line in error_lines(path, limit=50).splitlines():
        match = _FAILED_MODEL.search(line)
        if match:
            return f"model {match.group(1)} failed to load: {match.group(2).rstrip(chr(34)).strip()[:300]}"
    return None


def tail(path: Path, lines: int = 40) -> str:
    try:
        with open(path, "rb") as fh:
            fh.seek(0, 2)
            fh.seek(max(0, fh.tell() - 64 * 1024))
            data = fh.read().decode("utf-8", errors="replace")
    except OSError:
        return f"(no log at {path})"
    return "\n".join(data.splitlines()[-lines:])


class TritonServer:
    def __init__(self, name: str, endpoints: Endpoints, log_path: Path, process: ServerProcess | None, binary: str):
        self.name = name
        self.endpoints = endpoints
        self.log_path = log_path
        self.process = process  # None for a server this session did not start
        self.binary = binary
        self.ready_seconds: float | None = None
        self.metadata: dict = {}
        self.warm: dict | None = None  # a warm server's slot, since when it serves, whether this session reused it (warm.py)

    @property
    def version(self) -> str | None:
        return self.metadata.get("version")

    def log_tail(self, lines: int = 40) -> str:
        return tail(self.log_path, lines)

    def alive(self) -> bool:
        return self.process is None or self.process.alive()

    def ready(self) -> bool:
        """Its health endpoint says ready and its metrics endpoint, which tritonserver starts last, answers. A port
        another process bound while this one loaded its models answers otherwise (or not at all) and this one exits
        "already in use" (PORT_TAKEN), to be started again on new ports: not ready yet."""
        return self._answers(self.endpoints.http_url("/v2/health/ready")) and self._answers(self.endpoints.metrics_url())

    def _answers(self, url: str) -> bool:
        try:
            status, _ = self.endpoints.get(url, timeout=1.0)
        except (OSError, http.client.HTTPException):  # HTTPException: not HTTP/1.1, e.g. another server's gRPC port
            return False
        return status == 200

    def wait_ready(self, timeout_s: float, progress: Progress) -> None:
        start = time.monotonic()
        next_note = start + 10
        while not self.ready():
            if self.process is not None and not self.process.alive():  # not self.alive(), narrowed for the exit code
                why = failed_model(self.log_path) or f"exit code {self.process.returncode}"
                raise ServerStartError(
                    f"tritonserver for {self.name} stopped before it was ready ({why}); log {self.log_path}\n"
                    f"{error_lines(self.log_path) or self.log_tail()}"
                )
            now = time.monotonic()
            if now - start > timeout_s:
                raise ServerStartError(
                    f"tritonserver for {self.name} not ready after {timeout_s:g} s (raise --triton-start-timeout if models "
                    f"load slowly); log {self.log_path}\n{self.log_tail()}"
                )
            if now >= next_note:
                progress.say(f"server {self.name}: still loading models ({now - start:.0f} s)")
                next_note = now + 10
            time.sleep(0.2)
        self.ready_seconds = time.monotonic() - start
        _, body = self.endpoints.get(self.endpoints.http_url("/v2"))
        self.metadata = json.loads(body)

    def stop(self) -> None:
        if self.process is not None:
            self.process.stop()


_SERVING = {
    "HF_HUB_OFFLINE": "1",  # engines are local; a hub lookup at serve time is a bug
    "TRANSFORMERS_OFFLINE": "1",
    "TOKENIZERS_PARALLELISM": "false",
    "TRANSFORMERS_VERBOSITY": "error",
    "PYTHONUNBUFFERED": "1",
}


def serving_environment(base: dict[str, str]) -> dict[str, str]:
    """A local server's environment: this one without credentials, plus the serving settings."""
    return {**without_secrets(base), **_SERVING, "OMP_NUM_THREADS": omp_threads(base)}


def container_environment(base: dict[str, str]) -> dict[str, str]:
    """A server container's environment: only the serving settings (the image brings the rest)."""
    return {**_SERVING, "OMP_NUM_THREADS": omp_threads(base)}


def omp_threads(base: dict[str, str]) -> str:
    """The user's OMP_NUM_THREADS, else this worker's share of the cores."""
    return base.get("OMP_NUM_THREADS") or str(cpu_share(base))


def cpu_share(base: dict[str, str]) -> int:
    """CPU threads for one server's compute: the cores split over pytest-xdist workers, each of which
    serves at once. Oversubscribed OpenMP pools spin against each other (-n 2 on 2 cores ran 2.6x
    slower than -n 1 before this)."""
    return cores_shared_by(int(base.get("PYTEST_XDIST_WORKER_COUNT", "1")))
