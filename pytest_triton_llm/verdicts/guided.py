"""Whether a guided answer is what its guide allows: the whole text accepted by the guide's grammar and the grammar
complete at its end (xgrammar, the grammar engine TensorRT-LLM guides with, reading characters, not any server's
tokens), and for a JSON schema also valid under jsonschema, a judge of its own.

Guide kinds are the executor's names (json, json_schema, regex, ebnf_grammar). The JSON judges take any whitespace
between tokens: a server may guide with or without it (TensorRT-LLM's C++ backend compiles schemas without free
whitespace, llama.cpp's grammars allow some)."""

from __future__ import annotations

import json

JSON, JSON_SCHEMA, REGEX, EBNF = "json", "json_schema", "regex", "ebnf_grammar"
KINDS = (JSON, JSON_SCHEMA, REGEX, EBNF)
MISSING = 'xgrammar and jsonschema judge guided answers: pip install -c constraints.txt -e ".[guided]"'


class JudgeUnavailable(ImportError):
    """The guided extra is not installed: the check cannot judge (a skip, not a verdict)."""


def _grammar(xgr, kind: str, guide: str):
    if kind == JSON:
        return xgr.Grammar.builtin_json_grammar()
    if kind == JSON_SCHEMA:
        return xgr.Grammar.from_json_schema(guide, any_whitespace=True)
    if kind == REGEX:
        return xgr.Grammar.from_regex(guide)
    if kind == EBNF:
        return xgr.Grammar.from_ebnf(guide)
    raise ValueError(f"unknown guide kind {kind!r} (known: {', '.join(KINDS)})")


def _xgrammar():
    try:
        import xgrammar
    except ImportError:
        raise JudgeUnavailable(MISSING) from None
    return xgrammar


def grammar_problem(kind: str, guide: str, text: str, may_stop_short: bool = False) -> str | None:
    """Where `text` leaves the guide: the first character the grammar refuses, or that it stops short (unless
    `may_stop_short`: max_tokens may cut a guide whose grammar has no end); None if the grammar accepts it."""
    xgr = _xgrammar()
    compiled = xgr.GrammarCompiler(xgr.TokenizerInfo([])).compile_grammar(_grammar(xgr, kind, guide))
    matcher = xgr.GrammarMatcher(compiled, terminate_without_stop_token=True)
    for at, char in enumerate(text):
        if not matcher.accept_string(char):
            return f"the {kind} guide refuses character {at} ({char!r}) of {text!r}"
    if not matcher.is_terminated() and not may_stop_short:
        return f"{text!r} stops before the {kind} guide is complete"
    return None


def schema_problem(schema: str, text: str) -> str | None:
    """What jsonschema finds wrong with `text` under `schema`, or None."""
    try:
        import jsonschema
    except ImportError:
        raise JudgeUnavailable(MISSING) from None
    try:
        value = json.loads(text)
    except ValueError as exc:
        return f"{text!r} is not JSON: {exc}"
    errors = sorted(jsonschema.Draft202012Validator(json.loads(schema)).iter_errors(value), key=str)
    return f"{text!r} breaks the schema: {errors[0].message}" if errors else None


def problems(kind: str, guide: str, text: str, may_stop_short: bool = False) -> list[str]:
    """Everything wrong with `text` as an answer guided by (`kind`, `guide`); [] when it is what the guide allows.
    `may_stop_short`: the guide has no end, and a text max_tokens cut is judged as far as it goes."""
    found = grammar_problem(kind, guide, text, may_stop_short)
    if found or kind not in (JSON, JSON_SCHEMA) or (may_stop_short and grammar_problem(kind, guide, text)):
        return [found] if found else []  # a JSON text cut short is no JSON document yet
    schema = guide if kind == JSON_SCHEMA else "{}"  # {}: JSON at all
    return [p for p in (schema_problem(schema, text),) if p]
