"""A peft / Hugging Face LoRA adapter as TensorRT-LLM's lora_weights and lora_config tensors.

The layout of TensorRT-LLM's hf_lora_convert.py: one row per (layer, module), holding
lora_A flattened as [rank, in] followed by lora_B * (alpha / rank) flattened as
[out, rank], rows zero-padded to the longest; lora_config rows are
[module id, layer index, rank]. Both get a leading batch dimension of 1.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import numpy as np

# Hugging Face module -> TensorRT-LLM LoRA module (as hf_lora_convert maps them for llama)
HF_TO_TRTLLM = {
    "qkv_proj": "attn_qkv",
    "q_proj": "attn_q",
    "k_proj": "attn_k",
    "v_proj": "attn_v",
    "o_proj": "attn_dense",
    "gate_proj": "mlp_h_to_4h",
    "down_proj": "mlp_4h_to_h",
    "up_proj": "mlp_gate",
}
# TensorRT-LLM's LoraModule::ModuleType ids (tensorrt_llm config.pbtxt lists them)
MODULE_IDS = {
    "attn_qkv": 0,
    "attn_q": 1,
    "attn_k": 2,
    "attn_v": 3,
    "attn_dense": 4,
    "mlp_h_to_4h": 5,
    "mlp_4h_to_h": 6,
    "mlp_gate": 7,
}
_KEY = re.compile(r".*\.layers\.(\d+)\.(?:self_attn|mlp)\.([a-z_]+)\.lora_([AB])(?:\.[a-z_]+)?\.weight$")


class ConversionError(ValueError):
    pass


def adapter_scale(config: dict) -> float:
    rank, alpha = config["r"], config["lora_alpha"]
    return alpha / np.sqrt(rank) if config.get("use_rslora") else alpha / rank


def peft_to_trtllm(adapter_dir: Path, dtype: str = "float16") -> tuple[np.ndarray, np.ndarray]:
    from safetensors.numpy import load_file

    adapter_dir = Path(adapter_dir)
    config = json.loads((adapter_dir / "adapter_config.json").read_text())
    tensors = load_file(str(adapter_dir / "adapter_model.safetensors"))
    pieces: dict[tuple[int, str], dict[str, np.ndarray]] = {}
    for key, value in tensors.items():
        match = _KEY.match(key)
        if not match:
            raise ConversionError(f"{adapter_dir}: unexpected tensor {key!r}")
        layer, module, which = int(match.group(1)), match.group(2), match.group(3)
        if module not in HF_TO_TRTLLM:
            raise ConversionError(f"{adapter_dir}: module {module!r} has no TensorRT-LLM LoRA module")
        pieces.setdefault((layer, module), {})[which] = value.astype(np.float32)
    scale = adapter_scale(config)
    rows, meta = [], []
    for (layer, module), ab in sorted(pieces.items(), key=lambda item: (item[0][0], MODULE_IDS[HF_TO_TRTLLM[item[0][1]]])):
        a, b = ab["A"], ab["B"]  # peft: lora_A [rank, in], lora_B [out, rank]
        rank = a.shape[0]
        if b.shape[1] != rank:
            raise ConversionError(f"{adapter_dir}: layer {layer} {module}: lora_A rank {rank} != lora_B rank {b.shape[1]}")
        rows.append(np.concatenate([a.reshape(-1), (b * scale).reshape(-1)]))
        meta.append([MODULE_IDS[HF_TO_TRTLLM[module]], layer, rank])
    if not rows:
        raise ConversionError(f"{adapter_dir}: no LoRA tensors")
    width = max(len(r) for r in rows)
    weights = np.zeros((1, len(rows), width), dtype=dtype)
    for i, row in enumerate(rows):
        weights[0, i, : len(row)] = row
    return weights, np.asarray([meta], dtype=np.int32)


def main(argv: list[str] | None = None) -> int:
    """python -m pytest_triton_llm.lora.convert PEFT_DIR OUT_DIR [--dtype float16]"""
    import argparse

    parser = argparse.ArgumentParser(description="Convert a peft LoRA adapter to TensorRT-LLM's lora_weights/lora_config.")
    parser.add_argument("adapter", type=Path, help="directory with adapter_config.json and adapter_model.safetensors")
    parser.add_argument("out", type=Path, help="writes model.lora_weights.npy and model.lora_config.npy here")
    parser.add_argument("--dtype", default="float16", choices=["float16", "float32", "bfloat16"])
    args = parser.parse_args(argv)
    weights, config = peft_to_trtllm(args.adapter, args.dtype)
    args.out.mkdir(parents=True, exist_ok=True)
    np.save(args.out / "model.lora_weights.npy", weights)
    np.save(args.out / "model.lora_config.npy", config)
    print(f"{config.shape[1]} rows -> {args.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
