"""Harness fidelity: is our load generator, not the server, the limit of what the perf suite measures?

One tritonserver (the embedded runtime) serves `echo`, a model that does no work, on loopback.
The same closed-loop workload is sent by aiperf (an independent tool, HTTP generate through its
template endpoint) and by pytest_triton_llm.load, the perf suite's load engine (HTTP generate, and gRPC streams), one
client after the other, at each concurrency. The highest request rate each client reaches is its
ceiling; ours must not be below the independent tool's.

    python3 -m venv .venv-aiperf && .venv-aiperf/bin/pip install aiperf==0.13.0
    .venv/bin/python benchmarks/harness_fidelity.py --aiperf .venv-aiperf/bin/aiperf

Writes a table to stdout and the figures to benchmarks/results/harness_fidelity.json.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from pytest_triton_llm.cache import EngineCache  # noqa: E402
from pytest_triton_llm.engines import backend_of  # noqa: E402
from pytest_triton_llm.files import write_json  # noqa: E402
from pytest_triton_llm.load import Target, run_load  # noqa: E402
from pytest_triton_llm.lock import load_lock  # noqa: E402
from pytest_triton_llm.perf.metrics import summarize  # noqa: E402
from pytest_triton_llm.progress import Progress  # noqa: E402
from pytest_triton_llm.runtimes import Launch, ServerOptions  # noqa: E402
from pytest_triton_llm.runtimes.local import LocalRuntime  # noqa: E402
from pytest_triton_llm.tensor_contract import ensemble_inputs  # noqa: E402
from pytest_triton_llm.terminal import table  # noqa: E402

PROMPT = "The quick brown fox jumps over the lazy dog. " * 4
TEMPLATE = '{"text_input": {{ text|tojson }}, "max_tokens": {{ max_tokens or 8 }}}'


def served_requests(server) -> int:
    """Triton's own count of successful echo requests: checks what each client claims."""
    with urllib.request.urlopen(f"http://{server.endpoints.http}/v2/models/echo/stats", timeout=10) as resp:  # noqa: S310
        return int(json.loads(resp.read())["model_stats"][0]["inference_stats"]["success"]["count"])


def ours(server, protocol: str, concurrency: int, requests: int) -> dict:
    """The load engine against echo's text contract (text_input, max_tokens); each answer counts as one token."""
    target = Target(server.endpoints, "echo", protocol)
    work = [ensemble_inputs(PROMPT, 8) for _ in range(requests)]
    records, seconds = run_load(target, work, work[: min(50, requests)], concurrency=concurrency)
    result = summarize(records, seconds)
    return {"requests": result["requests"], "errors": result["errors"], "rps": result["throughput_rps"]}


def aiperf(executable: str, server, tokenizer: Path, concurrency: int, requests: int) -> dict:
    with tempfile.TemporaryDirectory() as artifacts:
        template = Path(artifacts) / "payload.json.j2"  # a file: aiperf splits inline --extra-inputs values on commas
        template.write_text(TEMPLATE)
        argv = [
            executable, "profile", "--model", "echo", "--url", f"http://{server.endpoints.http}",
            "--endpoint-type", "template", "--custom-endpoint", "/v2/models/echo/generate",
            "--extra-inputs", f"payload_template:{template}", "--extra-inputs", "response_field:text_output",
            "--tokenizer", str(tokenizer), "--concurrency", str(concurrency), "--request-count", str(requests),
            "--warmup-request-count", str(min(50, requests)), "--synthetic-input-tokens-mean", "40",
            "--output-tokens-mean", "8", "--artifact-dir", artifacts, "--ui-type", "none",
        ]  # fmt: skip
        # a local tokenizer directory: aiperf 0.13 resolves it as a Hub repo id when HF_HUB_OFFLINE is set
        env = {k: v for k, v in os.environ.items() if k not in ("HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE")}
        done = subprocess.run(argv, capture_output=True, text=True, env=env, timeout=900)
        exports = list(Path(artifacts).rglob("profile_export_aiperf.json"))
        if done.returncode != 0 or not exports:
            tail = "\n".join((done.stdout + done.stderr).strip().splitlines()[-15:])
            raise RuntimeError(f"aiperf failed (exit {done.returncode}):\n{tail}")
        data = json.loads(exports[0].read_text())
    return {
        "requests": int(data["request_count"]["avg"]),
        "errors": int((data.get("error_request_count") or {}).get("avg", 0)),
        "rps": round(float(data["request_throughput"]["avg"]), 3),
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--aiperf", required=True, help="the aiperf executable (installed in its own environment)")
    parser.add_argument("--concurrency", type=int, nargs="+", default=[8, 32, 64])
    parser.add_argument("--requests", type=int, default=2000, help="measured requests per client and concurrency")
    parser.add_argument("--engines-cache", default="~/.cache/pytest-triton-llm")
    parser.add_argument("--out", type=Path, default=ROOT / "benchmarks" / "results" / "harness_fidelity.json")
    args = parser.parse_args(argv)

    progress = Progress()
    cache = EngineCache(args.engines_cache, progress)
    lock = load_lock(ROOT / "engines.lock")
    recipe = lock.engines["smollm2-135m"]  # its tokenizer counts aiperf's tokens
    engine = backend_of(recipe.backend).build(cache, "smollm2-135m", recipe, False, site=lambda: None)
    runtime = LocalRuntime.create(ServerOptions(), cache.root, progress)  # the embedded tritonserver
    with tempfile.TemporaryDirectory() as work:
        repository = ROOT / "benchmarks" / "echo_repository"
        server = runtime.start(Launch("echo", repository, repository, "echo", Path(work) / "tritonserver.log", 120.0))
        rows, results = [], []
        try:
            for concurrency in args.concurrency:
                for client, protocol, run in (
                    ("aiperf 0.13", "http generate", lambda c: aiperf(args.aiperf, server, engine.path, c, args.requests)),
                    ("pytest-triton-llm loadgen", "http generate", lambda c: ours(server, "generate", c, args.requests)),
                    ("pytest-triton-llm loadgen", "grpc stream", lambda c: ours(server, "grpc", c, args.requests)),
                ):
                    progress.say(f"{client} ({protocol}), concurrency {concurrency}: {args.requests} requests ...")
                    started, before = time.monotonic(), served_requests(server)
                    result = dict(run(concurrency), client=client, protocol=protocol, concurrency=concurrency,
                                  wall_s=round(time.monotonic() - started, 1))  # fmt: skip
                    result["server_counted"] = served_requests(server) - before  # measured + warm-up requests
                    results.append(result)
                    rows.append([client, protocol, concurrency, result["requests"], result["server_counted"], result["errors"],
                                 f"{result['rps']:.0f}"])  # fmt: skip
        finally:
            server.stop()
    best = {}
    for r in results:
        key = f"{r['client']} ({r['protocol']})"
        best[key] = max(best.get(key, 0.0), r["rps"])
    print("\n".join(table(["client", "protocol", "concurrency", "requests", "server counted", "errors", "req/s"], rows)))
    print("\nhighest request rate per client: " + "; ".join(f"{k}: {v:.0f} req/s" for k, v in best.items()))
    write_json(args.out, {"machine": {"cpus": os.cpu_count(), "platform": platform.platform()}, "server": "tritonserver 2.51.0 "
               "(nvidia-pytriton 0.7.0), model echo (python backend)", "results": results, "max_rps": best})  # fmt: skip
    print(f"written to {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
