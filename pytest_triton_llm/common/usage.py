"""OptionError: a command-line option the plugin refuses, reported as one line with exit code 4; and the parsing of
the header options (--triton-header, --openai-header) that raise it."""

from __future__ import annotations

from .errors import TritonLLMError


class OptionError(TritonLLMError, ValueError):
    pass


def header_pairs(headers: list[str], option: str) -> tuple[tuple[str, str], ...]:
    """`NAME: VALUE` options as (name, value) pairs; a malformed one is refused by its number, never by its text
    (a header's value may be a secret)."""
    pairs = []
    for number, header in enumerate(headers, 1):
        name, sep, value = header.partition(":")
        if not sep or not name.strip() or not value.strip():
            raise OptionError(f"{option} number {number}: expected 'NAME: VALUE'")
        pairs.append((name.strip(), value.strip()))
    return tuple(pairs)
