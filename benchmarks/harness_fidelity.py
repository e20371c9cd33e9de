"""Harness fidelity: is our load generator, not the server, the limit of what the perf suite measures?

One tritonserver (the embedded runtime, started through the runtime registry as a pytest session starts it)
serves `echo`, a model that does no work, on loopback. The same closed-loop workload is sent by aiperf (an
independent tool, HTTP generate through its template endpoint; optional) and by pytest_triton_llm.triton.load, the perf
suite's load engine (HTTP generate, and gRPC streams), one client after the other, at each concurrency. The
highest request rate each client reaches is its ceiling; ours must not be below the independent tool's. Triton's
own request count checks what each client claims.

    python3 -m venv .venv-aiperf && .venv-aiperf/bin/pip install aiperf==0.13.0
    .venv/bin/python benchmarks/harness_fidelity.py --aiperf .venv-aiperf/bin/aiperf
    .venv/bin/python benchmarks/harness_fidelity.py --smoke          # seconds; aiperf only with --aiperf

The streamed-responses ceiling: benchmarks/_stream_server.py (P processes on one port, doing no work) streams
--stream-tokens responses per request to --streams concurrent requests, sent by the load engine with each
--workers count of load processes (each with --channels connections); the responses/s reached, what Triton-like
counts the server kept, and the CPU each side used (cores busy: which side was the limit). Then one paced run at
--paced-rate responses/s with the most workers: the client's own delay per response (its receive time minus the
server's send stamp, one CLOCK_MONOTONIC) and what it adds to ITL p99 (client gaps vs the server's gaps).

    .venv/bin/python benchmarks/harness_fidelity.py --stream-only --workers 1 2 4 8   # no tritonserver needed

Writes a table to stdout and the figures to benchmarks/results/harness_fidelity.json (an earlier file there is
kept aside); --smoke writes to a scratch file outside the repository unless --out is given. Exit 1 when a client
lost requests, saw errors, or the server counted other than what was sent.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

import numpy as np
from _common import ROOT, BenchmarkFailed, aiperf_version, check_aiperf, local_runtime, results_path, run_aiperf, write_results

sys.path.insert(0, str(ROOT))

from pytest_triton_llm.stack.cache import EngineCache  # noqa: E402
from _stream_server import StreamServer  # noqa: E402
from pytest_triton_llm.host.endpoints import Endpoints  # noqa: E402
from pytest_triton_llm.stack.engines import backend_of  # noqa: E402
from pytest_triton_llm.triton.load import Target, run_load  # noqa: E402
from pytest_triton_llm.stack.lock import load_lock  # noqa: E402
from pytest_triton_llm.perf.metrics import summarize  # noqa: E402
from pytest_triton_llm.common.progress import Progress  # noqa: E402
from pytest_triton_llm.stack.runtimes import Launch  # noqa: E402
from pytest_triton_llm.triton.tensor_contract import ensemble_inputs  # noqa: E402
from pytest_triton_llm.common.tables import table  # noqa: E402

PROMPT = "The quick brown fox jumps over the lazy dog. " * 4
TEMPLATE = '{"text_input": {{ text|tojson }}, "max_tokens": {{ max_tokens or 8 }}}'
REPOSITORY = ROOT / "benchmarks" / "echo_repository"
SMOKE = {"concurrency": [1, 8], "requests": 50, "workers": [1, 2], "streams": 8, "stream_tokens": 100}


def served_requests(server) -> int:
    """Triton's own count of successful echo requests: checks what each client claims."""
    with urllib.request.urlopen(f"http://{server.endpoints.http}/v2/models/echo/stats", timeout=10) as resp:  # noqa: S310
        return int(json.loads(resp.read())["model_stats"][0]["inference_stats"]["success"]["count"])


