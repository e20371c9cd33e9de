"""The perf suite through a real server: report entries, plot, baseline save and a regression
against a doctored baseline that names the metric and the load point."""

import json
from pathlib import Path

import pytest

from pytest_triton_llm.perf.history.judge import load_settings
from pytest_triton_llm.perf.history.store import read as read_history

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
    report, saved, history = pytester.path / "out" / "r.json", pytester.path / "base.json", pytester.path / "h.sqlite"
    first = perf_run(pytester, "--triton-llm-report", str(report), "--perf-save", str(saved), "--perf-history", str(history))
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
    second = perf_run(
        pytester,
        "--perf-compare",
        "doctored.json",
        "--perf-compare-fail",
        "output_tokens_per_s:25",
        "--perf-history",
        str(history),
    )
    second.assert_outcomes(passed=1, failed=1)
    second.stdout.fnmatch_lines(["*regression at concurrency=2: output_tokens_per_s dropped *% (* -> *; allowed 25%)*"])
    # each session appended its load points to the history, the first with exactly the values of its report
    series = {s.load_point: s for s in read_history(history, load_settings().metrics)}
    digest = json.loads(report.read_text())["deployments"]["smollm2-135m:inflight"]["engine_digest"]
    assert sorted(series) == ["concurrency=1", "concurrency=2"] and all(len(s.started) == 2 for s in series.values())
    for point, one in series.items():
        assert one.values["output_tokens_per_s"][0] == perf[point]["output_tokens_per_s"]
        assert one.values["ttft_ms.p99"][0] == perf[point]["ttft_ms"]["p99"]
        assert one.attributes[0]["engine_digest"] == digest


@pytest.mark.usefixtures("warm_cache")
def test_a_first_night_fails_unjudged_then_calibrates_and_the_next_run_judges_every_load_point(pytester):
    """The first-night story of a user with their own budgets file: nothing in it matches the engine."""
    budgets = pytester.path / "my_budgets.toml"
    budgets.write_text('[[budget]]\nengine = "some-other-engine"\nmin_output_tokens_per_s = 1\n')
    first = perf_run(pytester, "--perf-budgets", str(budgets))
    first.assert_outcomes(failed=2)
    first.stdout.fnmatch_lines(["*nothing judges it: no budget in*my_budgets.toml matches*--perf-calibrate 3*"])

    calibration = perf_run(pytester, "--perf-budgets", str(budgets), "--perf-calibrate", "3")
    calibration.assert_outcomes(passed=2)
    said = "perf calibration: 2 load point(s) calibrated into "
    assert any(said in line for line in calibration.outlines + calibration.errlines), calibration.outlines[-20:]
    written = budgets.read_text()
    assert written.startswith('[[budget]]\nengine = "some-other-engine"\n'), written  # what the user had is kept
    assert written.count("[[budget]]  # calibrated ") == 2 and written.count('engine_digest = "') == 2, written

    report = pytester.path / "judged.json"
    judged = perf_run(pytester, "--perf-budgets", str(budgets), "--triton-llm-report", str(report))
    points = json.loads(report.read_text())["deployments"]["smollm2-135m:inflight"]["metrics"]["perf"]
    # judged, not necessarily ok: whether a shared 2-core machine keeps within 3 runs' budgets is timing, not harness
    missed = [name for name, point in points.items() if "MISSED" in point["budget"].values()]
    judged.assert_outcomes(passed=2 - len(missed), failed=len(missed))
    for point in points.values():
        assert point["judged"] and set(point["budget"]) == {"min_output_tokens_per_s", "max_latency_p99_ms", "max_ttft_p99_ms"}
        assert point["budget_match"]["engine_digest"] == point["engine_digest"]
