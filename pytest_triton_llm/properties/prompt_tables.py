"""Prompt tables for the property matrix: rows that are the served model's own input embeddings of chosen tokens, read
from the checkpoint beside the engine, so that a prompt id vocab_size + k (row k) must answer as the token it stands
for. That holds on real TensorRT-LLM too: its prompt tuning looks such an id up in the request's table, every other id
in the model's embedding table."""

from __future__ import annotations

import json
from functools import lru_cache
from pathlib import Path

import numpy as np

from .requests import Unanswerable

# the input embedding's name in the checkpoints the lock's architectures save (llama/mistral/qwen/gemma/phi, gpt)
EMBEDDING_NAMES = ("model.embed_tokens.weight", "transformer.wte.weight", "model.embed_tokens.embedding")
TIED = ("lm_head.weight",)  # a tied checkpoint may keep the one matrix under the head's name (SmolLM2's does)


def input_embeddings(engine_dir: Path) -> np.ndarray:
    """The [vocab_size, hidden] input embedding of the checkpoint in `engine_dir` (float32), or Unanswerable."""
    return _read(str(engine_dir))


@lru_cache(maxsize=4)
def _read(engine_dir: str) -> np.ndarray:
    files = sorted(Path(engine_dir).glob("*.safetensors"))
    if not files:
        raise Unanswerable(f"{engine_dir} holds no checkpoint weights (*.safetensors) to read the input embeddings from")
    try:
        import torch  # noqa: F401  (safetensors reads bfloat16 checkpoints through it)
        from safetensors import safe_open
    except ImportError:
        raise Unanswerable("torch or safetensors is not installed: the prompt-table rows are read from the checkpoint") from None
    names = EMBEDDING_NAMES + (TIED if _tied(Path(engine_dir)) else ())
    for name in names:
        for file in files:
            with safe_open(str(file), framework="pt") as weights:
                if name in weights.keys():
                    return weights.get_tensor(name).float().numpy()
    raise Unanswerable(f"no input embedding ({', '.join(names)}) in {engine_dir}'s safetensors")


def _tied(engine_dir: Path) -> bool:
    """Whether the checkpoint ties its input embedding to the output head (config.json's tie_word_embeddings)."""
    config = engine_dir / "config.json"
    return config.is_file() and bool(json.loads(config.read_text()).get("tie_word_embeddings"))


def single_tokens(tokenizer, words: tuple[str, ...]) -> list[int]:
    """The one token id of each word, or Unanswerable where the tokenizer splits one."""
    ids = [tokenizer.encode(w, add_special_tokens=False) for w in words]
    if any(len(i) != 1 for i in ids):
        raise Unanswerable(f"the tokenizer splits one of {words}: a prompt-table row stands for one token")
    return [i[0] for i in ids]


def with_table_ids(ids: list[int], tokens: list[int], vocab_size: int) -> list[int]:
    """`ids` with each token of `tokens` replaced by the prompt-table id of its row: vocab_size + its index."""
    rows = {token: vocab_size + k for k, token in enumerate(tokens)}
    return [rows.get(t, t) for t in ids]
