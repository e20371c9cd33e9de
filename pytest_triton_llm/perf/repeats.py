"""Repeated load points: per-metric mean, std, CV and t-based interval over the runs, and goodput under SLOs.

`--perf-repeats N` runs a load point N times on the same seeded workload. A budget is judged on the interval
(significance.against_budget: it fails only when the whole interval is on the wrong side), a baseline with repeats
by a Welch test, and a metric whose runs vary by more than NOISY_CV is named as noisy in the summary.
"""

from __future__ import annotations

import numpy as np

from ..triton.load import RequestRecord
from ..verdicts.significance import Slo, goodput, mean_ci, parse_slo
from .metrics import itl_s, metric_value, tpot_s, ttft_s


class PerfNoisy(UserWarning):
    """A load point's repeats varied by more than NOISY_CV: shown in pytest's warnings summary."""


NOISY_CV = 0.20  # a coefficient of variation above this makes a metric's verdict worth a second look
# the metrics whose spread is reported: top-level keys, or group.stat of the time distributions
METRICS = (
    "output_tokens_per_s",
    "throughput_rps",
    "latency_ms.p50",
    "latency_ms.p99",
    "ttft_ms.p50",
    "ttft_ms.p99",
    "itl_ms.p50",
    "itl_ms.p99",
    "icl_ms.p50",
    "icl_ms.p99",
    "tpot_ms.p99",
)


def median_run(runs: list[dict]) -> dict:
    """The run with the median output tokens/s: the one that stands for a load point's repeats."""
    return sorted(runs, key=lambda r: r["output_tokens_per_s"])[len(runs) // 2]


def spread(runs: list[dict]) -> dict:
    """{metric: {n, mean, std, cv, ci_low, ci_high, samples}} over the runs that measured it: the 95% t interval of
    the mean (cv and the interval None for one run)."""
    out = {}
    for metric in METRICS:
        samples = [v for run in runs if (v := metric_value(run, metric)) is not None]
        if not samples:
            continue
        s = mean_ci(samples)
        out[metric] = {
            "n": s.n,
            "mean": round(s.mean, 3),
            "std": _round(s.std),
            "cv": _round(s.cv),
            "ci_low": _round(s.ci_low),
            "ci_high": _round(s.ci_high),
            "samples": [round(v, 3) for v in samples],
        }
    return out


def noisy(spread_: dict) -> list[str]:
    """The metrics whose runs varied by more than NOISY_CV, as "metric (CV 27%)"."""
    return [f"{m} (CV {s['cv']:.0%})" for m, s in spread_.items() if s["cv"] is not None and s["cv"] > NOISY_CV]


def _round(value: float | None) -> float | None:
    return None if value is None else round(value, 4)


# -- goodput ---------------------------------------------------------------------------------------------------
PER_REQUEST = ("ttft_ms", "itl_ms", "tpot_ms", "latency_ms")


def parse_slos(specs: list[str]) -> tuple[Slo, ...]:
    """--perf-slo METRIC[.STAT]:LIMIT values; METRIC one of ttft_ms, itl_ms, tpot_ms, latency_ms (per request)."""
    slos = tuple(parse_slo(spec) for spec in specs)
    for slo in slos:
        if slo.metric not in PER_REQUEST:
            raise ValueError(f"--perf-slo {slo.metric}: a per-request metric is one of {', '.join(PER_REQUEST)}")
    return slos


def request_metrics(record: RequestRecord, slos: tuple[Slo, ...]) -> dict[str, float | None]:
    """One request's figures as the SLOs name them. TTFT, TPOT (MLPerf's) and latency are one value per request (a
    statistic in the SLO is ignored for them); itl_ms is the request's aiperf ITL, (last token - first token) /
    (tokens - 1), or with a statistic (itl_ms.p50) that statistic of its own gaps between token responses."""
    gaps = [1000 * (b - a) for a, b in zip(record.token_times, record.token_times[1:], strict=False)]
    values: dict[str, float | None] = {}
    for slo in slos:
        key = _key(slo)
        if slo.metric == "latency_ms":
            values[key] = 1000 * record.latency_s
        elif slo.metric == "ttft_ms":
            values[key] = _ms(ttft_s(record))
        elif slo.metric == "tpot_ms":
            values[key] = _ms(tpot_s(record))
        elif slo.statistic is None:
            values[key] = _ms(itl_s(record))
        else:
            values[key] = _reduce(gaps, slo.statistic) if gaps else None
    return values


def _ms(seconds: float | None) -> float | None:
    return None if seconds is None else 1000 * seconds


def judge_goodput(records: list[RequestRecord], slos: tuple[Slo, ...], duration_s: float) -> dict:
    """The share of requests within every SLO (a failed request is within none) and their rate: aiperf's goodput."""
    limits = {_key(s): s.limit for s in slos}
    figures = [request_metrics(r, slos) if r.error is None and r.done is not None else {} for r in records]
    result = goodput(figures, limits, duration_s)
    return {
        "slos": limits,
        "good": result.good,
        "total": result.total,
        "fraction": round(result.fraction, 4),
        "goodput_rps": round(result.goodput_rps, 3),
    }


def _key(slo: Slo) -> str:
    return slo.metric if slo.statistic is None or slo.metric != "itl_ms" else f"{slo.metric}.{slo.statistic}"


def _reduce(values: list[float], statistic: str | None) -> float:
    if statistic in (None, "mean"):
        return float(np.mean(values))
    if statistic == "median":
        return float(np.median(values))
    if statistic in ("min", "max"):
        return float(getattr(np, statistic)(values))
    return float(np.percentile(values, float(statistic[1:])))
