"""Where a tensorrtllm engine build runs its commands: in a container of the serving image (from the
host, --triton-image), or as local subprocesses (pytest itself runs inside the serving image).

Both give the commands the same layout (BuildPaths) and report each output line as it comes;
HF_TOKEN reaches the commands through their environment only, never their argv or a printed line.
"""

from __future__ import annotations

import os
import subprocess
import sys
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Callable, Iterator

from ...compat import ImageEntry, installed_tensorrt_llm
from ....host.containers import ContainerError, ContainerSpec, run_container
from ....host.credentials import secrets_set
from ..base import BuildError, BuildSite
from .commands import BuildPaths

if TYPE_CHECKING:
    from docker import DockerClient

# Where TensorRT-LLM's examples/ sit in serving images: /app/examples from backend 0.17 (25.01); the
# README of 0.19-1.0 names /app/tensorrt_llm/examples; earlier images have none and upstream mounts a
# tensorrtllm_backend checkout at /tensorrtllm_backend.
IMAGE_EXAMPLES = ("/app/examples", "/app/tensorrt_llm/examples", "/tensorrtllm_backend/tensorrt_llm/examples")

OnLine = Callable[[str], None]
Run = Callable[[list[str], OnLine], int]  # argv, a callback per output line -> exit code
# a session gives the commands' paths, a runner, and a line saying where they run (for the build log)


class ExecutorError(BuildError):
    pass


def _no_examples(where: str, looked: list[str], entry: ImageEntry) -> ExecutorError:
    return ExecutorError(
        f"no TensorRT-LLM examples {where} (looked in {', '.join(looked)}): pass --trtllm-examples DIR, the "
        f"examples/ of a TensorRT-LLM checkout at v{entry.tensorrt_llm} (in tensorrtllm_backend "
        f"v{entry.backend}: tensorrt_llm/examples)"
    )


@dataclass
class LocalExecutor:
    """Subprocesses of this interpreter, which imports the tensorrt_llm the guard checked."""

    entry: ImageEntry
    tensorrt_llm: str  # the installed version
    examples: Path

    @property
    def identity(self) -> dict:
        return {"executor": "local", "tensorrt_llm": self.tensorrt_llm}

    @property
    def gpu(self) -> str | None:
        """The GPU the build sees first (its compute capability goes into the cache key)."""
        visible = os.environ.get("CUDA_VISIBLE_DEVICES", "").split(",")[0].strip()
        return visible or None

    def describe(self) -> str:
        return f"local subprocesses (tensorrt_llm {self.tensorrt_llm}, examples {self.examples})"

    @contextmanager
    def session(self, checkpoint: Path, output: Path, work: Path) -> Iterator[tuple[BuildPaths, Run, str]]:
        paths = BuildPaths(
            examples=str(self.examples), checkpoint=str(checkpoint), work=str(work), output=str(output), python=sys.executable
        )
        yield paths, run_local, f"local subprocesses of {sys.executable} (tensorrt_llm {self.tensorrt_llm})"


def run_local(argv: list[str], on_line: OnLine) -> int:
    # trtllm-build and the example scripts read HF_TOKEN (calibration datasets) from the inherited environment
    proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, errors="replace")
    try:
        assert proc.stdout is not None  # stdout=PIPE
        for line in proc.stdout:
            on_line(line.rstrip("\n"))
        return proc.wait()
    except BaseException:  # Ctrl-C: the build must not outlive pytest
        proc.kill()
        proc.wait()
        raise


def local_executor(entry: ImageEntry, examples: str | None) -> LocalExecutor:
    """The local executor, once tensorrt_llm is installed here and its examples are found."""
    installed = installed_tensorrt_llm()
    if installed is None:
        raise ExecutorError(
            "tensorrtllm engines are built with TensorRT-LLM: run pytest inside the serving image (where "
            "tensorrt_llm is installed) or pass --triton-image to build in a container of it"
        )
    version, package = installed
    return LocalExecutor(entry, version, find_local_examples(entry, examples, package))


