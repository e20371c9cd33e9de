"""Whether a served deployment reuses KV-cache blocks across requests, and its block size: read from what the
deployment is configured with (never from its name), for the checks that judge reuse by its block counts and its
speed-up."""

from __future__ import annotations

import json
from pathlib import Path

import yaml

from ..triton.tensor_contract import config_parameters, flag
from .repository import family_version, served_family
from .repository.llmapi import llmapi_family, model_yaml
from .repository.stand_in import STAND_IN_PARAMETER

# tensorrtllm_backend's default for an unset enable_kv_cache_reuse turned from false to true in v0.19.0 (Triton 25.05;
# inflight_batcher_llm/src/model_instance_state.cc: "will be set to true"): its template family and every later one
REUSE_BY_DEFAULT_FROM = (0, 19)
BUILD_TOKENS_PER_BLOCK = 64  # trtllm-build's default --tokens_per_block, which the reference stand-in's blocks follow
INFLIGHT_TYPES = ("inflight_batching", "inflight_fused_batching")  # gpt_model_type values of in-flight batching
PYTORCH_TOKENS_PER_BLOCK = 32  # the LLM API's PyTorch backend (KvCacheConfig.tokens_per_block unset)


def _llmapi_kv_config(served) -> tuple[dict, str]:
    """The llmapi model's kv_cache_config: the served repository's model.yaml where this machine has it, else the one
    the lock renders (a remote server's own may differ)."""
    path = served.repository / "tensorrt_llm" / "1" / "model.yaml"
    if path.is_file():
        content, where = yaml.safe_load(path.read_text()), f"{path}"
    else:
        content = model_yaml(served.ref, llmapi_family(served.server.version), "")
        where = f"model.yaml as rendered from {served.ref.id}'s lock entry"
    return content.get("kv_cache_config") or {}, where


def kv_cache_reuse(served) -> tuple[bool, str]:
    """(whether the deployment keeps KV-cache blocks of earlier requests for later ones, which setting says so).

    - llmapi layout: model.yaml's kv_cache_config.enable_block_reuse, the LLM API argument that turns block reuse on;
      unset it is true (TensorRT-LLM's KvCacheConfig default, which the reference stand-in follows);
    - engine ensemble: the tensorrt_llm model's enable_kv_cache_reuse parameter as the server reports it (so a lock's
      `fill`, a repository of one's own and the template all count); unset, tensorrtllm_backend's default by version,
      which the reference stand-in follows (with in-flight batching; its V1 batches keep no blocks).
    """
    if served.ref.serving_layout.one_model:
        kv, where = _llmapi_kv_config(served)
        setting = kv.get("enable_block_reuse")
        if setting is None:
            return True, f"{where}: kv_cache_config.enable_block_reuse unset (TensorRT-LLM's default: true)"
        return bool(setting), f"{where}: kv_cache_config.enable_block_reuse = {setting}"
    config = served.client.model_config("tensorrt_llm")
    parameters = config_parameters(config)
    stand_in = STAND_IN_PARAMETER in parameters
    if config.get("backend") != "tensorrtllm" and not stand_in:
        return False, f"tensorrt_llm runs on backend {config.get('backend')!r}: no KV reuse"
    if stand_in and parameters.get("gpt_model_type") not in INFLIGHT_TYPES:
        return False, "the reference stand-in's V1 batches keep no KV-cache blocks between requests"
    setting = parameters.get("enable_kv_cache_reuse")
    if setting is not None and not setting.startswith("${"):
        return flag(setting, False), f"tensorrt_llm config parameter enable_kv_cache_reuse = {setting!r}"
    family = served_family(served.ref, served.server.version)
    default = family_version(family) >= REUSE_BY_DEFAULT_FROM
    return default, f"enable_kv_cache_reuse unset; tensorrtllm_backend of template family {family} defaults to {default}"


def tokens_per_block(served) -> tuple[int | None, str]:
    """(the KV-cache block size in tokens, where it was read); None where it cannot be read here (a remote engine)."""
    if served.ref.serving_layout.one_model:
        kv, where = _llmapi_kv_config(served)
        return int(kv.get("tokens_per_block") or PYTORCH_TOKENS_PER_BLOCK), f"{where}: kv_cache_config.tokens_per_block"
    config = served.client.model_config("tensorrt_llm")
    if STAND_IN_PARAMETER in config_parameters(config):
        return BUILD_TOKENS_PER_BLOCK, "the reference stand-in: trtllm-build's default"
    engine = getattr(served, "engine", None)
    path = Path(engine.path) / "config.json" if engine is not None else None
    if path is None or not path.is_file():
        return None, f"{served.ref.id}: no engine config.json on this machine to read tokens_per_block from"
    found = _find(json.loads(path.read_text()), "tokens_per_block")
    if found is None:
        return None, f"{path}: no tokens_per_block in the engine's build config"
    return int(found), f"{path}: tokens_per_block"


def _find(node, key: str):
    """The first value of `key` anywhere in a JSON document (trtllm-build keeps it under plugin_config)."""
    if isinstance(node, dict):
        if key in node:
            return node[key]
        node = list(node.values())
    if isinstance(node, list):
        for item in node:
            found = _find(item, key)
            if found is not None:
                return found
    return None
