"""MLPerf validity of a load point (--perf-mlperf NAME): p99 TTFT and TPOT limits, output-length rules (fixtures/mlperf.toml)."""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path

from ..triton.load import RequestRecord
from ..common.schema import SchemaError, build, load_toml
from .metrics import tpot_s, ttft_s

PERCENTILE = 0.99  # loadgen/mlperf.conf: *.Server.target_latency_percentile = 99


@dataclass(frozen=True)
class Benchmark:
    conf_name: str  # its name in loadgen/mlperf.conf
    ttft_p99_ms: float
    tpot_p99_ms: float
    min_tokens_per_request: int = 2
    min_mean_output_tokens: float | None = None  # the accuracy run's length floor, where it is counted in tokens
    length_rule: str | None = None  # that floor in words, where the records cannot judge it


def load_benchmarks(path: Path) -> dict[str, Benchmark]:
    data = load_toml(path)
    if not isinstance(data.get("benchmark"), dict):
        raise SchemaError(f"{path}: no [benchmark.<name>] table")
    return {name: build(Benchmark, table, f"{path}: benchmark '{name}'") for name, table in data["benchmark"].items()}


def loadgen_percentile(values: list[float], q: float = PERCENTILE) -> float:
    """loadgen's percentile: the sorted values' element at index floor(q * n) (loadgen/results.cc, 110-126)."""
    return sorted(values)[min(len(values) - 1, math.floor(q * len(values)))]


def judge(name: str, benchmark: Benchmark, records: list[RequestRecord]) -> dict:
    """VALID when the requests meet every constraint of `benchmark`, else INVALID with one reason per miss."""
    ok = [r for r in records if r.error is None and r.done is not None]
    reasons = []
    if len(ok) < len(records):  # a failed sample is an error in loadgen's log: no valid run has one
        reasons.append(f"{len(records) - len(ok)} of {len(records)} requests failed")
    ttfts = [t for r in ok if (t := ttft_s(r)) is not None]
    tpots = [t for r in ok if (t := tpot_s(r)) is not None]
    short = sum(1 for r in ok if r.tokens < benchmark.min_tokens_per_request)
    if short:
        reasons.append(f"{short} requests returned fewer than {benchmark.min_tokens_per_request} tokens")
    ttft_p99 = 1000 * loadgen_percentile(ttfts) if ttfts else None
    tpot_p99 = 1000 * loadgen_percentile(tpots) if tpots else None
    if ttft_p99 is None or len(ttfts) < len(ok):
        reasons.append("TTFT not measured for every request (MLPerf's Server scenario times the first token)")
    elif ttft_p99 > benchmark.ttft_p99_ms:
        reasons.append(f"TTFT p99 {ttft_p99:.1f} ms > {benchmark.ttft_p99_ms:g} ms")
    if tpot_p99 is not None and tpot_p99 > benchmark.tpot_p99_ms:
        reasons.append(f"TPOT p99 {tpot_p99:.1f} ms > {benchmark.tpot_p99_ms:g} ms")
    mean_tokens = sum(r.tokens for r in ok) / len(ok) if ok else 0.0
    if benchmark.min_mean_output_tokens is not None and mean_tokens < benchmark.min_mean_output_tokens:
        reasons.append(f"mean output {mean_tokens:.1f} tokens < {benchmark.min_mean_output_tokens:g} a request")
    return {
        "benchmark": name,
        "verdict": "INVALID" if reasons else "VALID",
        "reasons": reasons,
        "ttft_p99_ms": None if ttft_p99 is None else round(ttft_p99, 2),
        "tpot_p99_ms": None if tpot_p99 is None else round(tpot_p99, 2),
        "mean_output_tokens": round(mean_tokens, 2),
        "limits": {
            "ttft_p99_ms": benchmark.ttft_p99_ms,
            "tpot_p99_ms": benchmark.tpot_p99_ms,
            "min_tokens_per_request": benchmark.min_tokens_per_request,
            "min_mean_output_tokens": benchmark.min_mean_output_tokens,
        },
        "not_judged": benchmark.length_rule,
    }


def verdict_line(entry: dict) -> str:
    """VALID, or INVALID and why, in one line (the summary's MLPerf column)."""
    return entry["verdict"] if not entry["reasons"] else f"{entry['verdict']}: {'; '.join(entry['reasons'])}"
