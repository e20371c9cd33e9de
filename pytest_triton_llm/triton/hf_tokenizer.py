"""Load a Hugging Face tokenizer without AutoConfig, or without transformers at all.

AutoTokenizer reads the model config, which imports torch and the model code: about 4 s per python backend stub on a
2-core machine. The class named in tokenizer_config.json loads the same tokenizer in a fraction of that.
`load_text_tokenizer` goes further for models that only encode and decode (the stand-in's preprocessing and
postprocessing): where the directory has a `tokenizer.json`, the `tokenizers` library alone serves it (0.07 s to
import against transformers' 2-5 s), with transformers' own answers (tests/unit/test_hf_tokenizer.py compares them).
"""

from __future__ import annotations

import json
from pathlib import Path


def load_tokenizer(directory, **kwargs):
    import transformers

    config = Path(directory) / "tokenizer_config.json"
    name = json.loads(config.read_text()).get("tokenizer_class") if config.is_file() else None
    cls = getattr(transformers, name, None) if name else None
    if cls is None:
        cls = transformers.AutoTokenizer
    return cls.from_pretrained(directory, **kwargs)


def load_text_tokenizer(directory):
    """A tokenizer for encode/decode only: the `tokenizers` library's where the directory has tokenizer.json, else
    transformers' (a SentencePiece-only checkpoint)."""
    if (Path(directory) / "tokenizer.json").is_file():
        return TextTokenizer(Path(directory))
    return load_tokenizer(directory)


def _token_text(value) -> str | None:
    return value.get("content") if isinstance(value, dict) else value


class TextTokenizer:
    """The part of transformers' tokenizer API that encoding and decoding need, over `tokenizers.Tokenizer`.

    tokenizer_config.json names the special tokens (transformers reads them from there too); a missing pad token
    is the end token, as the preprocessing models set it."""

    def __init__(self, directory: Path):
        from tokenizers import Tokenizer

        self._tokenizer = Tokenizer.from_file(str(directory / "tokenizer.json"))
        config_path = directory / "tokenizer_config.json"
        config = json.loads(config_path.read_text()) if config_path.is_file() else {}
        self.eos_token = _token_text(config.get("eos_token"))
        self.bos_token = _token_text(config.get("bos_token"))
        self.pad_token = _token_text(config.get("pad_token")) or self.eos_token

    def _id(self, token: str | None) -> int | None:
        return None if token is None else self._tokenizer.token_to_id(token)

    @property
    def eos_token_id(self) -> int | None:
        return self._id(self.eos_token)

    @property
    def bos_token_id(self) -> int | None:
        return self._id(self.bos_token)

    def __len__(self) -> int:
        return self._tokenizer.get_vocab_size(with_added_tokens=True)

    def encode(self, text: str, add_special_tokens: bool = True) -> list[int]:
        return self._tokenizer.encode(text, add_special_tokens=add_special_tokens).ids

    def batch_decode(self, sequences, skip_special_tokens: bool = False) -> list[str]:
        return self._tokenizer.decode_batch([list(s) for s in sequences], skip_special_tokens=skip_special_tokens)

    def convert_ids_to_tokens(self, ids) -> list[str | None]:
        return [self._tokenizer.id_to_token(i) for i in ids]
