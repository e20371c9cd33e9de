"""Engine builders, one per backend, all published through the EngineCache."""

from __future__ import annotations

from typing import Callable

from ..cache import BuiltEngine, EngineCache
from ..lock import Engine
from .reference import BuildError, ReferenceBuilder


def build_engine(
    cache: EngineCache, name: str, engine: Engine, rebuild: bool = False, trtllm_executor: Callable | None = None
) -> BuiltEngine:
    """Build `engine` or reuse it from `cache`. `trtllm_executor()` gives where tensorrtllm engines are
    built (the runtime's: a container of the serving image, or local subprocesses inside it)."""
    if engine.backend == "reference":
        builder = ReferenceBuilder(cache.sources_dir(), cache.progress)
    else:
        from .trtllm_builder import TrtllmBuilder

        if trtllm_executor is None:
            raise BuildError(f"engine {name}: no TensorRT-LLM build environment was given")
        executor = trtllm_executor()
        builder = TrtllmBuilder(executor, cache.root, cache.progress, executor.gpu)
    return cache.get_or_build(
        name, engine.recipe(), builder.identity, lambda out: builder.build(name, engine, out), rebuild=rebuild
    )
