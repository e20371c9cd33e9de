"""aiperf agreement: do aiperf and the perf suite's load generator report the same figures for the same load?

The embedded default's in-flight deployment (engines.lock `smollm2-135m:inflight`, the reference backend on the
CPU, served by the embedded tritonserver exactly as the fixtures serve it: deployments.DeploymentManager) gets the
same requests, one client after the other, at each closed-loop concurrency (1, 4, 8):

- aiperf (optional, `--aiperf PATH`): its template endpoint, HTTP `generate_stream` of the `ensemble` (text in,
  server-sent events out, one per token), `--streaming`;
- pytest_triton_llm.triton.load on that same path (HTTP generate_stream -> ensemble);
- pytest_triton_llm.triton.load as the perf suite runs it (suites/test_perf.py): the same prompts' token ids straight to
  `tensorrt_llm` on gRPC streams (perf/workload.encode: end_id -1 and min_length = max_tokens).

Every request has a fixed input length (prompts of whole-word tokens that tokenize back to exactly that many ids,
sent to all three clients) and a fixed output length (max_tokens = min_length, end_id -1: EOS is ignored). The
table puts throughput (output tokens/s, req/s), TTFT p50/p99 and ITL p50 side by side with the relative
difference to aiperf, and explains every difference above --tolerance (5%) by the definition that differs, with
the figure recomputed like for like from the per-request records of both tools, and Triton's own time per
request during each client's run. The server computes with --server-threads (OMP_NUM_THREADS; default: all cores
but one): the client keeps a core of its own, and an OpenMP pool that shares its cores with busy neighbours spins
against them (on 2 shared cores, 2 threads ran 8 tokens 10-30x slower at times).

    python3 -m venv .venv-aiperf && .venv-aiperf/bin/pip install aiperf==0.13.0
    .venv/bin/python benchmarks/aiperf_agreement.py --aiperf .venv-aiperf/bin/aiperf
    .venv/bin/python benchmarks/aiperf_agreement.py --smoke     # concurrency 1, 3 requests, the tiny engine; aiperf only if given

Results: benchmarks/results/aiperf_agreement.json (an earlier file is kept aside, as files.keep_previous does);
--smoke writes to a scratch file outside the repository unless --out is given. Exit 1 when a client saw errors,
lost requests, got other than the fixed output length from our load generator, or the server counted otherwise.

How each figure is defined (aiperf 0.13.0: the docs' metrics reference,
https://docs.nvidia.com/aiperf/v0.13.0/reference/ai-perf-metrics-reference.md, and its source, in the wheel as
aiperf/... and on GitHub as https://github.com/ai-dynamo/aiperf/tree/main/src/aiperf/...; ours:
pytest_triton_llm/triton/load.py and pytest_triton_llm/perf/metrics.py):

- Request start. aiperf: time.perf_counter_ns() right before aiohttp's session.request(), after its per-request
  ClientSession is set up (transports/aiohttp_client.py). Ours: perf_counter() when the RequestRecord is made,
  before the body is encoded and the request (HTTP) or the gRPC stream is opened (load.py, send()).
- Response time. aiperf: perf_counter_ns() when a chunk arrives, before it is parsed (transports/sse_utils.py).
  Ours: perf_counter() once the response is parsed (SSE JSON, or the gRPC message's tensors; RequestRecord.add).
- TTFT. aiperf: first response *with content* minus request start (metrics/types/ttft_metric.py; content_responses
  in common/models/record_models.py skip responses whose parsed text is empty). Ours: first response carrying
  tokens (sequence_length > 0 on gRPC; on HTTP any text_output, even an empty string) minus request start.
- ITL. aiperf: one value per request, (request latency - TTFT) / (output tokens - 1), i.e. the request's mean gap,
  and the percentiles are taken over requests (metrics/types/inter_token_latency_metric.py). Its per-gap figure is
  inter_chunk_latency, every gap of every request pooled (inter_chunk_latency_metric.py; percentiles from a
  t-digest, metrics/list_metric_aggregation.py). Ours, since 2026-12: the same per request, (last token response -
  first token response) / (tokens - 1) (perf/metrics.py summarize: itl_ms), and the pooled gaps as icl_ms (itl_ms
  before). Both are computed here both ways from the per-request records ("like for like").
- Output tokens. aiperf: client-side, each request's streamed texts joined and re-tokenized with --tokenizer
  (records/inference_result_parser.py _compute_client_side_token_counts / _compute_token_count; the server's usage
  only with --use-server-token-count, which Triton's generate endpoint does not send). Ours: the server's count,
  sequence_length per gRPC response; on HTTP one token per text_output response. The first token is included by
  both (aiperf's output_sequence_length counts every token of the request; ours sums every response).
- Duration. aiperf: earliest request start to latest final content response (metrics/types/
  benchmark_duration_metric.py, max_response_metric.py, min_request_metric.py). Ours: from when the measured load
  starts (after warm-up) to the latest request end, on gRPC after Triton's empty final response (load.py _run).
- Throughput. aiperf: output tokens / duration and completed requests / duration (output_token_throughput_metrics.py,
  request_throughput_metric.py). Ours: output tokens / duration and answered requests / duration (summarize).
- Percentiles: numpy's linear interpolation in ours; aiperf's record metrics the same way
  (metrics/metric_dicts.py metric_result_from_array), its pooled inter_chunk_latency from a t-digest (the exact
  p50 is recomputed here from its per-request export, profile_export.jsonl).
- The server's own view, the referee: Triton's statistics (/v2/models/ensemble/stats, success count and ns: a
  decoupled ensemble's request from arrival to its last response) during each client's run. On a CPU-bound
  server that shares its cores, they show whether the server itself ran slower while one client measured it.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import resource
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

import numpy as np
import _common as common
from _common import ROOT, BenchmarkFailed, check_aiperf, results_path, stat, write_results

sys.path.insert(0, str(ROOT))

from pytest_triton_llm.stack.cache import EngineCache  # noqa: E402
from pytest_triton_llm.stack.deployments import DeploymentManager  # noqa: E402
from pytest_triton_llm.stack.engines import check_lock  # noqa: E402
from pytest_triton_llm.triton.load import Target, run_load  # noqa: E402
from pytest_triton_llm.stack.lock import load_lock  # noqa: E402
from pytest_triton_llm.perf.metrics import summarize  # noqa: E402
from pytest_triton_llm.perf.workload import PerfRequest, encode  # noqa: E402
from pytest_triton_llm.common.progress import Progress  # noqa: E402
from pytest_triton_llm.triton.tensor_contract import NO_END, Sampling, returned_ids, returned_token_count  # noqa: E402
from pytest_triton_llm.common.tables import table  # noqa: E402

DEPLOYMENT = "smollm2-135m:inflight"
FULL = {"concurrency": [1, 4, 8], "input_tokens": 32, "output_tokens": 32, "warmup": 2}  # the perf suite's default
SMOKE = {"concurrency": [1], "requests": 3, "input_tokens": 16, "output_tokens": 8, "warmup": 1}
AIPERF, HTTP, GRPC = "aiperf", "loadgen-http", "loadgen-grpc"
LABELS = {
    AIPERF: "aiperf (HTTP generate_stream -> ensemble)",
    HTTP: "loadgen (same path)",
    GRPC: "loadgen as the perf suite (gRPC -> tensorrt_llm)",
}
METRICS = [  # key, label
    ("output_tokens_per_s", "output tokens/s"),
    ("throughput_rps", "req/s"),
    ("ttft_p50", "TTFT p50 ms"),
    ("ttft_p99", "TTFT p99 ms"),
    ("itl_p50", "ITL p50 ms"),
]
TEMPLATE = '{"text_input": {{ text|tojson }}, "max_tokens": %d, "min_length": %d, "end_id": %d, "stream": true}'


def requests_for(concurrency: int) -> int:
    """Measured requests per load point: enough closed-loop waves that the ramp at either end does not dominate."""
    return max(16, 4 * concurrency)


# -- the workload ---------------------------------------------------------------------------------------------------


def fixed_prompts(served, count: int, length: int, seed: int = 0) -> list[tuple[str, list[int]]]:
    """`count` (text, token ids) of exactly `length` tokens as the server tokenizes the text: whole-word tokens
    (" word"), which a byte-level BPE tokenizes back to themselves, so text and ids are the same prompt."""
    tokenizer = served.tokenizer
    pieces = tokenizer.convert_ids_to_tokens(list(range(100, tokenizer.vocab_size)))
    words = [
        i
        for i, p in enumerate(pieces, 100)
        if p.startswith("\u0120") and p[1:].isascii() and p[1:].isalpha() and p[1:].islower() and len(p) >= 4
    ]
    special = len(served.encode(" hello")) - len(tokenizer.encode(" hello", add_special_tokens=False))
    rng = np.random.default_rng(seed)
    prompts = []
    for _ in range(count):
        for _attempt in range(100):
            text = tokenizer.decode(rng.choice(words, length - special).tolist())
            ids = served.encode(text)
            if len(ids) == length:
                prompts.append((text, ids))
                break
        else:
            raise BenchmarkFailed(f"no prompt of exactly {length} tokens after 100 draws")
    return prompts


# -- the clients ----------------------------------------------------------------------------------------------------


def loadgen(served, path: str, prompts, warmup, concurrency: int, output_tokens: int) -> dict:
    """pytest_triton_llm.triton.load on `path` (GRPC: as suites/test_perf.py sends; HTTP: as aiperf sends)."""
    client = served.client
    if path == GRPC:
        target = Target(served.server.endpoints)  # tensorrt_llm, gRPC streams

        def inputs(batch):
            return encode([PerfRequest(ids, output_tokens) for _, ids in batch], client, True, True)
    else:
        target = Target(served.server.endpoints, "ensemble", "generate_stream")

        def inputs(batch):
            fixed = {"end_id": NO_END, "sampling": Sampling(min_length=output_tokens), "stream": True}
            return [client.ensemble_inputs(text, output_tokens, **fixed) for text, _ in batch]

    work, warm = inputs(prompts), inputs(warmup)
    cpu, wall = cpu_seconds(resource.RUSAGE_SELF), time.perf_counter()
    records, seconds = run_load(target, work, warm, concurrency=concurrency, keep_outputs=True)
    cpu, wall = cpu_seconds(resource.RUSAGE_SELF) - cpu, time.perf_counter() - wall
    result = summarize(records, seconds)
    ok = [r for r in records if r.error is None and r.token_times]
    gaps = [b - a for r in ok for a, b in zip(r.token_times, r.token_times[1:], strict=False)]
    per_request = [(r.token_times[-1] - r.token_times[0]) / (r.tokens - 1) for r in ok if r.tokens > 1]
    texts = [streamed_texts(r, served) for r in ok]
    content = [first_content(r, t) for r, t in zip(ok, texts, strict=True)]
    ttft_content = [t - r.sent for r, t in zip(ok, content, strict=True) if t is not None]
    # aiperf's definitions on our records: its duration (first start to last content response) and its token count
    # (the streamed text re-tokenized, as its Tokenizer.encode does: no special tokens)
    span = max((r.token_times[-1] for r in ok), default=0.0) - min((r.sent for r in ok), default=0.0)
    retokenized = sum(len(served.tokenizer.encode("".join(t), add_special_tokens=False)) for t in texts)
    return {
        "requests": result["requests"],
        "errors": result["errors"],
        "error_samples": result["error_samples"],
        "output_tokens": result["output_tokens"],
        "duration_s": round(seconds, 3),
        "output_tokens_per_s": result["output_tokens_per_s"],
        "throughput_rps": result["throughput_rps"],
        "ttft_p50": (result["ttft_ms"] or {}).get("p50"),
        "ttft_p99": (result["ttft_ms"] or {}).get("p99"),
        "itl_p50": (result["itl_ms"] or {}).get("p50"),  # ours: per request, as aiperf's
        "latency_mean_ms": (result["latency_ms"] or {}).get("mean"),
        # like for like with aiperf
        "output_tokens_retokenized": retokenized,
        "duration_aiperf_s": round(span, 3),
        "output_tokens_per_s_like": round(retokenized / span, 2) if span > 0 else None,
        "throughput_rps_like": round(len(ok) / span, 3) if span > 0 else None,
        "ttft_p50_like": percentile_ms(ttft_content, 50),
        "ttft_p99_like": percentile_ms(ttft_content, 99),
        "empty_first_responses": sum(1 for r, t in zip(ok, content, strict=True) if t != r.token_times[0]),
        "itl_pooled_p50": percentile_ms(gaps, 50),
        "itl_per_request_p50": percentile_ms(per_request, 50),
        "fixed_length_met": len(ok) == len(records) and all(r.tokens == output_tokens for r in ok),
        "client_cpu_s": round(cpu, 2),  # this process while it sent the load (warm-up included)
        "client_cpu_pct": round(100.0 * cpu / wall, 1) if wall else None,  # of one core
    }


def cpu_seconds(who: int) -> float:
    usage = resource.getrusage(who)
    return usage.ru_utime + usage.ru_stime


def streamed_texts(record, served) -> list[str]:
    """The text of each token-carrying response (aligned with token_times): the ensemble's text_output, or for
    tensorrt_llm's ids their detokenized text (its postprocessing would send the same)."""
    texts = []
    for outputs in record.responses:
        if "text_output" in outputs:
            value = np.asarray(outputs["text_output"]).reshape(-1)
            value = value[0] if value.size else ""
            texts.append(value.decode("utf-8", errors="replace") if isinstance(value, bytes) else str(value))
        elif returned_token_count(outputs):
            texts.append(served.client.decode(returned_ids(outputs)))
    return texts


