"""Render a Triton model repository for one deployment.

    <out>/preprocessing/{config.pbtxt,1/model.py}    tokenizer (python backend)
    <out>/tensorrt_llm/{config.pbtxt,1/...}          the engine backend's model (its Triton backend and code)
    <out>/postprocessing/{config.pbtxt,1/model.py}   detokenizer (python backend)
    <out>/ensemble/{config.pbtxt,1/}                 wires the three
    <out>/tensorrt_llm_bls/{config.pbtxt,1/...}      the same three called from one python model (BLS)

Every rendered config.pbtxt is parsed into tritonclient's ModelConfig before the
server sees it, so a template mistake fails here with the file name. A python-backend model gets its
code from the engine backend: the project's stand-in (stand_in.py) or upstream's own files of the
served version (upstream.py); `<out>.rendered.json` beside the repository says which served each model.
"""

from __future__ import annotations

import json
from importlib import resources
from pathlib import Path
from typing import Callable, Mapping

from google.protobuf import text_format
from tritonclient.grpc import model_config_pb2

from ..cache import BuiltEngine
from ..lock import DeploymentRef
from ...common.schema import load_toml
from .fill import TemplateError, fill, placeholders

MODELS = ("preprocessing", "tensorrt_llm", "postprocessing", "ensemble", "tensorrt_llm_bls")
# upstream's multimodal set: the same models, all_models/multimodal's ensemble (templates/<family>/multimodal) in place
# of the text one, and the encoders that turn an image into the engine's prompt table
MULTIMODAL = "multimodal"
MULTIMODAL_MODELS = (*MODELS, "multimodal_encoders")
# upstream's draft-target wiring: tensorrt_llm's config copied under this name (its `name:` line changed), filled with
# the draft engine's directory (docs/source/advanced/speculative-decoding.md); the BLS names it as its draft model
DRAFT_MODEL = "tensorrt_llm_draft"
ENTRY_MODELS = ("ensemble", "tensorrt_llm_bls")  # text in, text out: what users and Triton's OpenAI frontend call
_PACKAGE = resources.files(__package__)
# a python model's code: fills its version directory, returns where the code came from (for the report)
ModelCode = Callable[[Path], str]


def entry_models(ref: DeploymentRef) -> tuple[str, ...]:
    """The entry models a deployment serves: ours render both; a user's repository those it has (and serves); a
    remote server those its repository index lists as ready."""
    served = getattr(ref.engine, "entry_models", None)
    if served is not None:
        return served
    if ref.serving_layout.one_model:  # one python model, text in and text out
        return (ref.serving_layout.entry,)
    if ref.options.repository is None:
        return tuple(m for m in ENTRY_MODELS if not ref.options.models or m in ref.options.models)
    served = [m for m in ENTRY_MODELS if not ref.options.models or m in ref.options.models]
    return tuple(m for m in served if (Path(ref.options.repository) / m / "config.pbtxt").is_file())


def template_family(triton_version: str) -> str:
    """The template set for a Triton server version such as '2.51.0'."""
    families = load_toml(Path(str(_PACKAGE / "families.toml")))["families"]
    major_minor = ".".join(triton_version.split(".")[:2])
    try:
        return families[major_minor]
    except KeyError:
        known = ", ".join(sorted(families))
        raise TemplateError(f"no model templates for Triton {triton_version} (known: {known})") from None


def served_family(ref: DeploymentRef, triton_version: str) -> str:
    """The engine ensemble family `ref` is rendered from: the deployment's own `templates`, else its server's."""
    family = ref.family(template_family(triton_version))
    if not (_PACKAGE / "templates" / family).is_dir():
        known = ", ".join(sorted(p.name for p in (_PACKAGE / "templates").iterdir() if p.name.startswith("trtllm-")))
        raise TemplateError(f"deployment {ref.id}: field 'templates': no template family {family!r} (known: {known})")
    return family


