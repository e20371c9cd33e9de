"""Render an llmapi deployment: TensorRT-LLM's PyTorch path, one python model as upstream's all_models/llmapi has it.

<out>/tensorrt_llm/config.pbtxt      the family's (templates/llmapi-*), with model.yaml's triton_config
                                     (max_batch_size, decoupled) appended, as upstream's auto-complete sets them
<out>/tensorrt_llm/1/model.yaml      the family's, with LLM API arguments from the lock's recipe, then the
                                     engine's [engines.X.llmapi] table over them, then the deployment's
<out>/tensorrt_llm/1/model.py, ...   the engine backend's code: for TensorRT-LLM itself, links to the image's
                                     own /app/all_models/llmapi/tensorrt_llm/1/ (link_image_model: resolved inside
                                     the server's container; tensorrtllm_backend's Dockerfile.triton.trt_llm_backend
                                     copies all_models to /app); the reference stand-in's (stand_in.copy_llmapi)
"""

from __future__ import annotations

import os
from importlib import resources
from pathlib import Path

import yaml

from ..cache import BuiltEngine
from ..lock import DeploymentRef, Engine
from ...common.schema import load_toml
from . import STAND_IN, ModelCode, parse_config, write_rendered
from .fill import TemplateError

_PACKAGE = resources.files(__package__)
ARGUMENTS_FILE = "llmapi_arguments.toml"
IMAGE_MODEL_DIR = "/app/all_models/llmapi/tensorrt_llm/1"  # upstream's model code inside an NGC trtllm image
UPSTREAM_CODE = ("model.py", "helpers.py")


def llmapi_family(triton_version: str) -> str:
    """The llmapi template set of a Triton server version; the newest where its images carry none."""
    table = load_toml(Path(str(_PACKAGE / "families.toml")))["llmapi"]
    return table.get(".".join(triton_version.split(".")[:2]), table["newest"])


def known_arguments(family: str | None = None) -> set[str]:
    """The top-level model.yaml keys of `family` (of any family when None)."""
    table = load_toml(Path(str(_PACKAGE / ARGUMENTS_FILE)))["families"]
    extra = [table[family]] if family else [v for k, v in table.items() if k != "common"]
    return {"triton_config", *table["common"], *(key for keys in extra for key in keys)}


def check_arguments(engine: Engine, family: str | None = None) -> None:
    """ValueError naming the first [engines.X.llmapi] (or [engines.X.deployments.Y.llmapi]) key the family (any
    family, when None) does not know."""
    tables = {"llmapi": engine.llmapi, **{f"deployments.{n}.llmapi": d.llmapi for n, d in engine.deployments.items()}}
    for where_in_lock, table in tables.items():
        unknown = sorted(set(table) - known_arguments(family))
        if unknown:
            where = f"the llmapi model of {family}" if family else "any llmapi model"
            raise ValueError(
                f"field '{where_in_lock}.{unknown[0]}': not an LLM API argument of {where} (known: "
                f"pytest_triton_llm/stack/repository/{ARGUMENTS_FILE})"
            )


def _merged(base: dict, over: dict) -> dict:
    merged = dict(base)
    for key, value in over.items():
        merged[key] = _merged(merged[key], value) if isinstance(value, dict) and isinstance(merged.get(key), dict) else value
    return merged


def model_yaml(ref: DeploymentRef, family: str, checkpoint: str) -> dict:
    """model.yaml's content: the family's, the recipe's arguments, then the lock's [engines.X.llmapi] table."""
    engine, options = ref.engine, ref.options
    try:
        check_arguments(engine, family)
    except ValueError as exc:
        raise TemplateError(f"engine {ref.engine_name}: {exc}") from None
    base = yaml.safe_load((_PACKAGE / "templates" / family / "tensorrt_llm" / "model.yaml").read_text())
    derived = {
        "model": checkpoint,
        "backend": "pytorch",
        "tensor_parallel_size": engine.tp_size,
        "pipeline_parallel_size": engine.pp_size,
        "dtype": engine.dtype,
        "max_batch_size": engine.max_batch_size,
        "max_input_len": engine.max_input_len,
        "max_seq_len": engine.max_input_len + engine.max_output_len,
        "triton_config": {
            # upstream's 0: its model takes one prompt per request, text_input with no batch dimension
            "max_batch_size": options.max_batch_size or 0,
            "decoupled": options.decoupled,
        },
    }
    if engine.lora is not None:  # the LLM API's LoraConfig; adapters come per request (lora_path), none preloaded
        derived["lora_config"] = {"max_lora_rank": engine.lora.max_rank, "lora_target_modules": list(engine.lora.target_modules)}
    return _merged(_merged(_merged(base, derived), engine.llmapi), options.llmapi)


def link_image_model(version_dir: Path) -> str:
    """Links to the serving image's own llmapi model code, resolved inside the server's container."""
    for name in UPSTREAM_CODE:
        os.symlink(f"{IMAGE_MODEL_DIR}/{name}", version_dir / name)
    return f"the image's {IMAGE_MODEL_DIR}"


def render_llmapi_repository(
    ref: DeploymentRef, built: BuiltEngine, out: Path, triton_version: str, engine_dir: str | None, code: ModelCode, marked=None
) -> Path:
    """Write the llmapi repository for `ref` into `out` (which must not exist yet), its model's code by `code`
    (`marked` rewrites the config where that code is the project's stand-in). `engine_dir` is where the server sees
    the checkpoint."""
    family = llmapi_family(triton_version)
    content = model_yaml(ref, family, engine_dir or str(built.path))
    triton = content["triton_config"]
    # upstream's model.py sets these from model.yaml in auto_complete_config; the server here runs with
    # --disable-auto-complete-config, so they are written into config.pbtxt too (the same values)
    text = (_PACKAGE / "templates" / family / "tensorrt_llm" / "config.pbtxt").read_text() + (
        f"\n# from model.yaml triton_config\nmax_batch_size: {int(triton['max_batch_size'])}\n"
        f"model_transaction_policy {{\n  decoupled: {'true' if triton['decoupled'] else 'false'}\n}}\n"
    )
    version_dir = out / "tensorrt_llm" / "1"
    version_dir.mkdir(parents=True)
    parse_config(text, str(out / "tensorrt_llm" / "config.pbtxt"))
    (version_dir / "model.yaml").write_text(
        f"# {ref.id}: rendered by pytest-triton-llm from templates/{family}/tensorrt_llm/model.yaml\n"
        + yaml.safe_dump(content, sort_keys=False)
    )
    origin = code(version_dir)
    if marked is not None and origin == STAND_IN:
        text = marked(text)
    (out / "tensorrt_llm" / "config.pbtxt").write_text(text)
    write_rendered(
        out,
        {
            "deployment": ref.id,
            "family": family,
            "engine_digest": built.digest,
            "model_yaml": content,
            "model_code": {"tensorrt_llm": origin},
        },
    )
    return out
