"""A model repository of the user's own (a lock deployment's `repository`: upstream's all_models/inflight_batcher_llm
or a customised copy), served as the user would serve it.

It is copied, and its `${...}` placeholders are filled as upstream's tools/fill_template.py fills them
(string.Template.safe_substitute, max_queue_size 0 unless given), with values from the lock and the deployment's
`fill` table; every config.pbtxt must then parse into ModelConfig. Where no GPU engine can run, the models on
Triton's tensorrtllm backend are served by the reference stand-in instead: their configs are kept but for the
backend, and their version directory holds the stand-in's code. Everything else (the user's preprocessing,
postprocessing, tensorrt_llm_bls, ensemble) runs unchanged.
"""

from __future__ import annotations

import shutil
import string
from pathlib import Path
from typing import Callable

from google.protobuf import text_format
from tritonclient.grpc import model_config_pb2

from ..cache import BuiltEngine
from ..lock import DeploymentRef
from . import STAND_IN as STAND_IN_ORIGIN, write_rendered
from .fill import TemplateError, placeholders

FILL_TEMPLATE_DEFAULTS = {"max_queue_size": "0"}  # what tools/fill_template.py always adds


def fill_like_upstream(text: str, values: dict[str, str]) -> str:
    """tools/fill_template.py's substitution: known placeholders replaced, unknown ones left as written."""
    return string.Template(text).safe_substitute({**FILL_TEMPLATE_DEFAULTS, **values})


def _flag(value: bool) -> str:
    return "true" if value else "false"


def placeholder_values(ref: DeploymentRef, engine_dir: str, tokenizer_dir: str) -> dict[str, str]:
    """The values a user fills for this deployment (upstream's placeholder names), then the deployment's `fill`."""
    engine, options = ref.engine, ref.options
    values = {
        "triton_max_batch_size": str(engine.max_batch_size),
        "decoupled_mode": _flag(options.decoupled),
        "max_beam_width": "1",
        "engine_dir": engine_dir,
        "tokenizer_dir": tokenizer_dir,
        "batching_strategy": options.gpt_model_type,
        "max_queue_delay_microseconds": str(options.max_queue_delay_us),
        "exclude_input_in_output": _flag(options.exclude_input_in_output),
        "add_special_tokens": _flag(engine.add_special_tokens),
        "skip_special_tokens": _flag(engine.skip_special_tokens),
        "preprocessing_instance_count": str(options.preprocessing_instances),
        "postprocessing_instance_count": str(options.postprocessing_instances),
        "bls_instance_count": str(engine.max_batch_size),  # upstream's docs/model_config.md advice
        "triton_backend": "tensorrtllm",
        "accumulate_tokens": "false",
        "tensorrt_llm_model_name": "tensorrt_llm",
        "tensorrt_llm_draft_model_name": "",
        "logits_datatype": "TYPE_FP32",  # the values upstream's docs fill
        "encoder_input_features_data_type": "TYPE_FP16",
        "prompt_embedding_table_data_type": "TYPE_FP16",
    }
    if engine.lora is not None:
        values.update(
            lora_cache_optimal_adapter_size=str(engine.lora.max_rank), lora_cache_max_adapter_size=str(engine.lora.max_rank)
        )
        if engine.lora.cache_host_memory_bytes is not None:
            values["lora_cache_host_memory_bytes"] = str(engine.lora.cache_host_memory_bytes)
    return {**values, **ref.options.fill}


def render_user_repository(
    ref: DeploymentRef, built: BuiltEngine, out: Path, engine_dir: str, swap_in: Callable[[Path], list[str]] | None = None
) -> Path:
    """Copy, fill and check the deployment's repository into `out`; `swap_in` (the stand-in's) serves the models on
    Triton's tensorrtllm backend with the stand-in instead."""
    assert ref.options.repository is not None, "render_user_repository renders a deployment's own repository"
    source = Path(ref.options.repository)
    shutil.copytree(source, out, ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
    for model in (p.parent for p in out.glob("*/config.pbtxt")):
        if ref.options.models and model.name not in ref.options.models:
            shutil.rmtree(model)
    values = placeholder_values(ref, engine_dir, str(Path(engine_dir) / built.manifest.get("tokenizer", "")))
    for config_path in sorted(out.glob("*/config.pbtxt")):
        text = fill_like_upstream(config_path.read_text(), values)
        config_path.write_text(text)
        _parse(text, source / config_path.relative_to(out), ref)
    swapped = swap_in(out) if swap_in is not None else []
    origins = {p.parent.parent.name: f"your repository {source}" for p in out.glob("*/1/*.py")}
    origins.update(dict.fromkeys(swapped, STAND_IN_ORIGIN))
    write_rendered(
        out,
        {"deployment": ref.id, "repository": str(source), "engine_digest": built.digest, "values": values, "model_code": origins},
    )
    return out


def _parse(text: str, source: Path, ref: DeploymentRef) -> model_config_pb2.ModelConfig:
    try:
        return text_format.Parse(text, model_config_pb2.ModelConfig())
    except text_format.ParseError as exc:
        left = sorted(placeholders(text))
        where = f"[engines.{ref.engine_name}.deployments.{ref.name}.fill]"
        hint = f"; unfilled: {', '.join(left)} (give them in {where})" if left else ""
        raise TemplateError(f"{source}: filled config.pbtxt does not parse as ModelConfig: {exc}{hint}") from None
