"""The container runtime: tritonserver inside a serving image of the matching version (--triton-image).

A server container publishes its ports on 127.0.0.1 only, mounts the model repository and the
engine read-only (and the LoRA adapter cache at its host path, so an llmapi request's lora_path names the same
directory inside), and runs as upstream's docs run it (shm 2 GiB, memlock unlimited, 64 MiB stack,
GPUs by device request). World size > 1 starts one tritonserver per rank under mpirun, as
upstream's scripts/launch_triton_server.py does. Containers carry owner labels (containers.py).
"""

from __future__ import annotations

import os
import time
from pathlib import Path
from typing import ClassVar

from ..compat import load_compat
from ...host.containers import (
    ContainerError,
    ContainerProcess,
    ContainerSpec,
    DockerUnavailable,
    ImageInfo,
    docker_client,
    docker_sdk,
    ensure_image,
    image_has_file,
    image_info,
    owner_labels,
    reap_containers,
)
from ..engines.base import BuildSite
from ...host.hardware import first_gpu
from ...host.images import ImageRef
from ...common.progress import Progress
from ...common.usage import OptionError
from .base import Launch, RuntimeBase, RuntimeUnavailable, ServerOptions
from .server import Endpoints, ServerStartError, TritonServer, container_environment, tritonserver_args

MODELS_IN_CONTAINER = "/models"
ENGINES_IN_CONTAINER = "/engines"
SERVER_PORTS = {"http": 8000, "grpc": 8001, "metrics": 8002}  # inside the container; published on loopback


def server_args(world_size: int = 1) -> list[list[str]]:
    """tritonserver's arguments inside the container, one list per rank (rank 0 serves the endpoints)."""
    if world_size == 1:
        return [tritonserver_args(MODELS_IN_CONTAINER, SERVER_PORTS)]
    ranks = []
    for rank in range(world_size):
        shm = f"--backend-config=python,shm-region-prefix-name=prefix{rank}_"
        if rank == 0:
            ranks.append(tritonserver_args(MODELS_IN_CONTAINER, SERVER_PORTS, extra=(shm,)))
        else:  # other ranks load only the engine and serve nothing (launch_triton_server.py)
            extra = (shm, "--model-control-mode=explicit", "--load-model=tensorrt_llm")
            ranks.append(tritonserver_args(MODELS_IN_CONTAINER, {}, extra=extra))
    return ranks


def server_command(world_size: int = 1) -> list[str]:
    ranks = server_args(world_size)
    if world_size == 1:
        return ranks[0]
    command = ["mpirun", "--allow-run-as-root"]
    for rank, args in enumerate(ranks):
        command += ["-n", "1", *args] + ([":"] if rank < world_size - 1 else [])
    return command


def serving_spec(
    image: str,
    name: str,
    repository: Path,
    engine_dir: Path,
    engine_in_container: str,
    env: dict[str, str],
    gpus: str | None,
    world_size: int = 1,
    same_path: tuple[Path, ...] = (),
) -> ContainerSpec:
    """`same_path`: host directories mounted read-only at the same path inside."""
    return ContainerSpec(
        image=image,
        command=server_command(world_size),
        name=name,
        mounts=(
            (str(repository), MODELS_IN_CONTAINER, "ro"),
            (str(engine_dir), engine_in_container, "ro"),
            *((str(path), str(path), "ro") for path in same_path),
        ),
        ports=tuple(SERVER_PORTS.values()),
        env=env,
        labels=owner_labels("server"),
        gpus=gpus,
        # pinned host memory for the GPU runtime; a CPU container needs no memlock (and a rootless or
        # sandboxed daemon may not grant it)
        ulimits=((("memlock", -1, -1),) if gpus else ()) + (("stack", 67108864, 67108864),),
    )


def start_container_server(
    client, spec: ContainerSpec, log_path: Path, progress: Progress, timeout_s: float, version_hint: str
) -> TritonServer:
    process = ContainerProcess(client, spec, log_path)
    progress.say(f"server {spec.name}: starting a container of {spec.image} (Triton {version_hint}); log {log_path}")
    try:
        process.start()
        http, grpc, metrics = (process.host_port(p) for p in SERVER_PORTS.values())
        server = TritonServer(
            spec.name,
            Endpoints(f"127.0.0.1:{http}", f"127.0.0.1:{grpc}", f"127.0.0.1:{metrics}"),
            log_path,
            process,
            f"{spec.image}: {spec.command[0]}",
        )
        server.wait_ready(timeout_s, progress)
    except ContainerError as exc:
        process.stop(grace_s=2)
        raise ServerStartError(str(exc)) from None
    except BaseException:  # a failed start, or Ctrl-C while waiting: never leave the container behind
        process.stop(grace_s=2)
        raise
    return server


