"""Build a Hugging Face checkpoint of random weights from a config.json and a seed, with another model's tokenizer.

The reference backend's build of a lock `dummy` source (perf without a weights download). Run as a subprocess, like
gguf_to_hf, so that torch never loads into the pytest process. Same config, seed, dtype and library versions give
the same weights: transformers initializes them from torch's generator, seeded here. Prints one line per stage.

    python -m pytest_triton_llm.stack.engines.dummy_weights --config CONFIG.json --seed 0 --dtype float32 --out DIR \
        (--tokenizer-dir CHECKPOINT | --tokenizer-gguf FILE)
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path


def _say(message: str) -> None:
    print(message, flush=True)


def build(
    config: Path, seed: int, dtype: str, out: Path, tokenizer_dir: Path | None = None, tokenizer_gguf: Path | None = None
) -> None:
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("TQDM_DISABLE", "1")
    start = time.monotonic()
    import torch
    import transformers
    from transformers import AutoConfig, AutoModelForCausalLM, AutoTokenizer

    transformers.logging.set_verbosity_error()
    if tokenizer_gguf is not None:
        _say(f"loading tokenizer from {tokenizer_gguf.name}")
        tokenizer = AutoTokenizer.from_pretrained(tokenizer_gguf.parent, gguf_file=tokenizer_gguf.name)
    else:
        _say(f"loading tokenizer from {tokenizer_dir}")
        tokenizer = AutoTokenizer.from_pretrained(tokenizer_dir)
    fields = json.loads(config.read_text())
    hf_config = AutoConfig.for_model(fields.pop("model_type"), **fields)
    if len(tokenizer) > hf_config.vocab_size:  # ids past the embedding table would index out of it
        raise SystemExit(
            f"the tokenizer has {len(tokenizer)} tokens, more than {config.name}'s vocab_size "
            f"{hf_config.vocab_size}: use a config whose vocabulary holds the tokenizer's"
        )
    torch.manual_seed(seed)
    model = AutoModelForCausalLM.from_config(hf_config, dtype=getattr(torch, dtype))
    n = sum(p.numel() for p in model.parameters())
    _say(f"initialized {n / 1e6:.1f}M random weights ({dtype}, seed {seed}) in {time.monotonic() - start:.1f} s")
    out.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(out)  # safetensors, config.json, generation_config.json; handles tied embeddings
    tokenizer.save_pretrained(out)
    _say(f"written in {time.monotonic() - start:.1f} s")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--config", type=Path, required=True)
    parser.add_argument("--seed", type=int, required=True)
    parser.add_argument("--dtype", choices=["float32", "float16", "bfloat16"], default="float32")
    parser.add_argument("--out", type=Path, required=True)
    tokenizer = parser.add_mutually_exclusive_group(required=True)
    tokenizer.add_argument("--tokenizer-dir", type=Path)
    tokenizer.add_argument("--tokenizer-gguf", type=Path)
    args = parser.parse_args(argv)
    build(args.config, args.seed, args.dtype, args.out, args.tokenizer_dir, args.tokenizer_gguf)
    return 0


if __name__ == "__main__":
    sys.exit(main())
