"""LLM serving metrics of one load point, from per-request timings, named and defined as aiperf and MLPerf define them."""

from __future__ import annotations

import numpy as np

from ..triton.load import RequestRecord

V1_PERF = "v1_perf"  # the report's run-level table of the /v1 perf suite's load points

STATS = ("mean", "p50", "p90", "p99")

_AIPERF = "https://github.com/ai-dynamo/aiperf/blob/main/src/aiperf/metrics/types"
_LOADGEN = "https://github.com/mlcommons/inference/blob/master/loadgen"
# Each field of a load point's summary, its definition and the source that defines it so (the report's
# perf_definitions; docs/verdicts.md, "Perf metrics and their definitions", says the same at length).
DEFINITIONS = {
    "latency_ms": "E2E request latency: send to the request's last response (Triton's empty final one on gRPC), "
    f"per request; aiperf's request_latency ({_AIPERF}/request_latency_metric.py) ends at the last content response",
    "ttft_ms": f"time to first token: send to the first response carrying tokens, per request ({_AIPERF}/ttft_metric.py)",
    "itl_ms": "aiperf's ITL: per request (last token response - first token response) / (output tokens - 1), "
    f"requests of < 2 tokens left out; distribution over requests ({_AIPERF}/inter_token_latency_metric.py)",
    "icl_ms": "aiperf's ICL: every gap between consecutive token responses of every streamed request, pooled "
    f"({_AIPERF}/inter_chunk_latency_metric.py); itl_ms before 0.1.0",
    "tpot_ms": "MLPerf's TPOT: per request (E2E latency - TTFT) / (output tokens - 1), requests of < 2 tokens left "
    f"out ({_LOADGEN}/logging.cc, AsyncLog::RecordSampleCompletion); distribution over requests",
    "output_token_throughput_per_user": "aiperf's output token throughput per user: per request 1 / ITL in tokens/s "
    "(https://github.com/ai-dynamo/aiperf/blob/main/docs/metrics_reference.md); distribution over requests",
    "output_token_throughput": "aiperf's output token throughput: output tokens / benchmark_duration_s "
    "(https://github.com/ai-dynamo/aiperf/blob/main/docs/metrics_reference.md)",
    "benchmark_duration_s": "aiperf's benchmark duration: the first request's send to the last response carrying tokens",
    "output_tokens_per_s": "output tokens / duration_s: the load generator's window, from the load point's start "
    "(after warm-up) to the last request's end; throughput_rps the same of answered requests",
}


def perf_load_points(document: dict):
    """(deployment id, what served it, {load point: entry}) of a report document: each Triton deployment the perf
    suite measured, and the /v1 perf suite's endpoint (id "<engine>:openai:<family>", from its entries)."""
    for deployment, info in sorted(document.get("deployments", {}).items()):
        if points := (info.get("metrics") or {}).get("perf"):
            yield deployment, info, points
    if v1 := document.get(V1_PERF):
        first = next(iter(v1.values()))
        yield f"{first['engine']}:{first['deployment']}", {"image": first.get("image"), "backend": first.get("family")}, v1


def metric_value(result: dict, metric: str) -> float | None:
    """`metric` of a load point's summary: a top-level key (output_tokens_per_s) or group.stat (latency_ms.p99)."""
    if "." in metric:
        group, stat = metric.split(".")
        return (result.get(group) or {}).get(stat)
    return result.get(metric)


def stats(values: list[float], scale: float = 1.0) -> dict | None:
    """Mean and percentiles (numpy's linear interpolation) of `values` times `scale`; None for no values."""
    if not values:
        return None
    scaled = np.asarray(values) * scale
    return {
        "mean": round(float(scaled.mean()), 2),
        **{f"p{q}": round(float(np.percentile(scaled, q)), 2) for q in (50, 90, 99)},
    }


def stats_ms(values_s: list[float]) -> dict | None:
    return stats(values_s, 1000.0)


