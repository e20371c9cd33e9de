"""A draft engine beside a reference engine, in the place of the second engine upstream's draft-target docs build: the
engine's own checkpoint without the decoder layers of the lock's [draft] table (self-speculative decoding), renumbered,
written to <engine>/draft/ as a Hugging Face checkpoint of its own with an engine.json whose build_config has no
max_draft_len (a draft engine is built without speculative decoding, as upstream's docs build theirs). The tokenizer
files come along: the draft model is the engine's, one vocabulary.

    python -m pytest_triton_llm.stack.engines.draft_checkpoint --engine DIR --drop-layers 12,13,14
"""

from __future__ import annotations

import argparse
import json
import re
import shutil
from pathlib import Path

DRAFT_DIR = "draft"  # under the engine directory: the engine_dir of a deployment's tensorrt_llm_draft model
WEIGHTS = "model.safetensors"
_LAYER = re.compile(r"^model\.layers\.(\d+)\.(.+)$")
_ALONG = ("generation_config.json", "tokenizer.json", "tokenizer_config.json", "chat_template.jinja")


def renamed(names: list[str], layers: int, drop: set[int]) -> dict[str, str]:
    """Old tensor name -> the draft's, for the tensors it keeps: a kept layer takes the index it has among the kept."""
    kept = [i for i in range(layers) if i not in drop]
    index = {old: new for new, old in enumerate(kept)}
    names_out = {}
    for name in names:
        match = _LAYER.match(name)
        if match is None:
            names_out[name] = name
        elif int(match[1]) in index:
            names_out[name] = f"model.layers.{index[int(match[1])]}.{match[2]}"
    return names_out


def build(engine: Path, drop: set[int]) -> Path:
    from safetensors.torch import load_file, save_file

    config = json.loads((engine / "config.json").read_text())
    layers = config["num_hidden_layers"]
    beyond = sorted(i for i in drop if i >= layers)
    if beyond:
        raise SystemExit(f"draft.drop_layers: the engine has {layers} decoder layers (0-{layers - 1}); {beyond} is beyond")
    if len(drop) >= layers:
        raise SystemExit(f"draft.drop_layers: drops all {layers} decoder layers; keep at least one")
    out = engine / DRAFT_DIR
    out.mkdir()
    tensors = load_file(str(engine / WEIGHTS))
    save_file({new: tensors[old] for old, new in renamed(list(tensors), layers, drop).items()}, str(out / WEIGHTS))
    (out / "config.json").write_text(json.dumps({**config, "num_hidden_layers": layers - len(drop)}, indent=2))
    built = json.loads((engine / "engine.json").read_text())
    built["build_config"].pop("max_draft_len", None)
    built["draft_of"] = {"drop_layers": sorted(drop)}
    (out / "engine.json").write_text(json.dumps(built, indent=2))
    for name in _ALONG:
        if (engine / name).is_file():
            shutil.copy2(engine / name, out / name)
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--engine", required=True, help="the converted checkpoint's directory")
    parser.add_argument("--drop-layers", required=True, help="decoder layer indices, comma-separated")
    args = parser.parse_args()
    drop = {int(i) for i in args.drop_layers.split(",")}
    out = build(Path(args.engine), drop)
    print(f"draft engine: {out} (decoder layers {sorted(drop)} of the engine's left out)", flush=True)


if __name__ == "__main__":
    main()
