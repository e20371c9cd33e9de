"""The perf suite through a real server: report entries, plot, baseline save and a regression
against a doctored baseline that names the metric and the load point."""

import json
from pathlib import Path

import pytest

pytestmark = [pytest.mark.integration, pytest.mark.timeout(900)]

ROOT = Path(__file__).resolve().parents[2]


def perf_run(pytester, *args):
    return pytester.runpytest_subprocess(
        # the load points only: the anti-caching check (also marked perf) has no baseline to save or compare
        str(ROOT / "suites"),
        "-m",
        "perf",
        "-k",
        "test_load_point",
        "-p",
        "no:cacheprovider",
        "--engines-lock",
        str(ROOT / "engines.lock"),
        "--perf-workload",
        "smoke",
        "--deployment",
        "smollm2-135m:inflight",
        *args,
        timeout=600,
    )


@pytest.mark.usefixtures("warm_cache")
def test_perf_report_plot_baseline_and_a_regression(pytester):
    report, saved = pytester.path / "out" / "r.json", pytester.path / "base.json"
    first = perf_run(pytester, "--triton-llm-report", str(report), "--perf-save", str(saved))
    first.assert_outcomes(passed=2)
    first.stdout.fnmatch_lines(["*deployment*load point*req/s*tok/s*", "*smollm2-135m:inflight*concurrency=2*"])
    perf = json.loads(report.read_text())["deployments"]["smollm2-135m:inflight"]["metrics"]["perf"]
    for point in ("concurrency=1", "concurrency=2"):
        entry = perf[point]
        assert entry["errors"] == 0 and entry["output_tokens"] == 4 * 8
        assert entry["throughput_rps"] > 0 and entry["output_tokens_per_s"] > 0
        assert (
            {"mean", "p50", "p90", "p99"} <= set(entry["latency_ms"])
            and entry["ttft_ms"]["p99"] > 0
            and entry["itl_ms"]["p50"] > 0
        )
    assert (pytester.path / "out" / "r.perf.png").read_bytes()[:4] == b"\x89PNG"

    doctored = json.loads(saved.read_text())
    points = doctored["deployments"]["smollm2-135m:inflight"]
    # concurrency=2 ten times faster: a regression whatever this machine does; concurrency=1 ten times slower, so that
    # a shared machine's noise between the two runs (26% once, 2026-11-27) cannot fail it
    points["concurrency=2"]["output_tokens_per_s"] *= 10
    points["concurrency=1"]["output_tokens_per_s"] /= 10
    (pytester.path / "doctored.json").write_text(json.dumps(doctored))
    second = perf_run(pytester, "--perf-compare", "doctored.json", "--perf-compare-fail", "output_tokens_per_s:25")
    second.assert_outcomes(passed=1, failed=1)
    second.stdout.fnmatch_lines(["*regression at concurrency=2: output_tokens_per_s dropped *% (* -> *; allowed 25%)*"])
