"""The reference backend: a Triton python-backend model with the tensorrt_llm tensor contract that runs a
Hugging Face model (stand_ins/triton_models/tensorrt_llm), on any machine. Its "engine" is the Hugging Face checkpoint
of hf_checkpoint.py; its repository is the project's stand-in code (stack/repository/stand_in.py) in every python model.
"""

from __future__ import annotations

from functools import partial
from pathlib import Path
from typing import ClassVar

from ..cache import BuiltEngine, EngineCache
from ..compat import ImageEntry
from ..lock import DeploymentRef, Engine
from ..repository import DRAFT_MODEL, render_repository, template_family
from ..repository import stand_in as stand_in_code
from ..repository.llmapi import check_arguments, render_llmapi_repository
from ..repository.user import render_user_repository
from .base import NO_SITE, RenderSite, SiteFn
from .hf_checkpoint import ReferenceBuilder

STAND_IN_MODELS = ("preprocessing", "tensorrt_llm", "postprocessing", "tensorrt_llm_bls", "multimodal_encoders")


class ReferenceBackend:
    name: ClassVar[str] = "reference"
    stand_in: ClassVar[bool] = True
    needs_gpu: ClassVar[bool] = False

    def check_recipe(self, engine: Engine) -> None:
        if engine.world_size != 1 or engine.quantization:
            raise ValueError("fields 'tp_size', 'pp_size', 'quantization': only the tensorrtllm backend has them")
        check_arguments(engine)

    def build(self, cache: EngineCache, name: str, engine: Engine, rebuild: bool, site: SiteFn) -> BuiltEngine:
        builder = ReferenceBuilder(cache.sources_dir(), cache.progress)  # converts here, whatever the runtime
        return cache.get_or_build(
            name, engine.recipe(), builder.identity, lambda out: builder.build(name, engine, out), rebuild=rebuild
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
        marked = stand_in_code.marked
        if ref.serving_layout.one_model:  # the PyTorch path's one python model, the checkpoint loaded as converted
            return render_llmapi_repository(ref, built, out, triton_version, engine_dir, stand_in_code.copy_llmapi, marked)
        if ref.options.repository is not None:  # the user's own, its tensorrtllm models served by the stand-in
            swap_in = partial(stand_in_code.swap_in, family=template_family(triton_version))
            return render_user_repository(ref, built, out, engine_dir or str(built.path), swap_in)
        code = {model: partial(stand_in_code.copy_model, model) for model in STAND_IN_MODELS}
        code[DRAFT_MODEL] = code["tensorrt_llm"]  # the draft engine served as the engine is, by its own instance
        # the stand-in's decoupled BLS streams each request from a thread: one instance (one stub) serves every slot
        bls_instances = 1 if ref.options.decoupled else None
        return render_repository(ref, built, out, triton_version, engine_dir, "python", code, marked, bls_instances=bls_instances)

    def lacking(self, needs: set[str], entry: ImageEntry | None) -> str | None:
        """Nothing of the image's backend: the stand-in implements the whole contract (what the served family declares
        is checked apart, capabilities.ServedInputs)."""
        return None
