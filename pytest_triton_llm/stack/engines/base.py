"""What an engine backend is: how its engines are built (and cached), which model repository serves
them, and what it offers to suites. One module per backend, named in the registry (stack/engines/__init__.py)."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Callable, ClassVar, Protocol

from ..cache import BuiltEngine, EngineCache
from ..compat import ImageEntry
from ..lock import DeploymentRef, Engine
from ...common.errors import TritonLLMError

if TYPE_CHECKING:
    from docker import DockerClient


class BuildError(TritonLLMError, RuntimeError):
    """An engine could not be built; the message says what to fix."""


@dataclass(frozen=True)
class BuildSite:
    """Where a build's TensorRT-LLM commands run, as the runtime offers it: a container of the serving
    image (`docker` set), or local subprocesses (pytest runs inside the serving image)."""

    entry: ImageEntry | None  # compat.toml's image: its TensorRT-LLM version picks the build commands
    unknown: str = ""  # why `entry` is None, in words
    examples: str | None = None  # --trtllm-examples
    docker: DockerClient | None = None  # build in a container of `image`
    image: str | None = None
    image_digest: str | None = None
    gpus: str | None = None
    labels: dict[str, str] = field(default_factory=dict)


SiteFn = Callable[[], BuildSite]  # asked only when an engine must be built


@dataclass(frozen=True)
class RenderSite:
    """What rendering a deployment's repository needs beyond the deployment and its engine, as the session offers it."""

    cache: EngineCache | None = None  # where upstream's python models are fetched to (tensorrtllm)
    trtllm_models: str | None = None  # --trtllm-models: upstream's all_models/inflight_batcher_llm at the image's tag
    image_models: str | None = None  # where the serving image ships upstream's inflight_batcher_llm models, if it does


NO_SITE = RenderSite()  # nothing beyond the deployment: configs only where code would need fetching


def refuse_templates(engine: Engine, why: str) -> None:
    """A deployment that names its own template family where only the reference stand-ins serve any family."""
    named = sorted(n for n, d in engine.deployments.items() if d.templates is not None)
    if named:
        raise ValueError(f"field 'deployments.{named[0]}.templates': only the reference backend takes it ({why})")


class Backend(Protocol):
    name: ClassVar[str]
    needs_gpu: ClassVar[bool]  # its engines are served on a GPU (containers get GPUs unless --triton-gpus says)
    stand_in: ClassVar[bool]  # the project's own stand-in: tests marked triton_llm_stand_in_only run on it alone

    def check_recipe(self, engine: Engine) -> None:
        """Raise ValueError naming the field when the lock's recipe asks for what this backend lacks."""

    def build(self, cache: EngineCache, name: str, engine: Engine, rebuild: bool, site: SiteFn) -> BuiltEngine:
        """The engine for `engine`'s recipe: reused from `cache`, or built into it."""

    def render(
        self,
        ref: DeploymentRef,
        built: BuiltEngine,
        out: Path,
        triton_version: str,
        engine_dir: str | None,
        site: RenderSite = NO_SITE,
    ) -> Path:
        """Write the model repository that serves `ref` into `out`; `engine_dir` is where the server sees
        the engine (a container's mount), by default where the cache keeps it. `<out>.rendered.json` says which code
        serves each python model (repository.model_code)."""

    def lacking(self, needs: set[str], entry: ImageEntry | None) -> str | None:
        """Why a deployment of this backend cannot offer `needs` (on image `entry` when known), or None."""