def first_content(record, texts: list[str]) -> float | None:
    """When the first response with non-empty text arrived (where aiperf stops its TTFT clock)."""
    return next((arrived for arrived, text in zip(record.token_times, texts, strict=False) if text), None)


def aiperf_client(executable: str, served, prompts, warmup: int, concurrency: int, output_tokens: int) -> dict:
    """aiperf's template endpoint on HTTP generate_stream of the ensemble, streaming, the same prompts (a
    single_turn input file), max_tokens = min_length and end_id -1 in the request body as for our load generator."""
    with tempfile.TemporaryDirectory(prefix="aiperf-input-") as work:
        template, dataset = Path(work) / "payload.json.j2", Path(work) / "prompts.jsonl"
        template.write_text(TEMPLATE % (output_tokens, output_tokens, NO_END))  # a file: aiperf splits inline values on commas
        dataset.write_text("".join(json.dumps({"text": text}) + "\n" for text, _ in prompts))
        cpu, wall = cpu_seconds(resource.RUSAGE_CHILDREN), time.perf_counter()  # aiperf's processes, once reaped
        summary, records = common.run_aiperf(
            executable,
            [
                "--model",
                "ensemble",
                "--url",
                f"http://{served.server.endpoints.http}",
                "--endpoint-type",
                "template",
                "--custom-endpoint",
                "/v2/models/ensemble/generate_stream",
                "--streaming",
                "--extra-inputs",
                f"payload_template:{template}",
                "--extra-inputs",
                "response_field:text_output",
                "--tokenizer",
                str(served.engine.tokenizer_path),
                "--input-file",
                str(dataset),
                "--custom-dataset-type",
                "single_turn",
                "--concurrency",
                str(concurrency),
                "--request-count",
                str(len(prompts)),
                "--warmup-request-count",
                str(warmup),
                "--random-seed",
                "0",
                "--no-server-metrics",
                "--no-gpu-telemetry",
            ],
        )
        cpu, wall = cpu_seconds(resource.RUSAGE_CHILDREN) - cpu, time.perf_counter() - wall

    def values(metric):
        return [r["metrics"][metric]["value"] for r in records if metric in r.get("metrics", {})]

    gaps = [gap for chunk in values("inter_chunk_latency") for gap in chunk]
    return {
        "version": summary.get("aiperf_version"),
        "requests": int(stat(summary, "request_count") or 0),
        "errors": int(stat(summary, "error_request_count") or 0),
        "output_tokens": int(stat(summary, "total_osl") or 0),
        "duration_s": stat(summary, "benchmark_duration"),
        "output_tokens_per_s": stat(summary, "output_token_throughput"),
        "throughput_rps": stat(summary, "request_throughput"),
        "ttft_p50": stat(summary, "time_to_first_token", "p50"),
        "ttft_p99": stat(summary, "time_to_first_token", "p99"),
        "latency_mean_ms": stat(summary, "request_latency"),
        "itl_p50": stat(summary, "inter_token_latency", "p50"),  # aiperf: per-request mean gaps
        "itl_per_request_p50": round(float(np.percentile(values("inter_token_latency"), 50)), 2) if records else None,
        "itl_pooled_p50": round(float(np.percentile(gaps, 50)), 2) if gaps else stat(summary, "inter_chunk_latency", "p50"),
        "output_tokens_per_request": sorted({int(v) for v in values("output_sequence_length")}),
        "client_cpu_s": round(cpu, 2),  # all of aiperf's processes, its start-up included
        "client_cpu_pct": round(100.0 * cpu / wall, 1) if wall else None,  # of one core
    }


