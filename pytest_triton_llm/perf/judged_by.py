"""What judged a run's perf load points, in words: budgets, a baseline, or nothing (the summary's and the matrix's line)."""

from __future__ import annotations


def judged_by(points: list[dict]) -> str:
    by_budget = sum(bool(p.get("judged")) for p in points)
    compared = sum("compared" in p for p in points)
    parts = [f"budgets ({by_budget} of {len(points)} load points)"] if by_budget else []
    sources = sorted(
        {
            f"baseline {c['baseline']}" if "baseline" in c else f"reference {c['against']} (interleaved)"
            for p in points
            if (c := p.get("compared"))
        }
    )
    parts += [f"{' and '.join(sources)} ({compared} of {len(points)})"] if compared else []
    return " and ".join(parts) or "nothing: measured, not judged (no budget matches, no --perf-compare or --perf-against)"