def settled_count(server, before: int, expected: int, wait_s: float = 5.0) -> int:
    """Requests the server counted since `before`, read again until `expected` or `wait_s`: Triton counts a decoupled
    request when it releases it, which can come just after the client read its final response (CI, 2026-12-05: 98
    of 100 counted at the first read after a gRPC stream run at concurrency 8). A request really lost stays uncounted."""
    deadline = time.monotonic() + wait_s
    while (counted := served_requests(server) - before) < expected and time.monotonic() < deadline:
        time.sleep(0.1)
    return counted


def warmup_count(requests: int) -> int:
    return min(50, requests)


def ours(server, protocol: str, concurrency: int, requests: int) -> dict:
    """The load engine against echo's text contract (text_input, max_tokens); each answer counts as one token."""
    target = Target(server.endpoints, "echo", protocol)
    work = [ensemble_inputs(PROMPT, 8) for _ in range(requests)]
    records, seconds = run_load(target, work, work[: warmup_count(requests)], concurrency=concurrency)
    result = summarize(records, seconds)
    return {
        "requests": result["requests"],
        "errors": result["errors"],
        "rps": result["throughput_rps"],
        "error_samples": result["error_samples"],
    }


def aiperf(executable: str, server, tokenizer: Path, concurrency: int, requests: int) -> dict:
    with tempfile.TemporaryDirectory() as work:
        template = Path(work) / "payload.json.j2"  # a file: aiperf splits inline --extra-inputs values on commas
        template.write_text(TEMPLATE)
        summary, _ = run_aiperf(
            executable,
            [
                "--model",
                "echo",
                "--url",
                f"http://{server.endpoints.http}",
                "--endpoint-type",
                "template",
                "--custom-endpoint",
                "/v2/models/echo/generate",
                "--extra-inputs",
                f"payload_template:{template}",
                "--extra-inputs",
                "response_field:text_output",
                "--tokenizer",
                str(tokenizer),
                "--concurrency",
                str(concurrency),
                "--request-count",
                str(requests),
                "--warmup-request-count",
                str(warmup_count(requests)),
                "--synthetic-input-tokens-mean",
                "40",
                "--output-tokens-mean",
                "8",
            ],
        )
    return {
        "requests": int(summary["request_count"]["avg"]),
        "errors": int((summary.get("error_request_count") or {}).get("avg", 0)),
        "rps": round(float(summary["request_throughput"]["avg"]), 3),
    }


def _cpu_seconds(pids: list[int]) -> list[float]:
    """CPU seconds (user + system) each process has used so far (Linux /proc; [] elsewhere)."""
    ticks = os.sysconf("SC_CLK_TCK")
    seconds = []
    for pid in pids:
        try:
            fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            return []
        seconds.append((int(fields[11]) + int(fields[12])) / ticks)  # utime, stime
    return seconds


