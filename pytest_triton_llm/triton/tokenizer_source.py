"""Load the tokenizer a command line names (--tokenizer, or an endpoint's model id): a directory here, a GGUF file that
carries its tokenizer, or a Hugging Face model id whose tokenizer files are fetched."""

from __future__ import annotations

from pathlib import Path

from ..common.errors import TritonLLMError
from .hf_tokenizer import load_tokenizer

TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json", "tokenizer.model")
# a model id's files that make its tokenizer (its chat template included), not its weights
HUB_PATTERNS = ["tokenizer*", "special_tokens_map.json", "*.jinja", "vocab*", "merges.txt", "config.json"]


class TokenizerNotFound(TritonLLMError, RuntimeError):
    """The named tokenizer cannot be loaded here; the message is one line saying what to pass instead."""


def tokenizer_dir(given: str, option: str) -> Path:
    """The directory of tokenizer `given`: a directory here that holds one, or a Hugging Face id's tokenizer files."""
    if Path(given).is_dir():
        if not any((Path(given) / name).is_file() for name in TOKENIZER_FILES):
            files = f"{', '.join(TOKENIZER_FILES[:-1])} or {TOKENIZER_FILES[-1]}"
            raise TokenizerNotFound(f"{option} {given}: the directory holds no tokenizer ({files})")
        return Path(given)
    from huggingface_hub import snapshot_download

    try:
        return Path(snapshot_download(given, allow_patterns=HUB_PATTERNS))
    except Exception as exc:  # noqa: BLE001 - a bad id, no network, a gated repository: one line either way
        raise TokenizerNotFound(
            f"{option} {given}: neither a directory here nor a Hugging Face model id that could be fetched "
            f"({type(exc).__name__}: {str(exc).splitlines()[0][:200]})"
        ) from None


def load_named_tokenizer(given: str, option: str):
    """The tokenizer `given` names; a GGUF file (llama.cpp's model id is its path) loads the tokenizer it carries."""
    path = Path(given)
    if path.suffix == ".gguf" and path.is_file():
        from transformers import AutoTokenizer

        return AutoTokenizer.from_pretrained(path.parent, gguf_file=path.name)
    return load_tokenizer(tokenizer_dir(given, option))
