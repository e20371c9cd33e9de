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


def _read(kind: str, guide: str, text: str) -> tuple[str | None, bool]:
    """(the first character the guide's grammar refuses, or None; whether the grammar is complete at the end)."""
    xgr = _xgrammar()
    compiled = xgr.GrammarCompiler(xgr.TokenizerInfo([])).compile_grammar(_grammar(xgr, kind, guide))
    matcher = xgr.GrammarMatcher(compiled, terminate_without_stop_token=True)
    for at, char in enumerate(text):
        if not matcher.accept_string(char):
            return f"the {kind} guide refuses character {at} ({char!r}) of {text!r}", False
    return None, matcher.is_terminated()


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
    problem, complete = _read(kind, guide, text)
    if problem is not None:
        return [problem]
    if not complete:  # a text cut short is no JSON document yet
        return [] if may_stop_short else [f"{text!r} stops before the {kind} guide is complete"]
    if kind not in (JSON, JSON_SCHEMA):
        return []
    found = schema_problem(guide if kind == JSON_SCHEMA else "{}", text)  # {}: JSON at all
    return [found] if found else []
