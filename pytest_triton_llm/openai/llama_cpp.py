"""llama-cpp-python's OpenAI-compatible server (`python -m llama_cpp.server`, the `llama-cpp` extra) on the GGUF of a
lock engine (the embedded default's SmolLM2): the real /v1 server the project's /v1 suites and migration gate run
against on a CPU. Started on 127.0.0.1 as a managed process (processes.py), waited for, stopped."""

from __future__ import annotations

import importlib.util
import os
import sys
from dataclasses import dataclass
from pathlib import Path

from ..stack.engines.sources import fetch_source
from ..common.errors import TritonLLMError
from ..stack.lock import Lock
from .client import OpenAIEndpoint, start_until_listed
from ..host.processes import ManagedProcess
from ..common.progress import Progress
from ..stack.runtimes.ports import free_ports
from ..stack.runtimes.server import omp_threads, serving_environment

CONTEXT = 2048  # tokens: the lock's max_input_len + max_output_len of the embedded default fit


class LlamaCppUnavailable(TritonLLMError, RuntimeError):
    """llama-cpp-python's server is not installed, or it did not become ready: one line, what to do."""


@dataclass(frozen=True)
class LlamaCppServer:
    url: str  # http://127.0.0.1:PORT/v1
    model: str  # the id /v1/models lists: the GGUF's path
    process: ManagedProcess

    def stop(self) -> None:
        self.process.stop()


def installed() -> str | None:
    """Why llama-cpp-python's server cannot start here, or None."""
    if importlib.util.find_spec("llama_cpp") is None or importlib.util.find_spec("uvicorn") is None:
        return (
            'llama-cpp-python[server] is not installed: pip install -c constraints.txt -e ".[llama-cpp]" (compiles '
            "llama.cpp, about 5 min on 2 cores)"
        )
    return None


def gguf_of(lock: Lock, engine: str, sources_dir: Path, progress: Progress) -> Path:
    """The GGUF file lock engine `engine` is built from (fetched and verified as an engine build fetches it)."""
    if engine not in lock.engines:
        raise LlamaCppUnavailable(f"no engine {engine!r} in the lock (engines: {', '.join(lock.engines)})")
    source = lock.engines[engine].source
    if source.file is None or not source.file.endswith(".gguf"):
        raise LlamaCppUnavailable(f"engine {engine!r} is not built from a GGUF file (source.file {source.file!r})")
    return fetch_source(source, sources_dir, progress)


def command(
    gguf: Path,
    port: int,
    threads: int,
    api_key: str | None = None,
    tls: tuple[Path, Path] | None = None,
    interrupt: bool = False,
) -> list[str]:
    """The server's command line: one model, the context above, and requests that never interrupt each other's
    streams unless `interrupt` (llama-cpp-python's own default ends a running stream as soon as another request waits)."""
    argv = [sys.executable, "-m", "llama_cpp.server", "--model", str(gguf), "--host", "127.0.0.1", "--port", str(port)]
    argv += ["--n_ctx", str(CONTEXT), "--n_threads", str(threads), "--interrupt_requests", str(interrupt)]
    if api_key is not None:
        argv += ["--api_key", api_key]
    if tls is not None:
        argv += ["--ssl_certfile", str(tls[0]), "--ssl_keyfile", str(tls[1])]
    return argv


def start(
    gguf: Path,
    log_path: Path,
    run_dir: Path,
    progress: Progress,
    *,
    port: int | None = None,
    threads: int | None = None,
    api_key: str | None = None,
    tls: tuple[Path, Path] | None = None,
    ca_file: str | None = None,
    interrupt: bool = False,
    timeout_s: float = 120.0,
) -> LlamaCppServer:
    """Start the server and wait until /v1/models answers; LlamaCppUnavailable (with the log's tail) otherwise."""
    missing = installed()
    if missing is not None:
        raise LlamaCppUnavailable(missing)
    port = port or free_ports(1)[0]
    # the user's OMP_NUM_THREADS, else this xdist worker's share: pools that spin must not overlap
    threads = threads or int(omp_threads(dict(os.environ)))
    argv = command(gguf, port, threads, api_key, tls, interrupt)
    process = ManagedProcess(argv, serving_environment(dict(os.environ)), log_path, run_dir, "llama_cpp.server")
    url = f"{'https' if tls else 'http'}://127.0.0.1:{port}/v1"
    headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
    endpoint = OpenAIEndpoint(url, headers, ca_file, timeout_s=5)
    with progress.step(f"llama_cpp.server: {gguf.name} on {url} (log {log_path})"):
        listed = start_until_listed(process, endpoint, "llama_cpp.server", timeout_s, LlamaCppUnavailable)
    return LlamaCppServer(url, listed["id"], process)