def percentile_ms(values_s: list[float], q: float) -> float | None:
    return round(float(np.percentile(np.asarray(values_s) * 1000.0, q)), 2) if values_s else None


# -- comparing ------------------------------------------------------------------------------------------------------


def relative(ours: float | None, theirs: float | None) -> float | None:
    if ours is None or not theirs:
        return None
    return (ours - theirs) / theirs * 100.0


def pct(value: float | None) -> str:
    return "-" if value is None else f"{value:+.1f}%"


def num(value: float | None) -> str:
    return "-" if value is None else f"{value:.2f}"


DEFINITIONS = {  # what differs, printed once above the explanations that use it (sources: the module docstring)
    "path": "path: the perf suite's load generator sends token ids straight to tensorrt_llm over gRPC, without the "
    "ensemble's preprocessing (tokenization) and postprocessing (detokenization) models and without HTTP/SSE; the "
    "definitions alone are compared in the loadgen (same path) column",
    "itl": "ITL: one value per request on both sides, (request latency - TTFT) / (output tokens - 1), p50 over "
    "requests; aiperf counts the tokens by re-tokenizing the streamed text, ours takes the server's count; the pooled "
    "gaps (aiperf's inter_chunk_latency, our icl_ms) are compared beside it",
    "ttft": "TTFT: aiperf starts its clock right before aiohttp sends (its per-request session already set up) and "
    "stops it when the first chunk with non-empty text arrives, before parsing it; ours starts when the request "
    "record is made (before encoding the body or opening the gRPC stream) and stops after parsing the first "
    "response that carries a token, even one with empty text",
    "throughput": "throughput: aiperf counts output tokens by re-tokenizing each request's streamed text with the "
    "tokenizer, ours takes the server's count (sequence_length on gRPC, one per streamed response on HTTP), both "
    "with the first token; aiperf's duration runs from the first request's start to the last content response, "
    "ours from the start of the measured load to the last request's end (on gRPC after Triton's empty final response)",
}