def stream_point(server, workers: int, channels: int, streams: int, tokens: int, interval_us: int = 0) -> dict:
    """One closed-loop load point against the stream server: `streams` requests in flight, 4 per stream in all."""
    target = Target(Endpoints(http="-", grpc=server.address, metrics="-"), channels=channels)
    request = {"request_output_len": (tokens, "INT32"), "interval_us": (interval_us, "INT32"), "streaming": (True, "BOOL")}
    work = [request] * (streams * 4)
    counted_before, server_cpu_before = server.counted(), _cpu_seconds(server.pids)
    records, seconds = run_load(target, work, work[:streams], concurrency=streams, workers=workers)
    client_cpu, loop_cpu = records.client_cpu_s, records.loop_cpu_s
    server_cpu = [b - a for a, b in zip(server_cpu_before, _cpu_seconds(server.pids), strict=True)]
    counted = tuple(b - a for a, b in zip(counted_before, server.counted(), strict=True))
    responses = sum(r.tokens for r in records)
    delays = [t - s for r in records for t, s in zip(r.token_times, r.server_sent, strict=False)]
    client_gaps = [b - a for r in records for a, b in zip(r.token_times, r.token_times[1:], strict=False)]
    server_gaps = [b - a for r in records for a, b in zip(r.server_sent, r.server_sent[1:], strict=False)]

    def ms(values: list[float], q: float) -> float | None:
        return round(float(np.percentile(np.asarray(values) * 1000, q)), 3) if values else None

    return {
        "workers": workers,
        "channels": channels,
        "streams": streams,
        "tokens_per_request": tokens,
        "interval_us": interval_us,
        "requests": len([r for r in records if r.error is None]),
        "errors": sum(1 for r in records if r.error),
        "error_samples": sorted({r.error for r in records if r.error})[:3],
        "responses": responses,
        "seconds": round(seconds, 3),
        "responses_per_s": round(responses / seconds) if seconds else 0,
        # the server's own counts: measured + warm-up requests, and their responses
        "server_counted": {"requests": counted[0], "responses": counted[1]},
        "sent": {"requests": len(work) + streams, "responses": (len(work) + streams) * tokens},
        "client_cores_busy": round(client_cpu / seconds, 2) if seconds else None,
        # each load process's event loop: near 1.0 it is the limit (gRPC's own threads run beside it)
        "client_loop_busy": round(loop_cpu / seconds / records.workers, 2) if seconds else None,
        "server_cores_busy": round(sum(server_cpu) / seconds, 2) if seconds and server_cpu else None,
        "server_busiest_process": round(max(server_cpu) / seconds, 2) if seconds and server_cpu else None,
        "client_delay_ms": {"p50": ms(delays, 50), "p99": ms(delays, 99), "max": ms(delays, 100)},
        "itl_p99_ms": {"client": ms(client_gaps, 99), "server": ms(server_gaps, 99)},
    }


def stream_problems(result: dict) -> list[str]:
    name = f"stream ceiling, {result['workers']} workers"
    problems = [f"{name}: {result['errors']} errors {result['error_samples']}"] if result["errors"] else []
    if result["server_counted"] != result["sent"]:
        problems.append(f"{name}: the server counted {result['server_counted']}, the client sent {result['sent']}")
    if result["responses"] != result["requests"] * result["tokens_per_request"]:
        problems.append(f"{name}: {result['responses']} responses received for {result['requests']} requests")
    return problems


def stream_ceiling(args, progress) -> tuple[list[dict], dict | None, list[str]]:
    """The ceiling per worker count, then the client's delay at --paced-rate with the most workers."""
    rows, problems = [], []
    processes = args.server_processes or max(1, (os.cpu_count() or 2) - max(args.workers))
    with StreamServer(processes) as server:
        for workers in args.workers:
            progress.say(
                f"stream ceiling: {workers} load process(es), {args.streams} streams x {args.stream_tokens} responses ..."
            )
            result = stream_point(server, workers, args.channels, args.streams, args.stream_tokens)
            result["server_processes"] = processes
            problems += stream_problems(result)
            rows.append(result)
        paced = None
        if args.paced_rate:
            interval_us = round(args.streams * 1e6 / args.paced_rate)  # each stream sends every interval
            progress.say(
                f"paced: {args.paced_rate} responses/s ({args.streams} streams, one response every {interval_us} us) ..."
            )
            paced = stream_point(server, max(args.workers), args.channels, args.streams, args.stream_tokens, interval_us)
            paced["server_processes"] = processes
            paced["target_responses_per_s"] = args.paced_rate
            problems += stream_problems(paced)
    return rows, paced, problems


def print_stream(rows: list[dict], paced: dict | None) -> None:
    print(
        "\n".join(
            table(
                [
                    "workers",
                    "channels",
                    "responses/s",
                    "client cores busy",
                    "each loop busy",
                    "server cores busy",
                    "busiest server process",
                    "errors",
                ],
                [
                    [
                        r["workers"],
                        r["channels"],
                        r["responses_per_s"],
                        r["client_cores_busy"],
                        r["client_loop_busy"],
                        r["server_cores_busy"],
                        r["server_busiest_process"],
                        r["errors"],
                    ]
                    for r in rows
                ],
            )
        )
    )
    if paced:
        print(
            f"paced at {paced['target_responses_per_s']}/s with {paced['workers']} workers: "
            f"reached {paced['responses_per_s']}/s; "
            f"client delay p50 {paced['client_delay_ms']['p50']} ms, p99 {paced['client_delay_ms']['p99']} ms; "
            f"ITL p99 {paced['itl_p99_ms']['client']} ms at the client vs {paced['itl_p99_ms']['server']} ms at the server"
        )


