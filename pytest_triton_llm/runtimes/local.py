"""The local (embedded) runtime: tritonserver from the nvidia-pytriton wheel, on loopback ports."""

from __future__ import annotations

import os
from pathlib import Path

from ..progress import Progress
from .ports import free_ports
from .processes import ManagedProcess
from .server import Endpoints, ServerStartError, TritonServer, serving_environment
from .tritonserver_wheel import WheelServer, locate, prepare_backends, server_environment

_PORT_RETRIES = 3


def tritonserver_command(binary: Path, repository: Path, backends: Path, http: int, grpc: int, metrics: int) -> list[str]:
    host = "127.0.0.1"  # never listen beyond loopback
    return [
        str(binary),
        "--model-repository", str(repository),
        "--backend-directory", str(backends),
        "--http-address", host, "--http-port", str(http),
        "--grpc-address", host, "--grpc-port", str(grpc),
        "--metrics-address", host, "--metrics-port", str(metrics),
        "--allow-gpu-metrics", "false",
        "--disable-auto-complete-config",  # configs are complete; saves a python stub per model
        "--strict-readiness", "true",
        "--exit-timeout-secs", "10",
        "--log-verbose", "0",
    ]  # fmt: skip


class LocalRuntime:
    """The embedded default: tritonserver from the nvidia-pytriton wheel, as a subprocess."""

    name = "local"
    reference = "local"

    def __init__(self, cache_root: Path, progress: Progress):
        self.cache_root, self.progress = cache_root, progress
        self.wheel = locate()

    @property
    def triton_version(self) -> str:
        return self.wheel.triton_version

    def engine_dir_in_server(self, engine_name: str) -> None:
        return None  # the server reads the engine where the cache keeps it

    def start(self, deployment_id: str, repository: Path, engine_dir: Path, engine_name: str, log_path: Path,
              timeout_s: float, world_size: int = 1, gpu: bool = False) -> TritonServer:  # fmt: skip
        if world_size != 1:
            raise ServerStartError(f"{deployment_id}: world size {world_size} needs --triton-image (mpirun in a container)")
        return start_local_server(self.wheel, deployment_id, repository, self.cache_root, log_path, self.progress,
                                  timeout_s)  # fmt: skip


def start_local_server(
    wheel: WheelServer, name: str, repository: Path, cache_root: Path, log_path: Path, progress: Progress, timeout_s: float
) -> TritonServer:
    backends = prepare_backends(wheel, cache_root)
    env = server_environment(wheel, serving_environment(dict(os.environ)))
    for attempt in range(1, _PORT_RETRIES + 1):
        http, grpc, metrics = free_ports(3)
        argv = tritonserver_command(wheel.binary, repository, backends, http, grpc, metrics)
        process = ManagedProcess(argv, env, log_path, cache_root / "run", label=f"tritonserver {name}")
        server = TritonServer(name, Endpoints(f"127.0.0.1:{http}", f"127.0.0.1:{grpc}", f"127.0.0.1:{metrics}"),
                              log_path, process, str(wheel.binary))  # fmt: skip
        progress.say(
            f"server {name}: starting tritonserver {wheel.triton_version} (nvidia-pytriton {wheel.wheel_version}) "
            f"on http {server.endpoints.http}, grpc {server.endpoints.grpc}; log {log_path}"
        )
        try:
            process.start()
            server.wait_ready(timeout_s, progress)
        except ServerStartError:
            server.stop()
            if "Address already in use" in server.log_tail(200) and attempt < _PORT_RETRIES:
                progress.say(f"server {name}: a port was taken meanwhile; retrying on new ports")
                continue
            raise
        except BaseException:  # Ctrl-C while waiting: never leave the server behind
            server.stop()
            raise
        return server
    raise AssertionError("unreachable")
