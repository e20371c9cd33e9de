"""Make a deterministic peft LoRA adapter for an engine's weights.

    python -m pytest_triton_llm.lora.make_adapter --engine DIR --out DIR --rank 8 --alpha 16 \\
        --seed 1 --b-std 0.03 --target-modules q_proj k_proj v_proj
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path


def make(engine: Path, out: Path, rank: int, alpha: int, seed: int, b_std: float, target_modules: list[str]) -> None:
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    import torch
    from peft import LoraConfig, get_peft_model
    from transformers import AutoModelForCausalLM

    torch.manual_seed(seed)
    model = AutoModelForCausalLM.from_pretrained(engine, dtype=torch.float32)
    config = LoraConfig(r=rank, lora_alpha=alpha, target_modules=target_modules, lora_dropout=0.0, init_lora_weights="gaussian")
    peft_model = get_peft_model(model, config)
    generator = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, param in sorted(peft_model.named_parameters()):
            if "lora_B" in name:
                param.copy_(torch.randn(param.shape, generator=generator) * b_std)
    peft_model.save_pretrained(str(out))
    print(f"saved {len([n for n, _ in peft_model.named_parameters() if 'lora_' in n])} LoRA tensors to {out}")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--engine", type=Path, required=True)
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--rank", type=int, required=True)
    parser.add_argument("--alpha", type=int, required=True)
    parser.add_argument("--seed", type=int, required=True)
    parser.add_argument("--b-std", type=float, required=True)
    parser.add_argument("--target-modules", nargs="+", required=True)
    args = parser.parse_args(argv)
    make(args.engine, args.out, args.rank, args.alpha, args.seed, args.b_std, args.target_modules)
    return 0


if __name__ == "__main__":
    sys.exit(main())
