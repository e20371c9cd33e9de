"""The container runtime: tritonserver inside a serving image of the matching version (--triton-image).

A server container publishes its ports on 127.0.0.1 only, mounts the model repository and the
engine read-only, and runs as upstream's docs run it (shm 2 GiB, memlock unlimited, 64 MiB stack,
GPUs by device request). World size > 1 starts one tritonserver per rank under mpirun, as
upstream's scripts/launch_triton_server.py does. Containers carry labels naming the pytest that
owns them: teardown removes them, and the next session removes those whose owner is gone
(SIGKILL). The docker SDK is used directly: testcontainers' reaper (Ryuk) needs a registry pull.
"""

from __future__ import annotations

import os
import socket
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

from ..progress import Progress
from .images import ImageInfo, ensure_image, image_info
from .processes import process_start_time
from .server import Endpoints, ServerStartError, TritonServer, container_environment

LABEL = "io.github.pytest-triton-llm"
MODELS_IN_CONTAINER = "/models"
ENGINES_IN_CONTAINER = "/engines"
SERVER_PORTS = {"http": 8000, "grpc": 8001, "metrics": 8002}  # inside the container; published on loopback


class DockerUnavailable(RuntimeError):
    pass


def docker_client():
    try:
        import docker
    except ImportError:
        raise DockerUnavailable(
            "the container runtime needs the docker SDK: pip install 'pytest-triton-llm[container]'"
        ) from None
    try:
        client = docker.from_env()
        client.ping()
    except Exception as exc:  # the SDK raises DockerException, requests' errors, or FileNotFoundError
        raise DockerUnavailable(
            f"no docker daemon answers ({type(exc).__name__}: {exc}); start dockerd or set DOCKER_HOST"
        ) from None
    return client


def owner_label() -> str:
    """host:pid:start-time of this pytest (a reused pid is told apart by its start time)."""
    return f"{socket.gethostname()}:{os.getpid()}:{process_start_time(os.getpid())}"


def server_args(world_size: int = 1) -> list[list[str]]:
    """tritonserver's arguments inside the container, one list per rank (rank 0 serves the endpoints)."""
    common = [
        f"--model-repository={MODELS_IN_CONTAINER}",
        "--disable-auto-complete-config",
        "--strict-readiness=true",
        "--exit-timeout-secs=10",
    ]
    if world_size == 1:
        return [["tritonserver", *common, *(f"--{k}-port={p}" for k, p in SERVER_PORTS.items())]]
    ranks = []
    for rank in range(world_size):
        args = ["tritonserver", *common, f"--backend-config=python,shm-region-prefix-name=prefix{rank}_"]
        if rank == 0:
            args += [f"--{k}-port={p}" for k, p in SERVER_PORTS.items()]
        else:  # other ranks load only the engine and serve nothing (launch_triton_server.py)
            args += ["--model-control-mode=explicit", "--load-model=tensorrt_llm", "--allow-http=false",
                     "--allow-grpc=false", "--allow-metrics=false"]  # fmt: skip
        ranks.append(args)
    return ranks


def server_command(world_size: int = 1) -> list[str]:
    ranks = server_args(world_size)
    if world_size == 1:
        return ranks[0]
    command = ["mpirun", "--allow-run-as-root"]
    for rank, args in enumerate(ranks):
        command += ["-n", "1", *args] + ([":"] if rank < world_size - 1 else [])
    return command


