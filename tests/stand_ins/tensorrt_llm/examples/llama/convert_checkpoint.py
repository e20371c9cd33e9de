"""Stand-in examples/llama/convert_checkpoint.py: the Hugging Face checkpoint copied as the "TensorRT-LLM checkpoint"."""

import argparse
import json
import shutil
from pathlib import Path

parser = argparse.ArgumentParser()
parser.add_argument("--model_dir", required=True)
parser.add_argument("--output_dir", required=True)
parser.add_argument("--dtype", required=True, choices=["float32", "float16", "bfloat16"])
parser.add_argument("--tp_size", type=int, default=1)
parser.add_argument("--pp_size", type=int, default=1)
args = parser.parse_args()
if args.tp_size * args.pp_size != 1:
    raise SystemExit("stand-in convert_checkpoint.py: one rank only")
model, out = Path(args.model_dir), Path(args.output_dir)
out.mkdir(parents=True, exist_ok=True)
for path in [model / "config.json", *sorted(model.glob("*.safetensors"))]:
    print(f"[TRT-LLM stand-in] converting {path.name}", flush=True)
    shutil.copy2(path, out / path.name)
(out / "stand_in_checkpoint.json").write_text(json.dumps({"dtype": args.dtype, "model_dir": str(model)}))
print(f"[TRT-LLM stand-in] checkpoint written to {out}")
