"""Dummy-weight tensorrtllm engines: the TensorRT-LLM PretrainedConfig that `trtllm-build --model_config` builds random
weights from, derived from a lock's Hugging Face config.json.

NVIDIA/TensorRT-LLM tensorrt_llm/commands/build.py (@ 008b2b8, and the 0.11-0.12 form where --max_output_len is
deprecated; the first trtllm-build has the same flag): `--model_config` is used where `--checkpoint_dir` is not given;
a path ending in ".json" is read with PretrainedConfig.from_json_file and built with ckpt_dir None, i.e.
`model = model_cls(rank_config)` and no weights loaded. Unloaded parameters are random (tensorrt_llm/parameter.py:
torch.randn on the GPU scaled to a Xavier range), so the lock's seed does not reach them; it only keys the cache.
The fields follow docs/source/architecture/checkpoint.md ("Config" table) and LLaMAConfig.from_hugging_face
(tensorrt_llm/models/llama/config.py @ 04100fd), which is how convert_checkpoint.py writes a llama checkpoint's config.
"""

from __future__ import annotations

from ...lock import Dummy, Engine

MODEL_CONFIG = "config.json"  # under the build's work directory; trtllm-build needs the ".json" suffix
# model types whose config LLaMAConfig.from_hugging_face reads (MODEL_MAP: LlamaForCausalLM, MistralForCausalLM)
LLAMA_TYPES = ("llama", "mistral")
_REQUIRED = (
    "architectures",
    "hidden_size",
    "num_hidden_layers",
    "num_attention_heads",
    "intermediate_size",
    "vocab_size",
    "max_position_embeddings",
    "hidden_act",
    "rms_norm_eps",
)


def dummy_of(engine: Engine) -> Dummy:
    """The dummy source of a dummy-weight engine (engine.dummy_weights)."""
    if engine.source.dummy is None:
        raise ValueError("field 'source.dummy': the engine has real weights, not dummy ones")
    return engine.source.dummy


def pretrained_config(engine: Engine) -> dict:
    """The PretrainedConfig json of `engine`'s dummy source; ValueError naming what the Hugging Face config lacks."""
    dummy = dummy_of(engine)
    hf = dummy.hf_config()
    if hf.get("model_type") not in LLAMA_TYPES:
        raise ValueError(
            f"field 'source.dummy.config': a dummy tensorrtllm engine is built from a llama-architecture "
            f"config (model_type {' or '.join(LLAMA_TYPES)}); {dummy.config} has "
            f"{hf.get('model_type')!r}"
        )
    missing = [key for key in _REQUIRED if key not in hf]
    if missing:
        raise ValueError(
            f"field 'source.dummy.config': {dummy.config} has no '{missing[0]}' (TensorRT-LLM's PretrainedConfig needs it)"
        )
    heads = hf["num_attention_heads"]
    # transformers 5 keeps rope_theta under rope_parameters; configs on the Hub have it at the top
    rope_theta = hf.get("rope_theta", (hf.get("rope_parameters") or {}).get("rope_theta", 10000.0))
    return {
        "architecture": hf["architectures"][0],
        "dtype": engine.dtype,
        "logits_dtype": "float32",
        "vocab_size": hf["vocab_size"],
        "max_position_embeddings": hf["max_position_embeddings"],
        "hidden_size": hf["hidden_size"],
        "num_hidden_layers": hf["num_hidden_layers"],
        "num_attention_heads": heads,
        "num_key_value_heads": hf.get("num_key_value_heads", heads),
        "head_size": hf.get("head_dim") or hf["hidden_size"] // heads,
        "hidden_act": hf["hidden_act"],
        "intermediate_size": hf["intermediate_size"],
        "norm_epsilon": hf["rms_norm_eps"],
        "position_embedding_type": "rope_gpt_neox",
        "rotary_base": rope_theta,
        "rotary_scaling": hf.get("rope_scaling"),
        "attn_bias": bool(hf.get("attention_bias", False)),
        "mlp_bias": bool(hf.get("mlp_bias", False)),
        "tie_word_embeddings": bool(hf.get("tie_word_embeddings", False)),
        "use_parallel_embedding": False,
        "embedding_sharding_dim": 0,
        "mapping": {"world_size": engine.world_size, "tp_size": engine.tp_size, "pp_size": engine.pp_size},
        "quantization": {"quant_algo": None, "kv_cache_quant_algo": None},
    }