@dataclass(frozen=True)
class ContainerSpec:
    """One container, as the docker SDK runs it and as `docker run` would (printed for reproduction)."""

    image: str
    command: list[str]
    name: str
    mounts: tuple[tuple[str, str, str], ...] = ()  # (host path, container path, "ro"|"rw")
    ports: tuple[int, ...] = ()  # container ports published on 127.0.0.1, on free host ports
    env: dict[str, str] = field(default_factory=dict)
    # names whose values are taken from this process's environment when the container starts, and
    # printed by name only (`--env=HF_TOKEN`, as docker run reads it from the caller): tokens never appear
    secret_env: tuple[str, ...] = ()
    labels: dict[str, str] = field(default_factory=dict)
    gpus: str | None = None  # "all", "0,1", or None for no GPU
    shm_size: str = "2g"
    ulimits: tuple[tuple[str, int, int], ...] = (("stack", 67108864, 67108864),)

    def docker_run_argv(self) -> list[str]:
        argv = ["docker", "run", "--detach", "--name", self.name, f"--shm-size={self.shm_size}"]
        argv += [f"--ulimit={name}={soft}:{hard}" for name, soft, hard in self.ulimits]
        if self.gpus:
            argv += ["--gpus", self.gpus if self.gpus == "all" else f'"device={self.gpus}"']
        argv += [f"--publish=127.0.0.1::{port}" for port in self.ports]
        argv += [f"--volume={host}:{inside}:{mode}" for host, inside, mode in self.mounts]
        argv += [f"--env={k}={v}" for k, v in sorted(self.env.items())]
        argv += [f"--env={k}" for k in self.secret_env]
        argv += [f"--label={k}={v}" for k, v in sorted(self.labels.items())]
        return argv + [self.image, *self.command]

    def sdk_kwargs(self) -> dict:
        from docker.types import DeviceRequest, Ulimit

        kwargs = {
            "image": self.image, "command": self.command, "name": self.name, "detach": True,
            "shm_size": self.shm_size,
            "ulimits": [Ulimit(name=n, soft=s, hard=h) for n, s, h in self.ulimits],
            "ports": {f"{port}/tcp": ("127.0.0.1", None) for port in self.ports},
            "volumes": {host: {"bind": inside, "mode": mode} for host, inside, mode in self.mounts},
            "environment": {**self.env, **{k: os.environ[k] for k in self.secret_env if k in os.environ}},
            "labels": dict(self.labels),
        }  # fmt: skip
        if self.gpus:
            ids = None if self.gpus == "all" else self.gpus.split(",")
            kwargs["device_requests"] = [DeviceRequest(count=-1 if ids is None else None, device_ids=ids, capabilities=[["gpu"]])]
        return kwargs


def serving_spec(
    image: str, name: str, repository: Path, engine_dir: Path, engine_in_container: str, env: dict[str, str],
    gpus: str | None, world_size: int = 1,
) -> ContainerSpec:  # fmt: skip
    return ContainerSpec(
        image=image,
        command=server_command(world_size),
        name=name,
        mounts=((str(repository), MODELS_IN_CONTAINER, "ro"), (str(engine_dir), engine_in_container, "ro")),
        ports=tuple(SERVER_PORTS.values()),
        env=env,
        labels={LABEL: "server", f"{LABEL}.owner": owner_label()},
        gpus=gpus,
        # pinned host memory for the GPU runtime; a CPU container needs no memlock (and a rootless or
        # sandboxed daemon may not grant it)
        ulimits=((("memlock", -1, -1),) if gpus else ()) + (("stack", 67108864, 67108864),),
    )


class ContainerProcess:
    """A running container with ManagedProcess's interface: start, alive, returncode, stop; its log
    (stdout and stderr) is copied into `log_path` as it is written."""

    def __init__(self, client, spec: ContainerSpec, log_path: Path):
        self.client, self.spec, self.log_path = client, spec, log_path
        self.container = None
        self._copier: threading.Thread | None = None

    def start(self) -> None:
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        self.log_path.write_text("# " + " ".join(self.spec.docker_run_argv()) + "\n")
        from docker.errors import APIError

        try:
            self.container = self.client.containers.run(**self.spec.sdk_kwargs())
        except APIError as exc:
            self.container = self._find()  # created but not started: removed by stop()
            raise ServerStartError(f"docker could not start {self.spec.name}: {exc.explanation or exc}") from None
        self._copier = threading.Thread(target=self._copy_log, name=f"log {self.spec.name}", daemon=True)
        self._copier.start()

    def _find(self):
        from docker.errors import NotFound

        try:
            return self.client.containers.get(self.spec.name)
        except NotFound:
            return None

    def _copy_log(self) -> None:
        try:
            with open(self.log_path, "ab") as log:
                for chunk in self.container.logs(stream=True, follow=True):
                    log.write(chunk)
                    log.flush()
        except Exception:  # the container went away under us; its log so far is kept
            pass

    def host_port(self, port: int) -> int:
        self.container.reload()
        bindings = self.container.attrs["NetworkSettings"]["Ports"].get(f"{port}/tcp") or []
        for binding in bindings:
            if binding.get("HostIp") in ("127.0.0.1", ""):
                return int(binding["HostPort"])
        raise ServerStartError(f"container {self.spec.name}: port {port} is not published on 127.0.0.1")

    def _state(self) -> dict:
        try:
            self.container.reload()
        except Exception:
            return {"Running": False, "ExitCode": None}
        return self.container.attrs.get("State", {})

    def alive(self) -> bool:
        return self.container is not None and bool(self._state().get("Running"))

    @property
    def returncode(self) -> int | None:
        if self.container is None:
            return None
        state = self._state()
        return None if state.get("Running") else state.get("ExitCode")

    def stop(self, grace_s: float = 15.0) -> None:
        if self.container is None:
            return
        try:
            self.container.stop(timeout=int(grace_s))
        except Exception:
            pass
        if self._copier is not None:
            self._copier.join(timeout=5)
        try:
            self.container.remove(force=True)
        except Exception:
            pass