def explain(metric: str, column: str, aiperf: dict, ours: dict, tolerance: float) -> tuple[list[str], list[str]]:
    """Why `ours` (client `column`) differs from aiperf on `metric`: (the DEFINITIONS that differ, the figure
    recomputed like for like from the records and whether that accounts for the difference)."""
    used = ["path"] if column == GRPC else []
    if metric == "itl_p50":
        used.append("itl")
        like = relative(ours["itl_per_request_p50"], aiperf["itl_p50"])
        pooled = relative(ours["itl_pooled_p50"], aiperf["itl_pooled_p50"])
        lines = [
            f"like for like: per request, ours {num(ours['itl_per_request_p50'])} vs aiperf {num(aiperf['itl_p50'])} "
            f"ms ({pct(like)}); pooled gaps, ours {num(ours['itl_pooled_p50'])} vs aiperf's inter_chunk_latency "
            f"{num(aiperf['itl_pooled_p50'])} ms ({pct(pooled)})"
        ]
        like = max((abs(v) for v in (like, pooled) if v is not None), default=None)
    elif metric.startswith("ttft"):
        used.append("ttft")
        mine, like = ours[f"{metric}_like"], relative(ours[f"{metric}_like"], aiperf[metric])
        lines = [
            f"like for like (ours to the first non-empty text; {ours['empty_first_responses']} request(s) began "
            f"with an empty one): {num(mine)} vs aiperf {num(aiperf[metric])} ms ({pct(like)})"
        ]
        like = None if like is None else abs(like)
    else:
        used.append("throughput")
        like = relative(ours[f"{metric}_like"], aiperf[metric])
        lines = [
            f"aiperf: {aiperf['requests']} requests, {aiperf['output_tokens']} tokens in {num(aiperf['duration_s'])} s; "
            f"ours: {ours['requests']} requests, {ours['output_tokens']} tokens ({ours['output_tokens_retokenized']} "
            f"re-tokenized) in {num(ours['duration_s'])} s ({num(ours['duration_aiperf_s'])} s as aiperf times it)",
            f"like for like (aiperf's token count and duration on our records): {num(ours[f'{metric}_like'])} vs "
            f"aiperf {num(aiperf[metric])} ({pct(like)})",
        ]
        like = None if like is None else abs(like)
    return used, verdict(metric, lines, like, column, aiperf, ours, tolerance)