def family_version(family: str) -> tuple[int, ...]:
    """An engine ensemble template family's version, to compare with the release a behaviour changed in:
    trtllm-0.19 -> (0, 19)."""
    return tuple(int(p) for p in family.removeprefix("trtllm-").split("."))


def template_text(family: str, model: str, multimodal: bool = False) -> str:
    """A model's config template; of a multimodal deployment, all_models/multimodal's where upstream has one; the
    draft model's, tensorrt_llm's under its own name."""
    if model == DRAFT_MODEL:
        return template_text(family, "tensorrt_llm", multimodal).replace('name: "tensorrt_llm"', f'name: "{DRAFT_MODEL}"', 1)
    own = _PACKAGE / "templates" / family / MULTIMODAL / model / "config.pbtxt"
    if multimodal and own.is_file():
        return own.read_text()
    return (_PACKAGE / "templates" / family / model / "config.pbtxt").read_text()


def rendered_models(ref: DeploymentRef, family: str) -> tuple[str, ...]:
    """The models a deployment's repository holds: the engine ensemble's, and a multimodal deployment's encoders
    (a family whose templates have no multimodal set is refused, naming those that have one), and the draft model
    where the BLS drafts with the engine's draft engine."""
    drafted = (DRAFT_MODEL,) if ref.options.draft_model == DRAFT_MODEL else ()
    if ref.engine.vision is None:  # the lock serves an engine with a vision encoder by multimodal deployments only
        return (*MODELS, *drafted)
    if not (_PACKAGE / "templates" / family / MULTIMODAL).is_dir():
        known = sorted(p.name for p in (_PACKAGE / "templates").iterdir() if (p / MULTIMODAL).is_dir())
        raise TemplateError(
            f"deployment {ref.id}: family {family} has no multimodal templates here yet (issue 47; field 'templates' "
            f"may name one that has: {', '.join(known)})"
        )
    return (*MULTIMODAL_MODELS, *drafted)


def template_values(
    ref: DeploymentRef,
    engine_dir: Path,
    family: str,
    triton_backend: str,
    tokenizer_subdir: str = "",
    bls_instances: int | None = None,
) -> dict:
    """Placeholder values for a deployment whose tensorrt_llm model runs on Triton backend `triton_backend`, its
    tokenizer in `tokenizer_subdir` of the engine, its BLS in `bls_instances` instances (default: upstream's rule);
    None drops an optional parameter line."""
    engine, options = ref.engine, ref.options
    multimodal = engine.vision is not None
    models = rendered_models(ref, family)
    values = dict.fromkeys(set().union(*(placeholders(template_text(family, m, multimodal)) for m in models)))
    values.update(
        triton_max_batch_size=engine.max_batch_size,
        triton_backend=triton_backend,
        decoupled_mode=options.decoupled,
        max_queue_delay_microseconds=options.max_queue_delay_us,
        max_queue_size=0,  # 0 = unbounded: Triton's default
        max_beam_width=1,
        batching_strategy=options.gpt_model_type,
        engine_dir=str(engine_dir),
        tokenizer_dir=str(engine_dir / tokenizer_subdir),
        exclude_input_in_output=options.exclude_input_in_output,
        add_special_tokens=engine.add_special_tokens,
        skip_special_tokens=engine.skip_special_tokens,
        preprocessing_instance_count=options.preprocessing_instances,
        postprocessing_instance_count=options.postprocessing_instances,
        # upstream's docs/model_config.md: as many BLS instances as the engine's batch, or requests run one by one
        bls_instance_count=bls_instances or engine.max_batch_size,
        accumulate_tokens=False,  # each streamed response holds its own tokens, as the ensemble's do
        tensorrt_llm_model_name="tensorrt_llm",
        guided_decoding_backend=options.guided_decoding_backend,  # GuidedDecodingConfig (trtllm-0.19 on)
        tensorrt_llm_draft_model_name=options.draft_model,  # the BLS's speculative decoding
        max_tokens_in_paged_kv_cache=options.kv_cache_max_tokens,
    )
    if multimodal:  # where the vision encoder was built (vision_tower.py), as upstream's docs fill them
        values.update(
            multimodal_model_path=str(engine_dir / "vision"),
            hf_model_path=str(engine_dir),
            multimodal_encoders_name="multimodal_encoders",
        )
    if engine.lora is not None:  # the LoRA cache holds adapters up to the engine's max rank
        values.update(
            lora_cache_optimal_adapter_size=engine.lora.max_rank,
            lora_cache_max_adapter_size=engine.lora.max_rank,
            lora_cache_host_memory_bytes=engine.lora.cache_host_memory_bytes,
        )
    return values


