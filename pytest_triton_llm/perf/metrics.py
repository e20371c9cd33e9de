"""LLM serving metrics of one load point, from per-request timings."""

from __future__ import annotations

import numpy as np

from ..load import RequestRecord

STATS = ("mean", "p50", "p90", "p99")


def metric_value(result: dict, metric: str) -> float | None:
    """`metric` of a load point's summary: a top-level key (output_tokens_per_s) or group.stat (latency_ms.p99)."""
    if "." in metric:
        group, stat = metric.split(".")
        return (result.get(group) or {}).get(stat)
    return result.get(metric)


def stats_ms(values_s: list[float]) -> dict | None:
    if not values_s:
        return None
    ms = np.asarray(values_s) * 1000.0
    return {"mean": round(float(ms.mean()), 2), **{f"p{q}": round(float(np.percentile(ms, q)), 2) for q in (50, 90, 99)}}


def summarize(records: list[RequestRecord], duration_s: float) -> dict:
    """The report's perf entry for a load point (keys documented in docs/reports.md, "Report schema")."""
    ok = [r for r in records if r.error is None and r.done is not None]
    streamed = [r for r in ok if r.streamed and r.token_times]
    itl = [b - a for r in streamed for a, b in zip(r.token_times, r.token_times[1:], strict=False)]
    tokens = sum(r.tokens for r in ok)
    return {
        "requests": len(ok),
        "errors": len(records) - len(ok),
        "output_tokens": tokens,
        "duration_s": round(duration_s, 3),
        "throughput_rps": round(len(ok) / duration_s, 3) if duration_s else 0.0,
        "output_tokens_per_s": round(tokens / duration_s, 2) if duration_s else 0.0,
        "latency_ms": stats_ms([r.latency_s for r in ok]),
        "ttft_ms": stats_ms([r.token_times[0] - r.sent for r in streamed]),
        "itl_ms": stats_ms(itl),
        "error_samples": sorted({r.error for r in records if r.error})[:3],
    }