def check(result: dict, requests: int) -> list[str]:
    """What is wrong with one client's load point: errors, requests it lost, or a server count that disagrees."""
    name = f"{result['client']} ({result['protocol']}), concurrency {result['concurrency']}"
    problems = []
    if result["errors"]:
        problems.append(f"{name}: {result['errors']} errors {result.get('error_samples') or ''}".rstrip())
    if result["requests"] != requests:
        problems.append(f"{name}: {result['requests']} of {requests} requests answered")
    if result["server_counted"] != requests + warmup_count(requests):
        problems.append(
            f"{name}: the server counted {result['server_counted']} requests, "
            f"{requests} measured + {warmup_count(requests)} warm-up were sent"
        )
    return problems


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--aiperf",
        metavar="PATH",
        help="the aiperf executable (installed in its own environment); without it only this project's load generator runs",
    )
    parser.add_argument("--concurrency", type=int, nargs="+", help="closed-loop load points (default 8 32 64)")
    parser.add_argument("--requests", type=int, help="measured requests per client and concurrency (default 2000)")
    parser.add_argument(
        "--smoke",
        action="store_true",
        help=f"a short form: concurrency {SMOKE['concurrency']}, "
        f"{SMOKE['requests']} requests; results to a scratch file unless --out",
    )
    parser.add_argument("--engines-cache", default="~/.cache/pytest-triton-llm")
    stream = parser.add_argument_group("the streamed-responses ceiling (benchmarks/_stream_server.py)")
    stream.add_argument("--stream-only", action="store_true", help="measure only the ceiling (no tritonserver, no aiperf)")
    stream.add_argument("--no-stream", action="store_true", help="skip the ceiling")
    stream.add_argument("--workers", type=int, nargs="+", help="load process counts (default 1 2, and 4 8 with enough cores)")
    stream.add_argument("--channels", type=int, default=2, help="gRPC connections per load process (default 2)")
    stream.add_argument(
        "--server-processes", type=int, help="stream server processes (default: the cores the most workers leave)"
    )
    stream.add_argument("--streams", type=int, help="requests in flight (default 64)")
    stream.add_argument("--stream-tokens", type=int, help="responses per request (default 500)")
    stream.add_argument(
        "--paced-rate", type=int, help="the paced run's responses/s (default 50000 with 8 or more cores, else none)"
    )
    parser.add_argument("--out", type=Path, help="results file (default benchmarks/results/harness_fidelity.json)")
    args = parser.parse_args(argv)
    check_aiperf(parser, args.aiperf)
    concurrencies = args.concurrency or (SMOKE["concurrency"] if args.smoke else [8, 32, 64])
    requests = args.requests or (SMOKE["requests"] if args.smoke else 2000)
    out = results_path("harness_fidelity", args.smoke, args.out)
    cores = os.cpu_count() or 2
    args.workers = args.workers or (SMOKE["workers"] if args.smoke else [w for w in (1, 2, 4, 8, 12) if w <= cores])
    args.streams = args.streams or (SMOKE["streams"] if args.smoke else 64)
    args.stream_tokens = args.stream_tokens or (SMOKE["stream_tokens"] if args.smoke else 500)
    if args.paced_rate is None and cores >= 8 and not args.smoke:
        args.paced_rate = 50000
    if args.stream_only and args.no_stream:
        parser.error("--stream-only and --no-stream: pick one")

    progress = Progress()
    document: dict = {"smoke": args.smoke, "machine": {"cpus": cores, "platform": platform.platform()}}
    problems: list[str] = []
    if not args.stream_only:
        document.update(echo_fidelity(args, concurrencies, requests, progress))
        problems += document["problems"]
    if not args.no_stream:
        rows, paced, stream_problems_found = stream_ceiling(args, progress)
        print_stream(rows, paced)
        document["stream"] = {
            "server": "benchmarks/_stream_server.py (grpc.aio, KServe ModelStreamInfer on tritonclient's stubs)",
            "ceiling": rows,
            "max_responses_per_s": max((r["responses_per_s"] for r in rows), default=0),
            "paced": paced,
            "problems": stream_problems_found,
        }
        problems += stream_problems_found
    document["problems"] = problems
    write_results(out, document, args.smoke, print)
    if problems:
        raise BenchmarkFailed("; ".join(problems))
    return 0