class ContainerRuntime(RuntimeBase):
    """Serves deployments in containers of one image; the image is resolved (pulled) on first use."""

    name: ClassVar[str] = "container"
    markers: ClassVar[dict[str, str]] = {"container": "needs docker and a Triton image"}

    def __init__(
        self,
        image: ImageRef,
        gpus: str | None,
        progress: Progress,
        trtllm_examples: str | None = None,
        adapters: Path | None = None,
    ):
        self.image_ref, self.gpus, self.progress = image, gpus, progress
        self.adapters = adapters  # the LoRA adapter cache, which llmapi requests name by path
        self.trtllm_examples = trtllm_examples  # a host directory of TensorRT-LLM examples for images without them
        self.reference = image.reference
        self.entry = load_compat().for_image(image.reference)  # None for images compat.toml does not list
        self._client = None
        self._image: ImageInfo | None = None
        self._python_models: str | None = None  # "" once asked: the image has none
        self._count = 0

    @classmethod
    def default_for(cls, options: ServerOptions) -> bool:
        return options.remote is None and options.image is not None  # --triton-image alone: started from this host

    @classmethod
    def create(cls, options: ServerOptions, cache_root: Path, progress: Progress) -> ContainerRuntime:
        if options.image is None:
            raise OptionError("--triton-runtime container needs --triton-image: the image to start")
        if options.binary:
            raise OptionError("--triton-binary is for the local runtime: a container runs its image's own tritonserver")
        tag = options.image.tag
        if tag and options.image.given == f"{tag}-trtllm" and (why := load_compat().no_trtllm_image(tag)):
            raise OptionError(f"--triton-image {options.image.given}: {why}")
        try:
            docker_sdk()  # the daemon is asked when a deployment is first served: collecting needs none
        except DockerUnavailable as exc:
            raise RuntimeUnavailable(f"--triton-image {options.image.given}: {exc}") from None
        return cls(options.image, options.gpus, progress, options.trtllm_examples, cache_root / "adapters")

    @property
    def client(self):
        if self._client is None:
            try:
                self._client = docker_client()
            except DockerUnavailable as exc:
                raise ServerStartError(str(exc)) from None
            reap_containers(self._client, self.progress)
        return self._client

    @property
    def image(self) -> ImageInfo:
        if self._image is None:
            start = time.monotonic()
            try:
                self._image = image_info(ensure_image(self.client, self.reference, self.progress))
            except ContainerError as exc:
                raise ServerStartError(str(exc)) from None
            if not self._image.triton_version:
                raise self._no_version()
            self.progress.say(
                f"image {self.reference}: Triton {self._image.triton_version} "
                f"({self._image.digest[:19]}, {time.monotonic() - start:.1f} s)"
            )
        return self._image

    def _no_version(self) -> ServerStartError:
        return ServerStartError(
            f"image {self.reference} does not declare TRITON_SERVER_VERSION in its environment, "
            "as NGC tritonserver images do; is it a Triton image?"
        )

    @property
    def triton_version(self) -> str:
        version = self.image.triton_version
        if not version:  # an image known_version() read before `image` could check it
            raise self._no_version()
        return version

    def known_version(self) -> str | None:
        """compat.toml's for an NGC tag; else the image's TRITON_SERVER_VERSION where the image is here already."""
        if self.entry is not None:
            return self.entry.triton
        if self._image is None:
            try:
                self._image = image_info(docker_client().images.get(self.reference))
            except Exception:  # noqa: BLE001 - no daemon, or not pulled yet: not known before it is served
                return None
        return self._image.triton_version or None

    @property
    def gpu(self) -> str | None:
        return first_gpu(self.gpus, {})  # containers see the GPUs docker gives them, whatever this shell's variables

    def describe(self) -> str:
        return f"containers of {self.reference} (docker; GPUs {self.gpus or 'for tensorrtllm engines: all'})"

    def header_lines(self) -> list[str]:
        return [f"triton-llm: container runtime: {self.describe()}"]

    def build_site(self) -> BuildSite:
        """A build container of the same image."""
        unknown = (
            f"image {self.reference} is not an NGC trtllm image listed in compat.toml, so its TensorRT-LLM "
            "version and build commands are unknown: pass --triton-image YY.MM-trtllm"
        )
        if self.entry is None:
            return BuildSite(entry=None, unknown=unknown)
        return BuildSite(
            entry=self.entry,
            examples=self.trtllm_examples,
            docker=self.client,
            image=self.reference,
            image_digest=self.image.digest,
            gpus=self.gpus,
            labels=owner_labels("build"),
        )

    def engine_dir_in_server(self, engine_name: str) -> str:
        return f"{ENGINES_IN_CONTAINER}/{engine_name}"

    def python_models_in_image(self) -> str | None:
        """The first of compat.toml's paths for this image that holds preprocessing/1/model.py, asked of the image once
        (a throwaway container runs `test -f`)."""
        if self._python_models is None:
            paths = self.entry.python_models if self.entry is not None else ()
            self._python_models = next(
                (p for p in paths if image_has_file(self.client, self.reference, f"{p}/preprocessing/1/model.py")), ""
            )
        return self._python_models or None

    def start(self, launch: Launch) -> TritonServer:
        """`launch.gpu`: the engine needs one; --triton-gpus overrides either way."""
        self._count += 1
        gpus = None if self.gpus == "none" else self.gpus or ("all" if launch.gpu else None)
        slug = "".join(c if c.isalnum() else "-" for c in launch.deployment_id)
        if self.adapters is not None:
            self.adapters.mkdir(parents=True, exist_ok=True)  # docker would create a missing one as root
        spec = serving_spec(
            self.reference,
            f"triton-llm-{os.getpid()}-{self._count}-{slug}",
            launch.repository,
            launch.engine_dir,
            self.engine_dir_in_server(launch.engine_name),
            container_environment(dict(os.environ)),
            gpus,
            launch.world_size,
            same_path=(self.adapters,) if self.adapters is not None else (),
        )
        server = start_container_server(self.client, spec, launch.log_path, self.progress, launch.timeout_s, self.triton_version)
        server.name = launch.deployment_id
        return server
