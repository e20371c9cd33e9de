"""Convert a GGUF checkpoint to a Hugging Face directory (safetensors + tokenizer + config).

Run as a subprocess by the reference builder so that torch and the dequantized
weights never load into the pytest process. Prints one progress line per stage.

    python -m pytest_triton_llm.stack.engines.gguf_to_hf --gguf FILE --out DIR --dtype float32
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


def _read_and_map_once() -> None:
    """transformers reads the GGUF three times (tokenizer, config, weights: 5.5 s each for SmolLM2-135M on 2 cores,
    mostly its 49k-token vocabulary) and builds gguf's tensor name map once per tensor (397 times: 7.4 s). Both are
    memoized here, in this subprocess only: the same reader and map, so the same tensors, in a third of the time."""
    import functools

    import gguf

    reader_class, readers = gguf.GGUFReader, {}

    def read_once(path, *args, **kwargs):
        key = (os.path.realpath(path), args, tuple(sorted(kwargs.items())))
        if key not in readers:
            readers[key] = reader_class(path, *args, **kwargs)
        return readers[key]

    gguf.GGUFReader = read_once  # type: ignore[misc,assignment]  # called, never subclassed, by transformers
    gguf.get_tensor_name_map = functools.lru_cache(maxsize=None)(gguf.get_tensor_name_map)


def convert(gguf: Path, out: Path, dtype: str) -> None:
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("TQDM_DISABLE", "1")
    start = time.monotonic()
    import safetensors.torch
    import torch
    import transformers
    from transformers import AutoModelForCausalLM, AutoTokenizer

    _read_and_map_once()

    transformers.logging.set_verbosity_error()
    _say(f"loading tokenizer from {gguf.name}")
    tokenizer = AutoTokenizer.from_pretrained(gguf.parent, gguf_file=gguf.name)
    _say(f"dequantizing weights to {dtype} ({time.monotonic() - start:.1f} s)")
    model = AutoModelForCausalLM.from_pretrained(gguf.parent, gguf_file=gguf.name, dtype=getattr(torch, dtype))
    _say(f"writing safetensors ({time.monotonic() - start:.1f} s)")
    out.mkdir(parents=True, exist_ok=True)
    # save_pretrained refuses GGUF-loaded models; save_model handles the tied embeddings
    safetensors.torch.save_model(model, str(out / "model.safetensors"), metadata={"format": "pt"})
    config = model.config.to_dict()
    config.pop("quantization_config", None)  # the written weights are plain tensors
    config.pop("_name_or_path", None)  # a local path: would make the digest differ per machine
    config["dtype"] = dtype
    (out / "config.json").write_text(json.dumps(config, indent=2, sort_keys=True, default=str))
    model.generation_config.save_pretrained(out)
    tokenizer.save_pretrained(out)
    _say(f"converted in {time.monotonic() - start:.1f} s")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--gguf", type=Path, required=True)
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--dtype", choices=["float32", "float16", "bfloat16"], default="float32")
    args = parser.parse_args(argv)
    convert(args.gguf, args.out, args.dtype)
    return 0


if __name__ == "__main__":
    sys.exit(main())