def verdict(
    metric: str, lines: list[str], like: float | None, column: str, aiperf: dict, ours: dict, tolerance: float
) -> list[str]:
    if like is None:
        return lines
    if like <= tolerance:
        return [*lines, "-> the definitions account for it"]
    if column == GRPC:
        return [*lines, "-> not the definitions: the path differs (above), and so may the server's speed between runs"]
    server = relative(ours["server_ensemble_ms"], aiperf["server_ensemble_ms"])
    lines.append(
        f"the server's own time per ensemble request (Triton's statistics, arrival to last response, warm-up "
        "included): "
        f"{num(ours['server_ensemble_ms'])} ms during our run, {num(aiperf['server_ensemble_ms'])} ms during "
        f"aiperf's ({pct(server)}); each client's mean request latency beyond it: ours "
        f"{num(overhead(ours))}, aiperf {num(overhead(aiperf))} ms"
    )
    lines.append(
        f"client CPU: ours {num(ours['client_cpu_pct'])}% of a core while sending, aiperf's processes "
        f"{num(aiperf['client_cpu_pct'])}% over its run (start-up included)"
    )
    if server is not None and abs(server) > tolerance:
        # what is left once the server's own speed is divided out (a rate goes as the inverse of a time)
        speed = (ours["server_ensemble_ms"] / aiperf["server_ensemble_ms"]) ** (1 if metric.startswith(("ttft", "itl")) else -1)
        mine = {"itl_p50": ours["itl_per_request_p50"]}.get(metric, ours.get(f"{metric}_like"))
        left = relative(mine / speed, aiperf[metric]) if mine is not None else None
        lines.append(
            f"-> not the definitions: the server itself ran {abs(server):.1f}% {'slower' if server > 0 else 'faster'} "
            f"per request during our run than during aiperf's (its own statistics; a CPU-bound server shares "
            f"the machine's cores with its other load and with the client's processes); with that divided "
            f"out the clients differ by {pct(left)}"
        )
    else:
        lines.append(
            f"-> neither the definitions nor the server's speed account for it: the clients' timing differs, "
            f"or it is sampling noise ({ours['requests']} requests each)"
        )
    return lines