def echo_fidelity(args, concurrencies: list[int], requests: int, progress) -> dict:
    """Each client's request-rate ceiling against tritonserver's echo model (aiperf's beside ours, when given)."""
    cache = EngineCache(args.engines_cache, progress)
    clients = [
        ("pytest-triton-llm loadgen", "http generate", lambda c: ours(server, "generate", c, requests)),
        ("pytest-triton-llm loadgen", "grpc stream", lambda c: ours(server, "grpc", c, requests)),
    ]
    aiperf_name = None
    if args.aiperf:
        aiperf_name = f"aiperf {aiperf_version(args.aiperf)}"
        recipe = load_lock(ROOT / "engines.lock").engines["smollm2-135m"]  # its tokenizer counts aiperf's tokens
        engine = backend_of(recipe.backend).build(cache, "smollm2-135m", recipe, False, site=lambda: None)
        clients.insert(
            0, (aiperf_name, "http generate", lambda c: aiperf(args.aiperf, server, engine.tokenizer_path, c, requests))
        )
    runtime = local_runtime(cache.root, progress)
    rows, results, problems = [], [], []
    with tempfile.TemporaryDirectory() as work:
        server = runtime.start(Launch("echo", REPOSITORY, REPOSITORY, "echo", Path(work) / "tritonserver.log", 120.0))
        try:
            for concurrency in concurrencies:
                for client, protocol, run in clients:
                    progress.say(f"{client} ({protocol}), concurrency {concurrency}: {requests} requests ...")
                    started, before = time.monotonic(), served_requests(server)
                    result = dict(
                        run(concurrency),
                        client=client,
                        protocol=protocol,
                        concurrency=concurrency,
                        wall_s=round(time.monotonic() - started, 1),
                    )
                    sent = requests + warmup_count(requests)  # measured + warm-up requests
                    result["server_counted"] = settled_count(server, before, sent)
                    problems += check(result, requests)
                    results.append(result)
                    rows.append(
                        [
                            client,
                            protocol,
                            concurrency,
                            result["requests"],
                            result["server_counted"],
                            result["errors"],
                            f"{result['rps']:.0f}",
                        ]
                    )
        finally:
            server.stop()
    best: dict[str, float] = {}
    for r in results:
        key = f"{r['client']} ({r['protocol']})"
        best[key] = max(best.get(key, 0.0), r["rps"])
    print("\n".join(table(["client", "protocol", "concurrency", "requests", "server counted", "errors", "req/s"], rows)))
    if aiperf_name is None:
        print("aiperf: not run (no --aiperf PATH)")
    print("\nhighest request rate per client: " + "; ".join(f"{k}: {v:.0f} req/s" for k, v in best.items()))
    return {
        "server": f"tritonserver {server.version} ({runtime.describe()}), model echo (python backend)",
        "aiperf": aiperf_name or "not run",
        "requests": requests,
        "results": results,
        "max_rps": best,
        "problems": problems,
    }


if __name__ == "__main__":
    try:
        sys.exit(main())
    except BenchmarkFailed as exc:
        print(f"harness_fidelity: FAILED: {exc}", file=sys.stderr)
        sys.exit(1)
