"""The stand-in's light tokenizer (tokenizers alone) answers as transformers' tokenizer of the same directory: ids,
special tokens, decoding with and without them, byte-level pieces. On a tokenizer trained here (always) and on the
embedded default's (where this machine has built it)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from pytest_triton_llm.triton.hf_tokenizer import TextTokenizer, load_text_tokenizer, load_tokenizer

from ..conftest import BUILT_CACHE

TEXTS = [
    "What is the capital of France?",
    " leading space and  double  spaces",
    "Привет, мир! 你好，世界。 こんにちは 🦙🚀",
    "<|im_start|>user\nHi<|im_end|>\n",
    "",
    "tabs\tand\nnewlines\r\n",
    "numbers 1234567 and symbols ~!@#$%^&*()",
]


def trained(directory: Path) -> Path:
    """A byte-level BPE with special tokens, saved as transformers saves a fast tokenizer."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, processors, trainers

    tokenizer = Tokenizer(models.BPE())
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tokenizer.decoder = decoders.ByteLevel()
    specials = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]
    trainer = trainers.BpeTrainer(vocab_size=400, special_tokens=specials, initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    tokenizer.train_from_iterator(TEXTS * 20, trainer)
    # a BOS added to every encoding with special tokens, so that add_special_tokens has an effect to compare
    bos = ("<|im_start|>", tokenizer.token_to_id("<|im_start|>"))
    tokenizer.post_processor = processors.TemplateProcessing(single="<|im_start|> $A", special_tokens=[bos])
    tokenizer.save(str(directory / "tokenizer.json"))
    config = {"tokenizer_class": "PreTrainedTokenizerFast", "bos_token": "<|im_start|>", "eos_token": "<|im_end|>"}
    (directory / "tokenizer_config.json").write_text(json.dumps(config))
    return directory


def built() -> list[Path]:
    return sorted(p.parent for p in (BUILT_CACHE / "engines").glob("smollm2-135m-*/tokenizer.json"))[:1]


@pytest.fixture(params=["trained", "embedded default"])
def directory(request, tmp_path) -> Path:
    if request.param == "trained":
        return trained(tmp_path)
    found = built()
    if not found:
        pytest.skip(f"no smollm2-135m engine built in {BUILT_CACHE} (pytest suites builds it)")
    return found[0]


def test_the_light_tokenizer_answers_as_transformers_does(directory):
    light, full = load_text_tokenizer(directory), load_tokenizer(directory)
    assert isinstance(light, TextTokenizer)
    assert (light.eos_token, light.bos_token_id, light.eos_token_id) == (full.eos_token, full.bos_token_id, full.eos_token_id)
    assert len(light) == len(full)
    for text in TEXTS:
        for special in (True, False):
            ids = light.encode(text, add_special_tokens=special)
            assert ids == full.encode(text, add_special_tokens=special), (text, special)
    sequences = [light.encode(text) for text in TEXTS] + [light.encode(TEXTS[2])[:5]]  # a split multi-byte character
    for skip in (True, False):
        assert light.batch_decode(sequences, skip_special_tokens=skip) == full.batch_decode(sequences, skip_special_tokens=skip)
    assert light.convert_ids_to_tokens(sequences[2]) == full.convert_ids_to_tokens(sequences[2])


def test_a_directory_without_tokenizer_json_gets_transformers_tokenizer(tmp_path, monkeypatch):
    calls = []
    monkeypatch.setattr("pytest_triton_llm.triton.hf_tokenizer.load_tokenizer", lambda d: calls.append(d) or "transformers'")
    assert load_text_tokenizer(tmp_path) == "transformers'" and calls == [tmp_path]