def overhead(figures: dict) -> float | None:
    """A client's mean request latency beyond the server's own time per request (its transport and timing)."""
    if figures.get("latency_mean_ms") is None or figures.get("server_ensemble_ms") is None:
        return None
    return figures["latency_mean_ms"] - figures["server_ensemble_ms"]


def check(name: str, result: dict, sent: int, served_delta: int | None, requests: int, ours: bool) -> list[str]:
    problems = []
    if result["errors"]:
        problems.append(f"{name}: {result['errors']} errors {result.get('error_samples') or ''}".rstrip())
    if result["requests"] != requests:
        problems.append(f"{name}: {result['requests']} of {requests} requests answered")
    if ours and not result["fixed_length_met"]:
        problems.append(f"{name}: not every request yielded its fixed output length")
    if ours and (result["ttft_p50"] is None or result["itl_p50"] is None):
        problems.append(f"{name}: no TTFT or ITL from a streaming deployment")
    if served_delta is not None and served_delta != sent:
        problems.append(f"{name}: tensorrt_llm counted {served_delta} requests, {sent} were sent")
    return problems


def server_stats(served) -> dict:
    """Triton's own statistics: tensorrt_llm's successful requests (every path reaches it), and the ensemble's
    requests with their total time from arrival to the last response (a decoupled ensemble's success duration)."""
    stats = {}
    for model in ("tensorrt_llm", "ensemble"):
        url = f"http://{served.server.endpoints.http}/v2/models/{model}/stats"
        with urllib.request.urlopen(url, timeout=10) as resp:  # noqa: S310
            success = json.loads(resp.read())["model_stats"][0]["inference_stats"]["success"]
        stats[model] = (int(success["count"]), int(success["ns"]))
    return stats


