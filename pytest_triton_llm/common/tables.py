"""Plain-text tables for the terminal and for verdict messages: a header, a rule, and columns padded to fit."""

from __future__ import annotations

from collections.abc import Sequence


def table(headers: list[str], rows: Sequence[Sequence[object]]) -> list[str]:
    widths = [max(len(str(x)) for x in col) for col in zip(headers, *rows, strict=True)]
    fmt = "  ".join(f"{{:<{w}}}" for w in widths)
    return [fmt.format(*headers), fmt.format(*("-" * w for w in widths))] + [fmt.format(*map(str, r)) for r in rows]
