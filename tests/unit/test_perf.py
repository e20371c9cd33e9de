import json

import pytest

from pytest_triton_llm.perf.baseline import BaselineError, FailRule, load_baseline, save_baseline
from pytest_triton_llm.perf.budgets import Budget, find_budget
from pytest_triton_llm.load import RequestRecord
from pytest_triton_llm.perf.metrics import summarize
from pytest_triton_llm.perf.plot import plot_latency_vs_throughput
from pytest_triton_llm.perf.workload import Lengths, Workload, load_workloads, synthetic_requests
from pytest_triton_llm.schema import SchemaError

FIXTURES = __import__("pathlib").Path(__file__).resolve().parents[2] / "fixtures"


def test_project_workloads_load_and_name_their_load_points():
    workloads = load_workloads(FIXTURES / "perf_workloads.toml")
    assert [name for name, _ in workloads["default"].load_points()] == [
        "concurrency=1", "concurrency=4", "concurrency=8", "rate=2"]  # fmt: skip
    assert workloads["default"].load_points()[3][1] == {"request_rate": 2.0, "arrival": "poisson"}


def test_a_workload_needs_load_points(tmp_path):
    (tmp_path / "w.toml").write_text("[workload.x]\ninput_tokens = {mean = 4}\noutput_tokens = {mean = 4}\nrequests = 2\n")
    with pytest.raises(SchemaError, match="workload 'x': give load points"):
        load_workloads(tmp_path / "w.toml")


def test_synthetic_requests_follow_the_distributions_and_limits():
    workload = Workload(Lengths(32, 8), Lengths(16), requests=200, concurrency=(1,), seed=3)
    requests = synthetic_requests(workload, 200, range(100, 1000), max_input=40, max_output=64)
    assert synthetic_requests(workload, 200, range(100, 1000), 40, 64) == requests  # seeded
    lengths = [len(r.input_ids) for r in requests]
    assert max(lengths) <= 40 and min(lengths) >= 1 and 28 < sum(lengths) / len(lengths) < 33
    assert {r.max_tokens for r in requests} == {16}
    assert all(100 <= t < 1000 for r in requests for t in r.input_ids)


def test_summary_has_the_reports_keys_and_llm_latencies():
    streamed = RequestRecord(0, sent=0.0, token_times=[0.1, 0.2, 0.4], tokens=3, done=0.4, streamed=True)
    other = RequestRecord(1, sent=1.0, token_times=[1.1, 1.3], tokens=2, done=1.3, streamed=True)
    failed = RequestRecord(2, sent=0.0, done=0.1, error="boom")
    result = summarize([streamed, other, failed], duration_s=2.0)
    assert result["requests"] == 2 and result["errors"] == 1 and result["error_samples"] == ["boom"]
    assert result["throughput_rps"] == 1.0 and result["output_tokens_per_s"] == 2.5
    assert result["ttft_ms"]["p50"] == pytest.approx(100.0)
    assert result["itl_ms"]["mean"] == pytest.approx((100 + 200 + 200) / 3, rel=1e-3)
    assert set(result["latency_ms"]) == {"mean", "p50", "p90", "p99"}
    unstreamed = summarize([RequestRecord(0, sent=0.0, token_times=[1.0], tokens=8, done=1.0)], 1.0)
    assert unstreamed["ttft_ms"] is None and unstreamed["itl_ms"] is None


def test_the_most_specific_budget_applies_and_misses_are_named():
    budgets = [Budget(engine="e", min_output_tokens_per_s=1.0), Budget(engine="e", hardware="cpu", load_point="concurrency=4",
               min_output_tokens_per_s=50.0, max_ttft_p99_ms=10.0)]  # fmt: skip
    identity = dict(engine="e", deployment="v1", hardware="cpu", image="local", load_point="concurrency=4")
    budget = find_budget(budgets, **identity)
    assert budget is budgets[1]
    assert find_budget(budgets, **dict(identity, engine="other")) is None
    rows = budget.check({"output_tokens_per_s": 40.0, "throughput_rps": 1.0, "latency_ms": {"p99": 5.0}, "ttft_ms": None})
    assert rows == [["min_output_tokens_per_s", "40", ">= 50", "MISSED"], ["max_ttft_p99_ms", "not measured", "10", "n/a"]]


def test_fail_rules_name_the_metric_and_how_much_it_got_worse():
    before = {"output_tokens_per_s": 100.0, "latency_ms": {"p99": 1000.0}}
    after = {"output_tokens_per_s": 70.0, "latency_ms": {"p99": 1100.0}}
    assert FailRule.parse("output_tokens_per_s:10").regression(before, after) == (
        "output_tokens_per_s dropped 30.0% (100 -> 70; allowed 10%)")  # fmt: skip
    assert FailRule.parse("latency_ms.p99:20").regression(before, after) is None
    assert FailRule.parse("latency_ms.p99:5").regression(before, after) == "latency_ms.p99 rose 10.0% (1000 -> 1100; allowed 5%)"
    for bad in ("latency:5", "output_tokens_per_s", "itl_ms.p42:3", "throughput_rps:x"):
        with pytest.raises(BaselineError):
            FailRule.parse(bad)


def test_baselines_round_trip_and_keep_an_earlier_file(tmp_path):
    path = tmp_path / "base.json"
    path.write_text("old")
    kept = save_baseline(path, {"e:v1": {"concurrency=1": {"output_tokens_per_s": 5.0}}}, {"hardware": "cpu"})
    assert kept.read_text() == "old"
    assert load_baseline(path)["deployments"]["e:v1"]["concurrency=1"]["output_tokens_per_s"] == 5.0
    (tmp_path / "x.json").write_text(json.dumps({"kind": "something else"}))
    with pytest.raises(BaselineError, match="not a pytest-triton-llm perf baseline file"):
        load_baseline(tmp_path / "x.json")


def test_the_plot_is_a_png_over_the_concurrency_sweep(tmp_path):
    pytest.importorskip("matplotlib", reason="the reference extra (matplotlib) is not installed")
    point = {"output_tokens_per_s": 10.0, "latency_ms": {"p50": 100.0, "p99": 150.0}}
    results = {"e:v1": {"concurrency=1": point, "concurrency=4": dict(point, output_tokens_per_s=30.0), "rate=2": point}}
    png = plot_latency_vs_throughput(results, tmp_path / "r.perf.png")
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert plot_latency_vs_throughput({"e:v1": {}}, tmp_path / "none.png") is None
