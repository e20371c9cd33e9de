"""The local runtime: tritonserver as a subprocess on loopback ports (the serving image's, or the wheel's)."""

from __future__ import annotations

import dataclasses
import os
import secrets
import tempfile
from pathlib import Path
from typing import ClassVar

from ..compat import ImageEntry, installed_tensorrt_llm, load_compat
from ..engines.base import BuildSite
from ...host.hardware import first_gpu, visible_gpus
from ...host.images import NO_IMAGE
from ...host.processes import ManagedProcess
from ...common.progress import Progress
from ...common.usage import OptionError
from .base import Launch, RuntimeBase, RuntimeUnavailable, ServerOptions
from .discovery import FoundServer, ServerNotFound, find_tritonserver
from .ports import free_ports
from .server import PORT_TAKEN, Endpoints, ServerStartError, TritonServer, serving_environment, tritonserver_args
from . import warm
from .tritonserver_wheel import prepare_backends, server_environment
from .version_guard import VersionMismatch, check_versions

_PORT_RETRIES = 3
HOST = "127.0.0.1"  # never listen beyond loopback


def tritonserver_command(
    binary: Path, repository: Path, backends: Path | None, http: int, grpc: int, metrics: int, shm_prefix: str
) -> list[str]:
    return tritonserver_args(
        repository,
        {"http": http, "grpc": grpc, "metrics": metrics},
        binary=binary,
        host=HOST,
        backends=backends,
        # the python backend's shared memory regions named for this server alone, so that its stop removes what the
        # stubs it did not unload left in /dev/shm (16 BLS instances a server, 1 MiB each, for every session)
        extra=("--allow-gpu-metrics=false", "--log-verbose=0", f"--backend-config=python,shm-region-prefix-name={shm_prefix}"),
    )


