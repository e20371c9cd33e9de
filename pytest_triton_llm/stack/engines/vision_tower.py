"""A vision encoder beside a reference engine, in the place of the visual engine upstream's multimodal examples build:
a CLIP vision tower of the lock's [vision] shape and LLaVA's two-layer projector, seeded random weights (structure, no
semantics), written to <engine>/vision/ with a config.json whose builder_config.model_type is what upstream's
preprocessing and multimodal_encoders read. The projector's last layer is scaled so that an image's rows are as long
as the language model's own input embeddings: an image then moves the answer as tokens do, without swamping it.

    python -m pytest_triton_llm.stack.engines.vision_tower --engine DIR --model-type llava --image-size 64 \
        --patch-size 16 --hidden-size 64 --layers 2 --seed 0 --dtype float32
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

VISION_DIR = "vision"  # under the engine directory: the multimodal_model_path of a multimodal deployment
WEIGHTS = "model.safetensors"
FEATURE_LAYER = -2  # LLaVA's vision_feature_layer: the second-to-last layer's patch features (the class token dropped)


def vision_config(args: argparse.Namespace) -> dict:
    return {
        "image_size": args.image_size,
        "patch_size": args.patch_size,
        "hidden_size": args.hidden_size,
        "intermediate_size": 2 * args.hidden_size,
        "num_hidden_layers": args.layers,
        "num_attention_heads": max(1, args.hidden_size // 32),
        "projection_dim": args.hidden_size,
    }


def build(args: argparse.Namespace) -> Path:
    import torch
    from safetensors.torch import load_file, save_file
    from transformers import CLIPVisionConfig, CLIPVisionModel

    engine = Path(args.engine)
    llm = json.loads((engine / "config.json").read_text())
    checkpoint = load_file(str(engine / WEIGHTS))
    # the input embeddings; a checkpoint with tied embeddings (SmolLM2's) keeps them as the output head only
    embeddings = checkpoint["model.embed_tokens.weight" if "model.embed_tokens.weight" in checkpoint else "lm_head.weight"]
    torch.manual_seed(args.seed)
    config = CLIPVisionConfig(**vision_config(args))
    tower = CLIPVisionModel(config).eval()
    hidden = llm["hidden_size"]
    last = torch.nn.Linear(hidden, hidden)
    projector = torch.nn.Sequential(torch.nn.Linear(args.hidden_size, hidden), torch.nn.GELU(), last).eval()
    with torch.inference_mode():
        probe = torch.randn(8, 3, args.image_size, args.image_size)
        rows = projector(tower(probe, output_hidden_states=True).hidden_states[FEATURE_LAYER][:, 1:])
        scale = embeddings.float().norm(dim=-1).mean() / rows.norm(dim=-1).mean()
        last.weight.mul_(scale)
        last.bias.mul_(scale)
    dtype = getattr(torch, args.dtype)
    weights = {f"tower.{k}": v.to(dtype).contiguous() for k, v in tower.state_dict().items()}
    weights |= {f"projector.{k}": v.to(dtype).contiguous() for k, v in projector.state_dict().items()}
    out = engine / VISION_DIR
    out.mkdir(exist_ok=True)
    save_file(weights, str(out / WEIGHTS))
    features = (args.image_size // args.patch_size) ** 2
    record = {
        "builder_config": {"model_type": args.model_type, "precision": args.dtype, "num_features": features},
        "vision_config": vision_config(args),
        "projector": {"in": args.hidden_size, "hidden": hidden, "layers": ["linear", "gelu", "linear"]},
        "vision_feature_layer": FEATURE_LAYER,
        "seed": args.seed,
    }
    (out / "config.json").write_text(json.dumps(record, indent=2))
    print(f"vision encoder: CLIP {args.layers} layers x {args.hidden_size}, {features} rows of {hidden} an image")
    return out


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--engine", required=True, help="the reference engine's directory (config.json, model.safetensors)")
    parser.add_argument("--model-type", default="llava")
    parser.add_argument("--image-size", type=int, required=True)
    parser.add_argument("--patch-size", type=int, required=True)
    parser.add_argument("--hidden-size", type=int, required=True)
    parser.add_argument("--layers", type=int, required=True)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--dtype", default="float32")
    build(parser.parse_args(argv))


if __name__ == "__main__":
    main()
