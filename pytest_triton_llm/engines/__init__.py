"""Engine builders, one per backend, all published through the EngineCache."""

from __future__ import annotations

from ..cache import BuiltEngine, EngineCache
from ..lock import Engine
from .reference import BuildError, ReferenceBuilder


def build_engine(cache: EngineCache, name: str, engine: Engine, rebuild: bool = False) -> BuiltEngine:
    """Build `engine` or reuse it from `cache`."""
    if engine.backend == "reference":
        builder = ReferenceBuilder(cache.sources_dir(), cache.progress)
    else:
        raise BuildError(
            f"engine {name}: building backend {engine.backend!r} engines is not supported yet (the commands are "
            "rendered by pytest_triton_llm.engines.tensorrtllm.build_commands, but nothing runs them in a "
            "container); build the engine yourself and serve it from the image"
        )
    return cache.get_or_build(
        name, engine.recipe(), builder.identity, lambda out: builder.build(name, engine, out), rebuild=rebuild
    )