class LocalRuntime(RuntimeBase):
    """tritonserver as a subprocess on loopback ports: the serving image's own when pytest runs inside one
    (discovery.py), else the nvidia-pytriton wheel's, the embedded default."""

    name: ClassVar[str] = "local"
    keeps_warm: ClassVar[bool] = True
    reference = NO_IMAGE

    def __init__(
        self,
        cache_root: Path,
        progress: Progress,
        found: FoundServer,
        entry: ImageEntry | None = None,
        trtllm_examples: str | None = None,
        gpus: str | None = None,
        keep_warm_s: float = 0.0,
    ):
        self.cache_root, self.progress, self.found = cache_root, progress, found
        self.gpus = gpus  # --triton-gpus: the servers' CUDA_VISIBLE_DEVICES ("none": no GPU; None: as inherited)
        self.entry = entry  # the compat.toml image this server stands for (version_guard), if known
        self.trtllm_examples = trtllm_examples
        self.keep_warm_s = keep_warm_s  # --triton-keep-warm: servers left warm for later sessions (warm.py)
        self._version = found.declared_version

    @classmethod
    def default_for(cls, options: ServerOptions) -> bool:
        return options.remote is None and options.image is None  # the embedded default

    @classmethod
    def create(cls, options: ServerOptions, cache_root: Path, progress: Progress) -> LocalRuntime:
        """The tritonserver found here, checked by the version guard against --triton-image (pytest inside
        that image) and against the installed tensorrt_llm."""
        requested = None
        if options.image is not None:
            requested = load_compat().for_image(options.image.reference)
            if requested is None:
                raise OptionError(
                    f"--triton-runtime local --triton-image {options.image.given}: give an NGC image listed in "
                    "compat.toml (YY.MM-trtllm), whose versions the local tritonserver and tensorrt_llm are checked against"
                )
        try:
            found = find_tritonserver(options.binary, dict(os.environ))
            entry = check_versions(load_compat(), found, installed_tensorrt_llm(), requested)
        except (ServerNotFound, VersionMismatch) as exc:
            raise RuntimeUnavailable(str(exc)) from None
        return cls(cache_root, progress, found, entry, options.trtllm_examples, options.gpus, options.keep_warm_s)

    def describe(self) -> str:
        return self.found.describe()

    def header_lines(self) -> list[str]:
        lines = [f"triton-llm: local runtime: {self.describe()}"]
        if self.entry is not None:
            lines.append(f"triton-llm: versions as image {self.entry.describe()} (compat.toml)")
        return lines

    def report_block(self) -> dict:
        found, entry = self.found, self.entry
        image = f" = image {entry.tag}-trtllm" if entry else ""
        return {  # its summary is the terminal summary's line
            "summary": f"{found.binary} ({found.origin}), Triton {found.declared_version or '?'}{image}",
            "binary": str(found.binary),
            "origin": found.origin,
            "declared_version": found.declared_version,
            "backends": str(found.backends) if found.backends else "wheel",
            "compat_image": entry.tag if entry else None,
        }

    @property
    def gpu(self) -> str | None:
        return first_gpu(self.gpus, dict(os.environ))

    @property
    def triton_version(self) -> str:
        """Picks the model templates: declared by the image or the wheel, else asked of the server itself."""
        if self._version is None:
            with tempfile.TemporaryDirectory(prefix="triton-version-") as tmp:
                (Path(tmp) / "models").mkdir()
                server = self._start("version probe", Path(tmp) / "models", Path(tmp) / "tritonserver.log", 60.0)
                server.stop()
            if server.version is None:  # it answered /v2 without one: no template family can be picked
                raise ServerStartError(f"{self.found.binary}: its server metadata names no version ({server.metadata})")
            self._version = server.version
            self.progress.say(f"{self.found.binary}: Triton {self._version}")
            if self.entry is None:  # now that the version is known, the guard can place it (and check tensorrt_llm)
                known = dataclasses.replace(self.found, declared_version=self._version)
                try:
                    self.entry = check_versions(load_compat(), known, installed_tensorrt_llm(), None)
                except VersionMismatch as exc:
                    raise ServerStartError(str(exc)) from None
        return self._version

    def known_version(self) -> str:
        return self.triton_version  # declared by the image or the wheel, else asked of the server once

    def python_models_in_image(self) -> str | None:
        """Inside the serving image (the guard placed it), its own copy where this filesystem has one."""
        paths = self.entry.python_models if self.entry is not None else ()
        return next((p for p in paths if (Path(p) / "preprocessing" / "1" / "model.py").is_file()), None)

    def build_site(self) -> BuildSite:
        """Local subprocesses: this interpreter's tensorrt_llm, which the version guard checked."""
        unknown = (
            f"no image in compat.toml ships Triton {self.triton_version} with the installed tensorrt_llm, so the "
            "build commands of its TensorRT-LLM version are unknown; run inside an NGC trtllm image"
        )
        return BuildSite(entry=self.entry, unknown=unknown, examples=self.trtllm_examples)

    def start(self, launch: Launch) -> TritonServer:
        if launch.world_size != 1:
            raise ServerStartError(
                f"{launch.deployment_id}: world size {launch.world_size} needs --triton-image (mpirun in a container)"
            )
        if self.switches_faults() and not (launch.faulted or launch.own):
            server = self._take_warm(launch)
        else:
            server = self._start(launch.deployment_id, launch.repository, launch.log_path, launch.timeout_s)
        if self._version and server.version != self._version:
            server.stop()
            raise ServerStartError(
                f"{self.found.binary} says it is Triton {server.version}, but {self.found.origin} declares "
                f"Triton {self._version} (TRITON_SERVER_VERSION): the templates were rendered for the wrong version"
            )
        return server

    def _server_setup(self) -> tuple[Path | None, dict[str, str]]:
        """The backends directory and the environment a server of this runtime starts with."""
        wheel = self.found.wheel
        backends = prepare_backends(wheel, self.cache_root) if wheel else self.found.backends
        env = server_environment(wheel.libs if wheel else None, serving_environment(dict(os.environ)))
        env.update(visible_gpus(self.gpus))
        return backends, env

    def _start(self, name: str, repository: Path, log_path: Path, timeout_s: float) -> TritonServer:
        backends, env = self._server_setup()
        return start_local_server(
            self.found, backends, env, name, repository, self.cache_root, log_path, self.progress, timeout_s
        )

    def _take_warm(self, launch: Launch) -> TritonServer:
        """A warm server of this repository and engine build (warm.py): a free one left by an earlier session, else one
        started now."""
        name, repository = launch.deployment_id, launch.repository
        backends, env = self._server_setup()
        served = (str(self.found.binary), str(backends) if backends else None, launch.engine_dir / "manifest.json")
        digest = warm.repository_digest(repository, *served, env)
        for attempt in range(1, _PORT_RETRIES + 1):
            http, grpc, metrics = free_ports(3)
            shm_prefix = f"triton_llm_{secrets.token_hex(6)}_"
            keeper = {
                "argv": tritonserver_command(self.found.binary, repository, backends, http, grpc, metrics, shm_prefix),
                "env": env,
                "shm_prefix": shm_prefix,
                "endpoints": {"http": f"{HOST}:{http}", "grpc": f"{HOST}:{grpc}", "metrics": f"{HOST}:{metrics}"},
                "label": name,
                "idle_s": self.keep_warm_s,
            }
            try:
                return warm.take(
                    self.cache_root, digest, name, repository, keeper, launch.timeout_s, self.progress, launch.fault_switch
                )
            except ServerStartError as error:  # its message holds the log's error lines
                if PORT_TAKEN not in str(error) or attempt == _PORT_RETRIES:
                    raise
                self.progress.say(f"server {name}: a port was taken meanwhile; retrying on new ports")
        raise AssertionError("unreachable")

    def switches_faults(self) -> bool:
        return self.keep_warm_s > 0  # its warm servers read the stand-in's fault switch (warm.py)


def start_local_server(
    found: FoundServer,
    backends: Path | None,
    env: dict[str, str],
    name: str,
    repository: Path,
    cache_root: Path,
    log_path: Path,
    progress: Progress,
    timeout_s: float,
) -> TritonServer:
    for attempt in range(1, _PORT_RETRIES + 1):
        http, grpc, metrics = free_ports(3)
        shm_prefix = f"triton_llm_{secrets.token_hex(6)}_"
        argv = tritonserver_command(found.binary, repository, backends, http, grpc, metrics, shm_prefix)
        process = ManagedProcess(argv, env, log_path, cache_root / "run", f"tritonserver {name}", shm_prefix)
        server = TritonServer(
            name, Endpoints(f"{HOST}:{http}", f"{HOST}:{grpc}", f"{HOST}:{metrics}"), log_path, process, str(found.binary)
        )
        progress.say(
            f"server {name}: starting {found.binary} ({found.origin}) on http {server.endpoints.http}, "
            f"grpc {server.endpoints.grpc}; log {log_path}"
        )
        try:
            process.start()
            server.wait_ready(timeout_s, progress)
        except ServerStartError:
            server.stop()
            if PORT_TAKEN in server.log_tail(200) and attempt < _PORT_RETRIES:
                progress.say(f"server {name}: a port was taken meanwhile; retrying on new ports")
                continue
            raise
        except BaseException:  # Ctrl-C while waiting: never leave the server behind
            server.stop()
            raise
        return server
    raise AssertionError("unreachable")