def start_container_server(
    client, spec: ContainerSpec, log_path: Path, progress: Progress, timeout_s: float, version_hint: str
) -> TritonServer:
    process = ContainerProcess(client, spec, log_path)
    progress.say(f"server {spec.name}: starting a container of {spec.image} (Triton {version_hint}); log {log_path}")
    try:
        process.start()
        http, grpc, metrics = (process.host_port(p) for p in SERVER_PORTS.values())
        server = TritonServer(spec.name, Endpoints(f"127.0.0.1:{http}", f"127.0.0.1:{grpc}", f"127.0.0.1:{metrics}"),
                              log_path, process, f"{spec.image}: {spec.command[0]}")  # fmt: skip
        server.wait_ready(timeout_s, progress)
    except BaseException:  # a failed start, or Ctrl-C while waiting: never leave the container behind
        process.stop(grace_s=2)
        raise
    return server


def reap_containers(client, progress: Progress) -> int:
    """Remove server containers whose owning pytest on this host is gone (it was SIGKILLed)."""
    host = socket.gethostname()
    reaped = 0
    for container in client.containers.list(all=True, filters={"label": f"{LABEL}.owner"}):
        owner_host, _, rest = container.labels.get(f"{LABEL}.owner", "").partition(":")
        pid, _, start = rest.partition(":")
        if owner_host != host or not pid.isdigit():
            continue
        if process_start_time(int(pid)) == (start or None):
            continue  # its pytest still runs
        container.remove(force=True)
        reaped += 1
        progress.say(f"removed container {container.name} left by a killed session (pid {pid})")
    return reaped


@dataclass
class ContainerRuntime:
    """Serves deployments in containers of one image; the image is resolved (pulled) on first use."""

    reference: str
    gpus: str | None
    progress: Progress
    trtllm_examples: str | None = None  # a host directory of TensorRT-LLM examples for images without them
    _client: object = None
    _image: ImageInfo | None = None
    _count: int = 0

    name = "container"

    @property
    def client(self):
        if self._client is None:
            self._client = docker_client()
            reap_containers(self._client, self.progress)
        return self._client

    @property
    def image(self) -> ImageInfo:
        if self._image is None:
            start = time.monotonic()
            self._image = image_info(ensure_image(self.client, self.reference, self.progress))
            if not self._image.triton_version:
                raise ServerStartError(
                    f"image {self.reference} does not declare TRITON_SERVER_VERSION in its environment, "
                    "as NGC tritonserver images do; is it a Triton image?"
                )
            self.progress.say(f"image {self.reference}: Triton {self._image.triton_version} "
                              f"({self._image.digest[:19]}, {time.monotonic() - start:.1f} s)")  # fmt: skip
        return self._image

    @property
    def triton_version(self) -> str:
        return self.image.triton_version

    def describe(self) -> str:
        return f"containers of {self.reference} (docker; GPUs {self.gpus or 'for tensorrtllm engines: all'})"

    @property
    def entry(self):
        """compat.toml's entry for the image (None for images it does not list, such as local builds)."""
        from ..compat import load_compat

        return load_compat().for_image(self.reference)

    def trtllm_executor(self):
        from ..engines.executors import ContainerExecutor, ExecutorError

        entry = self.entry
        if entry is None:
            raise ExecutorError(
                f"image {self.reference} is not an NGC trtllm image listed in compat.toml, so its TensorRT-LLM "
                "version and build commands are unknown: pass --triton-image YY.MM-trtllm"
            )
        examples = Path(self.trtllm_examples).expanduser().absolute() if self.trtllm_examples else None
        return ContainerExecutor(self.client, self.reference, self.image.digest, entry, self.gpus, examples,
                                 labels={LABEL: "build", f"{LABEL}.owner": owner_label()})  # fmt: skip

    def engine_dir_in_server(self, engine_name: str) -> str:
        return f"{ENGINES_IN_CONTAINER}/{engine_name}"

    def start(self, deployment_id: str, repository: Path, engine_dir: Path, engine_name: str, log_path: Path,
              timeout_s: float, world_size: int = 1, gpu: bool = False) -> TritonServer:  # fmt: skip
        """`gpu`: the engine needs one (tensorrtllm); --gpus overrides either way."""
        self._count += 1
        gpus = self.gpus or ("all" if gpu else None)
        name = f"triton-llm-{os.getpid()}-{self._count}-{''.join(c if c.isalnum() else '-' for c in deployment_id)}"
        spec = serving_spec(self.reference, name, repository, engine_dir, self.engine_dir_in_server(engine_name),
                            container_environment(dict(os.environ)), gpus, world_size)  # fmt: skip
        server = start_container_server(self.client, spec, log_path, self.progress, timeout_s, self.triton_version)
        server.name = deployment_id
        return server
