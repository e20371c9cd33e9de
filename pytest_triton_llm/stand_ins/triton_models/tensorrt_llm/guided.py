"""Guided decoding for the reference engine, as TensorRT-LLM's GuidedDecoder does it with its xgrammar backend: the
request's guide is compiled against the engine's vocabulary, and at every step a token bitmask leaves only the tokens
the grammar allows; the grammar's end allows only the end token.

Guide types are the executor's GuideType (executor.h; TensorRT-LLM's triton_backend utils.cc
getGuidedDecodingParamsFromTensors names them json, json_schema, regex, ebnf_grammar): kJSON compiles xgrammar's
built-in JSON grammar, kJSON_SCHEMA the schema with no free whitespace (xgrammar.cpp CompileJSONSchema(guide,
any_whitespace=false)), kREGEX and kEBNF_GRAMMAR their grammars; kSTRUCTURAL_TAG the structural tag (trtllm-serve's
PyTorch path). Self-contained: copied beside model.py and server.py, imported by bare name. xgrammar is imported
here only: a server whose requests carry no guide never loads it.
"""

from __future__ import annotations

import json
from functools import lru_cache

import torch

JSON, JSON_SCHEMA, REGEX, EBNF, STRUCTURAL_TAG = "json", "json_schema", "regex", "ebnf_grammar", "structural_tag"
GUIDE_TYPES = (JSON, JSON_SCHEMA, REGEX, EBNF, STRUCTURAL_TAG)
TRITON_GUIDE_TYPES = (JSON, JSON_SCHEMA, REGEX, EBNF)  # what the C++ model's tensors map (utils.cc); trtllm-serve has all
NOT_SET_UP = (
    "Request is specified with GuidedDecodingParams, but GuidedDecoder is not setup. Please provide a valid "
    "GuidedDecodingConfig to setup GuidedDecoder."
)  # trtllmGptModelInferenceRunner / executorImpl's TLLM_CHECK_WITH_INFO


class GuideError(ValueError):
    """A guide xgrammar cannot compile (an invalid schema, regex or grammar)."""


class GuidedDecoder:
    """One per engine: xgrammar's tokenizer info and compiler over the engine's vocabulary, the end token its only
    stop token (GuidedDecodingConfig's stop token ids)."""

    def __init__(self, tokenizer_info, vocab_size: int):
        import xgrammar

        self._xgr = xgrammar
        self._compiler = xgrammar.GrammarCompiler(tokenizer_info, max_threads=1)
        self.vocab_size = vocab_size
        self.compiled = lru_cache(maxsize=64)(self._compile)

    @classmethod
    def for_tokenizer(cls, tokenizer, vocab_size: int, end_id: int) -> GuidedDecoder:
        """Over a Hugging Face tokenizer's vocabulary, padded to the model's `vocab_size` rows."""
        import xgrammar

        info = xgrammar.TokenizerInfo.from_huggingface(tokenizer, vocab_size=vocab_size, stop_token_ids=[end_id])
        return cls(info, vocab_size)

    def _compile(self, guide_type: str, guide: str):
        compiler = self._compiler
        try:
            if guide_type == JSON:
                return compiler.compile_builtin_json_grammar()
            if guide_type == JSON_SCHEMA:
                return compiler.compile_json_schema(guide, any_whitespace=False)
            if guide_type == REGEX:
                return compiler.compile_regex(guide)
            if guide_type == EBNF:
                return compiler.compile_grammar(guide)
            if guide_type == STRUCTURAL_TAG:
                return compiler.compile_structural_tag(json.loads(guide))
        except (RuntimeError, ValueError, TypeError) as exc:  # xgrammar's compile errors
            raise GuideError(f"the {guide_type} guide does not compile: {exc}") from None
        raise GuideError(f"unknown guide type {guide_type!r} (known: {', '.join(GUIDE_TYPES)})")

    def start(self, guide_type: str, guide: str) -> Guide:
        """A new sequence's guide (raises GuideError before the request is admitted)."""
        return Guide(self._xgr, self.compiled(guide_type, guide or ""), self.vocab_size)


class Guide:
    """One sequence's matcher: mask a step's logits, then accept the token chosen."""

    def __init__(self, xgr, compiled, vocab_size: int):
        self._xgr = xgr
        self._matcher = xgr.GrammarMatcher(compiled)
        self._bitmask = xgr.allocate_token_bitmask(1, vocab_size)

    def mask(self, row: torch.Tensor) -> None:
        """Set every token the grammar forbids next to -inf in `row` [V], in place (on the CPU)."""
        self._matcher.fill_next_token_bitmask(self._bitmask)
        view = row.view(1, -1)
        self._xgr.apply_token_bitmask_inplace(view, self._bitmask.to(view.device))

    def accept(self, token: int) -> None:
        self._matcher.accept_token(token)
