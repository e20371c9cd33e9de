"""Harness fidelity: is our load generator, not the server, the limit of what the perf suite measures?

One tritonserver (the embedded runtime, started through the runtime registry as a pytest session starts it)
serves `echo`, a model that does no work, on loopback. The same closed-loop workload is sent by aiperf (an
independent tool, HTTP generate through its template endpoint; optional) and by pytest_triton_llm.load, the perf
suite's load engine (HTTP generate, and gRPC streams), one client after the other, at each concurrency. The
highest request rate each client reaches is its ceiling; ours must not be below the independent tool's. Triton's
own request count checks what each client claims.

    python3 -m venv .venv-aiperf && .venv-aiperf/bin/pip install aiperf==0.13.0
    .venv/bin/python benchmarks/harness_fidelity.py --aiperf .venv-aiperf/bin/aiperf
    .venv/bin/python benchmarks/harness_fidelity.py --smoke          # seconds; aiperf only with --aiperf

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

from _common import ROOT, BenchmarkFailed, aiperf_version, check_aiperf, local_runtime, results_path, run_aiperf, write_results

sys.path.insert(0, str(ROOT))

from pytest_triton_llm.cache import EngineCache  # noqa: E402
from pytest_triton_llm.engines import backend_of  # noqa: E402
from pytest_triton_llm.load import Target, run_load  # noqa: E402
from pytest_triton_llm.lock import load_lock  # noqa: E402
from pytest_triton_llm.perf.metrics import summarize  # noqa: E402
from pytest_triton_llm.progress import Progress  # noqa: E402
from pytest_triton_llm.runtimes import Launch  # noqa: E402
from pytest_triton_llm.tensor_contract import ensemble_inputs  # noqa: E402
from pytest_triton_llm.terminal import table  # noqa: E402

PROMPT = "The quick brown fox jumps over the lazy dog. " * 4
TEMPLATE = '{"text_input": {{ text|tojson }}, "max_tokens": {{ max_tokens or 8 }}}'
REPOSITORY = ROOT / "benchmarks" / "echo_repository"
SMOKE = {"concurrency": [1, 8], "requests": 50}


def served_requests(server) -> int:
    """Triton's own count of successful echo requests: checks what each client claims."""
    with urllib.request.urlopen(f"http://{server.endpoints.http}/v2/models/echo/stats", timeout=10) as resp:  # noqa: S310
        return int(json.loads(resp.read())["model_stats"][0]["inference_stats"]["success"]["count"])


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
    parser.add_argument("--out", type=Path, help="results file (default benchmarks/results/harness_fidelity.json)")
    args = parser.parse_args(argv)
    check_aiperf(parser, args.aiperf)
    concurrencies = args.concurrency or (SMOKE["concurrency"] if args.smoke else [8, 32, 64])
    requests = args.requests or (SMOKE["requests"] if args.smoke else 2000)
    out = results_path("harness_fidelity", args.smoke, args.out)

    progress = Progress()
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
                    result["server_counted"] = served_requests(server) - before  # measured + warm-up requests
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
    best = {}
    for r in results:
        key = f"{r['client']} ({r['protocol']})"
        best[key] = max(best.get(key, 0.0), r["rps"])
    print("\n".join(table(["client", "protocol", "concurrency", "requests", "server counted", "errors", "req/s"], rows)))
    if aiperf_name is None:
        print("aiperf: not run (no --aiperf PATH)")
    print("\nhighest request rate per client: " + "; ".join(f"{k}: {v:.0f} req/s" for k, v in best.items()))
    write_results(
        out,
        {
            "smoke": args.smoke,
            "machine": {"cpus": os.cpu_count(), "platform": platform.platform()},
            "server": f"tritonserver {server.version} ({runtime.describe()}), model echo (python backend)",
            "aiperf": aiperf_name or "not run",
            "requests": requests,
            "results": results,
            "max_rps": best,
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
        print(f"harness_fidelity: FAILED: {exc}", file=sys.stderr)
        sys.exit(1)
