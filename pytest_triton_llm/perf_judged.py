"""What judged a run's perf load points, in words: budgets, a baseline, or nothing (the summary's and the matrix's line)."""

from __future__ import annotations


def judged_by(points: list[dict]) -> str:
    by_budget = sum(bool(p.get("judged")) for p in points)
    compared = sum("compared" in p for p in points)
    parts = [f"budgets ({by_budget} of {len(points)} load points)"] if by_budget else []
    parts += [f"baseline {sorted({p['compared']['baseline'] for p in points if 'compared' in p})[0]} ({compared} of "
              f"{len(points)})"] if compared else []  # fmt: skip
    return " and ".join(parts) or "nothing: measured, not judged (no budget matches, no --perf-compare)"