def ttft_s(record: RequestRecord) -> float | None:
    """Send to the first response carrying tokens; None for a request that did not stream or got no tokens."""
    return record.token_times[0] - record.sent if record.streamed and record.token_times else None


def itl_s(record: RequestRecord) -> float | None:
    """aiperf's ITL of one request: (request latency - TTFT) / (output tokens - 1), its request latency ending at the
    last content response, so (last token response - first token response) / (tokens - 1); None under 2 tokens."""
    if not record.streamed or not record.token_times or record.tokens < 2:
        return None
    return (record.token_times[-1] - record.token_times[0]) / (record.tokens - 1)


def tpot_s(record: RequestRecord) -> float | None:
    """MLPerf's TPOT of one sample: (latency - first token latency) / (n_tokens - 1), latency up to the sample's
    completion (loadgen/logging.cc, AsyncLog::RecordSampleCompletion: `time_per_output_token_[i] = (latency -
    token_latencies_[i]) / (n_tokens - 1)`, line 475 at mlcommons/inference b66003e; a sample of 1 token is an
    error there, "Number of tokens need to be greater than 1", line 452); None under 2 tokens."""
    ttft = ttft_s(record)
    if ttft is None or record.done is None or record.tokens < 2:
        return None
    return (record.latency_s - ttft) / (record.tokens - 1)


def summarize(records: list[RequestRecord], duration_s: float) -> dict:
    """The report's perf entry for a load point (keys documented in docs/reports.md, "Report schema"; their
    definitions in DEFINITIONS)."""
    ok = [r for r in records if r.error is None and r.done is not None]
    streamed = [r for r in ok if r.streamed and r.token_times]
    gaps = [b - a for r in streamed for a, b in zip(r.token_times, r.token_times[1:], strict=False)]
    itl = [v for r in streamed if (v := itl_s(r)) is not None]
    tokens = sum(r.tokens for r in ok)
    # aiperf's benchmark duration: the first send to the last response with content (a request's end without tokens)
    ends = [r.token_times[-1] if r.token_times else r.sent + r.latency_s for r in ok]  # (sent + latency: its done)
    span = max(ends) - min(r.sent for r in ok) if ok else 0.0
    return {
        "requests": len(ok),
        "errors": len(records) - len(ok),
        "output_tokens": tokens,
        "duration_s": round(duration_s, 3),
        "throughput_rps": round(len(ok) / duration_s, 3) if duration_s else 0.0,
        "output_tokens_per_s": round(tokens / duration_s, 2) if duration_s else 0.0,
        "benchmark_duration_s": round(span, 3),
        "output_token_throughput": round(tokens / span, 2) if span > 0 else 0.0,
        "latency_ms": stats_ms([r.latency_s for r in ok]),
        "ttft_ms": stats_ms([r.token_times[0] - r.sent for r in streamed]),
        "itl_ms": stats_ms(itl),
        "icl_ms": stats_ms(gaps),
        "tpot_ms": stats_ms([v for r in streamed if (v := tpot_s(r)) is not None]),
        "output_token_throughput_per_user": stats([1.0 / v for v in itl if v > 0]),
        "error_samples": sorted({r.error for r in records if r.error})[:3],
        **speculation(ok),
    }


def speculation(records: list[RequestRecord]) -> dict:
    """Speculative decoding's counts over the load point's requests that returned them (the deployment speculates and
    the requests asked for perf metrics), as TensorRT-LLM counts them per request: draft tokens proposed, those kept,
    and kept / proposed; nothing where no request returned them."""
    counted = [r for r in records if r.drafted is not None]
    if not counted:
        return {}
    drafted, accepted = sum(r.drafted or 0 for r in counted), sum(r.accepted or 0 for r in counted)
    rate = round(accepted / drafted, 3) if drafted else 0.0
    return {"speculation": {"requests": len(counted), "drafted": drafted, "accepted": accepted, "acceptance_rate": rate}}