def server_side(served, before: dict, sent: int) -> dict:
    """What the server saw since `before`: requests tensorrt_llm counted (a decoupled model counts a request once
    it has sent the last response, which may be a moment after the client has it), and the ensemble's mean time
    per request (None when the path does not use the ensemble)."""
    deadline = time.monotonic() + 5.0
    while True:
        after = server_stats(served)
        counted = after["tensorrt_llm"][0] - before["tensorrt_llm"][0]
        if counted >= sent or time.monotonic() > deadline:
            break
        time.sleep(0.1)
    count, ns = (after["ensemble"][i] - before["ensemble"][i] for i in (0, 1))
    return {"server_counted": counted, "server_ensemble_ms": round(ns / count / 1e6, 2) if count else None}


# -- main -----------------------------------------------------------------------------------------------------------


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--aiperf",
        metavar="PATH",
        help="the aiperf executable (installed in its own environment); without it only this project's load generator runs",
    )
    parser.add_argument("--concurrency", type=int, nargs="+", help="closed-loop load points (default 1 4 8)")
    parser.add_argument(
        "--requests", type=int, help="measured requests per client and load point (default max(16, 4 x concurrency))"
    )
    parser.add_argument("--input-tokens", type=int, help="fixed input length (default 32)")
    parser.add_argument("--output-tokens", type=int, help="fixed output length (default 32)")
    parser.add_argument("--tolerance", type=float, default=5.0, help="relative difference (%%) that is explained")
    parser.add_argument(
        "--smoke",
        action="store_true",
        help=f"a short form: concurrency {SMOKE['concurrency']}, "
        f"{SMOKE['requests']} requests of {SMOKE['input_tokens']} in / {SMOKE['output_tokens']} out "
        "tokens; results to a scratch file unless --out",
    )
    parser.add_argument(
        "--server-threads",
        type=int,
        default=max(1, len(os.sched_getaffinity(0)) - 1),
        help="the server's OMP_NUM_THREADS (default: all cores but one, which is left to the client; "
        "an OpenMP pool that shares its cores with a busy client spins against it)",
    )
    parser.add_argument("--engines-lock", type=Path, help="default: engines.lock; --smoke: fixtures/engines.tiny.lock")
    parser.add_argument("--deployment", help=f"default: {DEPLOYMENT}; --smoke: {common.TINY_DEPLOYMENT}")
    parser.add_argument("--engines-cache", default="~/.cache/pytest-triton-llm")
    parser.add_argument("--out", type=Path, help="results file (default benchmarks/results/aiperf_agreement.json)")
    args = parser.parse_args(argv)
    check_aiperf(parser, args.aiperf)
    shape = SMOKE if args.smoke else FULL
    args.engines_lock, args.deployment = common.served_by(args.engines_lock, args.deployment, args.smoke, DEPLOYMENT)
    concurrencies = args.concurrency or shape["concurrency"]
    input_tokens = args.input_tokens or shape["input_tokens"]
    output_tokens = args.output_tokens or shape["output_tokens"]
    warmup_n = shape["warmup"]
    out = results_path("aiperf_agreement", args.smoke, args.out)

    os.environ["OMP_NUM_THREADS"] = str(args.server_threads)  # the server's environment (runtimes.server.omp_threads)
    progress = Progress()
    aiperf_name = f"aiperf {common.aiperf_version(args.aiperf)}" if args.aiperf else None
    lock = check_lock(load_lock(args.engines_lock))
    [ref] = lock.select([args.deployment])
    cache = EngineCache(args.engines_cache, progress)
    runtime = common.local_runtime(cache.root, progress)
    results, problems, rows, notes, differing = [], [], [], [], set()
    with tempfile.TemporaryDirectory(prefix="aiperf-agreement-") as work:
        manager = DeploymentManager(cache, runtime, Path(work), progress, False, 300.0)
        try:
            served = manager.serve(ref)
            with progress.step("warming the server up on both paths (not measured)"):
                for key in (GRPC, HTTP):
                    loadgen(served, key, fixed_prompts(served, 2, input_tokens, seed=99), [], 2, output_tokens)
            for concurrency in concurrencies:
                requests = args.requests or (shape["requests"] if args.smoke else requests_for(concurrency))
                prompts = fixed_prompts(served, requests + warmup_n, input_tokens, seed=concurrency)
                measured, warmup = prompts[warmup_n:], prompts[:warmup_n]
                point = {"concurrency": concurrency, "requests": requests, "warmup": warmup_n}
                for key in (GRPC, HTTP, AIPERF) if args.aiperf else (GRPC, HTTP):
                    progress.say(
                        f"{LABELS[key]}, concurrency {concurrency}: {requests} requests of {input_tokens} in / "
                        f"{output_tokens} out tokens ..."
                    )
                    started, before = time.monotonic(), server_stats(served)
                    if key == AIPERF:
                        result = aiperf_client(args.aiperf, served, measured, warmup_n, concurrency, output_tokens)
                    else:
                        result = loadgen(served, key, measured, warmup, concurrency, output_tokens)
                    point[key] = dict(result, wall_s=round(time.monotonic() - started, 1))
                    point[key].update(server_side(served, before, requests + warmup_n))
                    problems += check(
                        f"{LABELS[key]}, concurrency {concurrency}",
                        point[key],
                        requests + warmup_n,
                        point[key]["server_counted"],
                        requests,
                        key != AIPERF,
                    )
                results.append(point)
                theirs = point.get(AIPERF)
                for metric, label in METRICS:
                    diffs = {k: relative(point[k][metric], theirs[metric]) if theirs else None for k in (HTTP, GRPC)}
                    rows.append(
                        [
                            concurrency,
                            label,
                            num(theirs[metric]) if theirs else "not run",
                            num(point[HTTP][metric]),
                            pct(diffs[HTTP]),
                            num(point[GRPC][metric]),
                            pct(diffs[GRPC]),
                        ]
                    )
                    for k, diff in diffs.items():
                        if diff is not None and abs(diff) > args.tolerance:
                            used, lines = explain(metric, k, theirs, point[k], args.tolerance)
                            notes.append((f"concurrency {concurrency}, {label}: {LABELS[k]} {pct(diff)} vs aiperf", lines))
                            differing.update(used)
        finally:
            manager.close()

    version = manager.records.get(ref.id, {}).get("server_version")
    print(
        f"\n{args.deployment} on Triton {version} ({runtime.name} runtime, {args.server_threads} compute thread(s)); fixed "
        f"{input_tokens} input / {output_tokens} output tokens; differences relative to aiperf"
    )
    headers = ["concurrency", "metric", aiperf_name or "aiperf", LABELS[HTTP], "diff", LABELS[GRPC], "diff"]
    print("\n".join(table(headers, rows)))
    if aiperf_name is None:
        print("aiperf: not run (no --aiperf PATH); only this project's load generator, on both paths")
    elif notes:
        print(f"\ndifferences above {args.tolerance:g}%; where the definitions differ:")
        print("\n".join(f"  {DEFINITIONS[k]}" for k in DEFINITIONS if k in differing))
        for title, lines in notes:
            print(f"- {title}")
            print("\n".join(f"    {line}" for line in lines))
    else:
        print(f"\nevery figure agrees within {args.tolerance:g}%")
    write_results(
        out,
        {
            "smoke": args.smoke,
            "deployment": args.deployment,
            "aiperf": aiperf_name or "not run",
            "machine": {"cpus": os.cpu_count(), "platform": platform.platform()},
            "server": version,
            "runtime": runtime.describe(),
            "server_threads": args.server_threads,
            "input_tokens": input_tokens,
            "output_tokens": output_tokens,
            "tolerance_pct": args.tolerance,
            "results": results,
            "explanations": [{"title": t, "lines": lines} for t, lines in notes],
            "problems": problems,
        },
        args.smoke,
        print,
    )
    if problems:
        raise BenchmarkFailed("; ".join(problems))
    return 0


if __name__ == "__main__":
    try:
        sys.exit(main())
    except BenchmarkFailed as exc:
        print(f"aiperf_agreement: FAILED: {exc}", file=sys.stderr)
        sys.exit(1)