def parse_config(text: str, name: str) -> model_config_pb2.ModelConfig:
    try:
        return text_format.Parse(text, model_config_pb2.ModelConfig())
    except text_format.ParseError as exc:
        raise TemplateError(f"{name}: rendered config.pbtxt does not parse as ModelConfig: {exc}") from None


def render_repository(
    ref: DeploymentRef,
    built: BuiltEngine,
    out: Path,
    triton_version: str,
    engine_dir: str | None,
    tensorrt_llm_backend: str,
    python_code: Mapping[str, ModelCode],
    marked: Callable[[str, str], str] | None = None,
    upstream_python: bool = False,
    bls_instances: int | None = None,
) -> Path:
    """Write the model repository for `ref` into `out` (which must not exist yet): the inflight_batcher_llm
    templates of the server's version, `tensorrt_llm` on Triton backend `tensorrt_llm_backend`, and each
    model of `python_code` with that code; `marked` rewrites the config of a model whose code is the project's
    stand-in; `upstream_python`: the python models are upstream's own, whose unfilled string parameters stay as
    upstream's fill_template.py leaves them. `engine_dir` is where the server sees the engine (a container's mount),
    by default where the cache keeps it; `bls_instances`: the BLS's instance count where its code needs fewer than
    upstream's rule."""
    family = served_family(ref, triton_version)
    values = template_values(
        ref,
        Path(engine_dir) if engine_dir else built.path,
        family,
        tensorrt_llm_backend,
        built.manifest.get("tokenizer", ""),
        bls_instances,
    )
    out.mkdir(parents=True)
    origins = {}
    multimodal = ref.engine.vision is not None
    for model in (m for m in rendered_models(ref, family) if not ref.options.models or m in ref.options.models):
        keep = upstream_python and model in python_code
        template = template_text(family, model, multimodal)
        # the draft engine is built into <engine>/draft (engines/draft_checkpoint.py)
        own = values if model != DRAFT_MODEL else {**values, "engine_dir": f"{values['engine_dir']}/draft"}
        text = fill(template, own, name=f"{family}/{model}/config.pbtxt", keep_unfilled=keep)
        parse_config(text, f"{out / model / 'config.pbtxt'}")
        (out / model / "1").mkdir(parents=True)
        if model in python_code:
            origins[model] = python_code[model](out / model / "1")
            if marked is not None and origins[model] == STAND_IN:
                text = marked(text, family)
        (out / model / "config.pbtxt").write_text(text)
    write_rendered(
        out, {"deployment": ref.id, "family": family, "engine_digest": built.digest, "values": values, "model_code": origins}
    )
    return out


STAND_IN = "project stand-in"  # a model's code origin when the project's stand-in serves it (stand_in.ORIGIN)


def write_rendered(out: Path, record: dict) -> None:
    """What was rendered, beside the repository (not in it: Triton would take a stray entry for a model)."""
    (out.parent / f"{out.name}.rendered.json").write_text(json.dumps(record, indent=2, sort_keys=True, default=str))


def model_code(repository: Path) -> dict[str, str]:
    """model -> where its code came from (project stand-in, upstream tag and commit, the image), as rendered."""
    path = repository.parent / f"{repository.name}.rendered.json"
    return json.loads(path.read_text()).get("model_code", {}) if path.is_file() else {}
