"""Docker primitives shared by the container runtime and tensorrtllm build containers: the SDK client,
owner labels and the reaper, a container spec (printed as the equivalent `docker run`), a running
container with a process's interface, and image pulls.

Containers carry labels naming the pytest that owns them: their owner removes them, and the next session
removes those whose owner is gone (SIGKILL). The docker SDK is used directly: testcontainers' reaper
(Ryuk) needs a registry pull.
"""

from __future__ import annotations

import os
import socket
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from ..common.progress import Progress
from .processes import process_start_time
from ..common.errors import TritonLLMError

if TYPE_CHECKING:
    from docker.models.containers import Container

LABEL = "io.github.pytest-triton-llm"


class DockerUnavailable(TritonLLMError, RuntimeError):
    pass


class ContainerError(RuntimeError):
    pass


def docker_sdk():
    """The docker SDK module; DockerUnavailable (one line saying what to install) without it."""
    try:
        import docker
    except ImportError:
        raise DockerUnavailable(
            "the container runtime needs the docker SDK: pip install 'pytest-triton-llm[container]'"
        ) from None
    return docker


def docker_client():
    docker = docker_sdk()
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


def owner_labels(role: str) -> dict[str, str]:
    return {LABEL: role, f"{LABEL}.owner": owner_label()}


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
            "image": self.image,
            "command": self.command,
            "name": self.name,
            "detach": True,
            "shm_size": self.shm_size,
            "ulimits": [Ulimit(name=n, soft=s, hard=h) for n, s, h in self.ulimits],
            "ports": {f"{port}/tcp": ("127.0.0.1", None) for port in self.ports},
            "volumes": {host: {"bind": inside, "mode": mode} for host, inside, mode in self.mounts},
            "environment": {**self.env, **{k: os.environ[k] for k in self.secret_env if k in os.environ}},
            "labels": dict(self.labels),
        }
        if self.gpus:  # every GPU (count -1), or those named (an omitted count reads as 0, omitted ids as [])
            request = (
                DeviceRequest(count=-1, capabilities=[["gpu"]])
                if self.gpus == "all"
                else DeviceRequest(device_ids=self.gpus.split(","), capabilities=[["gpu"]])
            )
            kwargs["device_requests"] = [request]
        return kwargs


def run_container(client, spec: ContainerSpec):
    """Start `spec` detached; ContainerError with docker's explanation when it cannot."""
    from docker.errors import APIError

    try:
        return client.containers.run(**spec.sdk_kwargs())
    except APIError as exc:
        raise ContainerError(f"docker could not start {spec.name}: {exc.explanation or exc}") from None


def image_has_file(client, image: str, path: str) -> bool:
    """Whether `image` holds a file at `path`: a throwaway container (no network, no GPUs) runs `test -f` and is
    removed."""
    from docker.errors import ContainerError as ExitedNonZero

    try:
        client.containers.run(
            image, ["test", "-f", path], entrypoint=[], network_disabled=True, remove=True, labels=owner_labels("probe")
        )
    except ExitedNonZero:
        return False
    return True


class ContainerProcess:
    """A running container with ManagedProcess's interface: start, alive, returncode, stop; its log
    (stdout and stderr) is copied into `log_path` as it is written."""

    def __init__(self, client, spec: ContainerSpec, log_path: Path):
        self.client, self.spec, self.log_path = client, spec, log_path
        self.container: Container | None = None
        self._copier: threading.Thread | None = None

    def start(self) -> None:
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        self.log_path.write_text("# " + " ".join(self.spec.docker_run_argv()) + "\n")
        try:
            self.container = run_container(self.client, self.spec)
        except ContainerError:
            self.container = self._find()  # created but not started: removed by stop()
            raise
        self._copier = threading.Thread(target=self._copy_log, name=f"log {self.spec.name}", daemon=True)
        self._copier.start()

    def _find(self):
        from docker.errors import NotFound

        try:
            return self.client.containers.get(self.spec.name)
        except NotFound:
            return None

    def _started(self) -> Container:
        assert self.container is not None, f"container {self.spec.name} is not started"
        return self.container

    def _copy_log(self) -> None:
        try:
            with open(self.log_path, "ab") as log:
                for chunk in self._started().logs(stream=True, follow=True):
                    log.write(chunk)
                    log.flush()
        except Exception:  # the container went away under us; its log so far is kept
            pass

    def host_port(self, port: int) -> int:
        container = self._started()
        container.reload()
        bindings = container.attrs["NetworkSettings"]["Ports"].get(f"{port}/tcp") or []
        for binding in bindings:
            if binding.get("HostIp") in ("127.0.0.1", ""):
                return int(binding["HostPort"])
        raise ContainerError(f"container {self.spec.name}: port {port} is not published on 127.0.0.1")

    def _state(self) -> dict:
        try:
            container = self._started()
            container.reload()
        except Exception:
            return {"Running": False, "ExitCode": None}
        return container.attrs.get("State", {})

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


def reap_containers(client, progress: Progress) -> int:
    """Remove containers whose owning pytest on this host is gone (it was SIGKILLed)."""
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


@dataclass(frozen=True)
class ImageInfo:
    reference: str
    id: str  # sha256:... of the local image
    digest: str  # the registry digest where the image came from one, else its id
    env: dict[str, str]

    @property
    def triton_version(self) -> str | None:
        """As NGC images (and ours) declare it in their environment."""
        return self.env.get("TRITON_SERVER_VERSION")


def image_info(image) -> ImageInfo:
    attrs = image.attrs
    config = attrs.get("Config") or {}
    env = dict(item.split("=", 1) for item in config.get("Env") or [] if "=" in item)
    digests = attrs.get("RepoDigests") or []
    reference = (image.tags or [attrs["Id"]])[0]
    return ImageInfo(reference, attrs["Id"], digests[0] if digests else attrs["Id"], env)


def ensure_image(client, reference: str, progress: Progress):
    """The local image, pulled (with progress) when missing."""
    from docker.errors import APIError, ImageNotFound

    try:
        return client.images.get(reference)
    except ImageNotFound:
        pass
    progress.say(f"image {reference}: not here; pulling")
    repository, _, tag = reference.rpartition(":") if ":" in reference.split("/")[-1] else (reference, "", "latest")
    layers: dict[str, tuple[int, int]] = {}
    next_note = time.monotonic() + 5
    try:
        for event in client.api.pull(repository, tag=tag, stream=True, decode=True):
            if "error" in event:
                raise ContainerError(f"pulling {reference}: {event['error']}")
            detail = event.get("progressDetail") or {}
            if event.get("id") and detail.get("total"):
                layers[event["id"]] = (detail.get("current", 0), detail["total"])
            if time.monotonic() >= next_note:
                done = sum(c for c, _ in layers.values()) / 1e6
                total = sum(t for _, t in layers.values()) / 1e6
                progress.say(f"image {reference}: {done:,.0f} of {total:,.0f} MB in {len(layers)} layers")
                next_note = time.monotonic() + 5
    except APIError as exc:
        raise ContainerError(
            f"pulling {reference} failed: {exc.explanation or exc}. For nvcr.io run `docker login nvcr.io` "
            "(user $oauthtoken, an NGC API key) or pull the image yourself"
        ) from None
    progress.say(f"image {reference}: pulled")
    return client.images.get(reference)