def find_local_examples(entry: ImageEntry, given: str | None, package: str) -> Path:
    """`given`, else the image's examples, else examples/ beside the `package` directory (a source
    checkout of TensorRT-LLM installed with pip -e)."""
    if given:
        path = Path(given).expanduser()
        if not path.is_dir():
            raise ExecutorError(f"--trtllm-examples {given}: no such directory")
        return path
    candidates = [*IMAGE_EXAMPLES, str(Path(package).parent / "examples")]
    for candidate in candidates:
        if Path(candidate).is_dir():
            return Path(candidate)
    raise _no_examples("here", candidates, entry)


@dataclass
class ContainerExecutor:
    """One build container of the serving image (`sleep infinity`), each command run in it by exec."""

    client: DockerClient
    image: str
    image_digest: str
    entry: ImageEntry
    gpus: str | None
    examples: Path | None  # a host directory mounted at /trtllm-examples; None: the image's own
    labels: dict

    EXAMPLES_MOUNT = "/trtllm-examples"

    @property
    def gpu(self) -> str | None:
        return None if self.gpus in (None, "all") else self.gpus.split(",")[0]

    @property
    def identity(self) -> dict:
        return {"executor": "container", "image_digest": self.image_digest, "tensorrt_llm": self.entry.tensorrt_llm}

    def describe(self) -> str:
        return f"a container of {self.image} (TensorRT-LLM {self.entry.tensorrt_llm})"

    def spec(self, checkpoint: Path, output: Path, work: Path, name: str) -> ContainerSpec:
        mounts = [(str(checkpoint), "/checkpoint", "ro"), (str(work), "/work", "rw"), (str(output), "/engine", "rw")]
        if self.examples is not None:
            mounts.append((str(self.examples), self.EXAMPLES_MOUNT, "ro"))
        return ContainerSpec(
            image=self.image,
            command=["sleep", "infinity"],
            name=name,
            mounts=tuple(mounts),
            secret_env=secrets_set(dict(os.environ)),
            labels=self.labels,
            gpus=self.gpus or "all",
            ulimits=(("memlock", -1, -1), ("stack", 67108864, 67108864)),
        )

    @contextmanager
    def session(self, checkpoint: Path, output: Path, work: Path) -> Iterator[tuple[BuildPaths, Run, str]]:
        spec = self.spec(checkpoint, output, work, f"triton-llm-build-{os.getpid()}-{output.name.strip('.')}")
        try:
            container = run_container(self.client, spec)
        except ContainerError as exc:
            raise ExecutorError(f"the build container: {exc}") from None
        try:
            run = self._runner(container.id)
            examples = self.EXAMPLES_MOUNT if self.examples is not None else self._image_examples(run)
            yield BuildPaths(examples=examples), run, " ".join(spec.docker_run_argv())
        finally:
            container.remove(force=True)

    def _runner(self, container_id: str) -> Run:
        api = self.client.api

        def run(argv: list[str], on_line: OnLine) -> int:
            exec_id = api.exec_create(container_id, argv)["Id"]
            pending = ""
            for chunk in api.exec_start(exec_id, stream=True):
                pending += chunk.decode("utf-8", errors="replace")
                *lines, pending = pending.split("\n")
                for line in lines:
                    on_line(line)
            if pending:
                on_line(pending)
            return api.exec_inspect(exec_id)["ExitCode"]

        return run

    def _image_examples(self, run: Run) -> str:
        for candidate in IMAGE_EXAMPLES:
            if run(["test", "-d", candidate], lambda line: None) == 0:
                return candidate
        raise _no_examples(f"in {self.image}", list(IMAGE_EXAMPLES), self.entry)


def executor_for(site: BuildSite):
    """A build container of the serving image where the runtime has docker, else local subprocesses."""
    if site.entry is None:
        raise ExecutorError(site.unknown)
    if site.docker is None:
        return local_executor(site.entry, site.examples)
    if site.image is None or site.image_digest is None:  # (a runtime with docker names its image: BuildSite)
        raise ExecutorError("a build container needs the serving image and its digest")
    examples = Path(site.examples).expanduser().absolute() if site.examples else None
    return ContainerExecutor(site.docker, site.image, site.image_digest, site.entry, site.gpus, examples, site.labels)
