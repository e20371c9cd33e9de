import json
import shutil
from types import SimpleNamespace
from pathlib import Path

import numpy as np
import pytest

from pytest_triton_llm.perf.baseline import BaselineError, FailRule, load_baseline, save_baseline
from pytest_triton_llm.perf.budgets import Budget, find_budget, load_budgets
from pytest_triton_llm.triton.load import RequestRecord
from pytest_triton_llm.host.hardware import hardware_class
from pytest_triton_llm.perf.metrics import summarize
from pytest_triton_llm.perf.repeats import judge_goodput, noisy, parse_slos, spread
from pytest_triton_llm.perf.options import PerfOptions, add_options
from pytest_triton_llm.perf.plot import plot_latency_vs_throughput
from pytest_triton_llm.perf.workload import Lengths, Workload, load_workloads, synthetic_requests
from pytest_triton_llm.common.schema import SchemaError
from pytest_triton_llm.plugin.terminal import perf_lines, perf_verdict
from pytest_triton_llm.common.usage import OptionError

FIXTURES = __import__("pathlib").Path(__file__).resolve().parents[2] / "fixtures"


def test_project_workloads_load_and_name_their_load_points():
    workloads = load_workloads(FIXTURES / "perf_workloads.toml")
    assert [name for name, _ in workloads["default"].load_points()] == [
        "concurrency=1",
        "concurrency=4",
        "concurrency=8",
        "rate=2",
    ]
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
    streamed = RequestRecord(0, sent=0.0, token_times=[0.1, 0.2, 0.4], tokens=3, done=0.5, streamed=True)
    other = RequestRecord(1, sent=1.0, token_times=[1.1, 1.3], tokens=2, done=1.3, streamed=True)
    failed = RequestRecord(2, sent=0.0, done=0.1, error="boom")
    result = summarize([streamed, other, failed], duration_s=2.0)
    assert result["requests"] == 2 and result["errors"] == 1 and result["error_samples"] == ["boom"]
    assert result["throughput_rps"] == 1.0 and result["output_tokens_per_s"] == 2.5
    assert result["ttft_ms"]["p50"] == pytest.approx(100.0)
    assert set(result["latency_ms"]) == {"mean", "p50", "p90", "p99"}
    unstreamed = summarize([RequestRecord(0, sent=0.0, token_times=[1.0], tokens=8, done=1.0)], 1.0)
    assert [unstreamed[k] for k in ("ttft_ms", "itl_ms", "icl_ms", "tpot_ms")] == [None, None, None, None]


def test_itl_is_aiperfs_per_request_mean_gap_and_icl_pools_every_gap():
    # gaps of 100 and 200 ms in one request, 200 ms in the other
    records = [
        RequestRecord(0, sent=0.0, token_times=[0.1, 0.2, 0.4], tokens=3, done=0.5, streamed=True),
        RequestRecord(1, sent=1.0, token_times=[1.1, 1.3], tokens=2, done=1.3, streamed=True),
    ]
    result = summarize(records, duration_s=2.0)
    assert result["itl_ms"]["mean"] == pytest.approx((150 + 200) / 2)  # (0.4 - 0.1) / 2 and (1.3 - 1.1) / 1
    assert result["icl_ms"]["mean"] == pytest.approx((100 + 200 + 200) / 3, abs=0.01)
    assert result["output_token_throughput_per_user"]["mean"] == pytest.approx((1 / 0.15 + 1 / 0.2) / 2, abs=0.01)


def test_tpot_is_mlperfs_latency_minus_ttft_over_tokens_minus_one_up_to_the_requests_end():
    # the first request's last response (Triton's empty final one) comes 100 ms after its last token
    records = [
        RequestRecord(0, sent=0.0, token_times=[0.1, 0.2, 0.4], tokens=3, done=0.5, streamed=True),
        RequestRecord(1, sent=1.0, token_times=[1.1, 1.3], tokens=2, done=1.3, streamed=True),
    ]
    assert summarize(records, 2.0)["tpot_ms"]["mean"] == pytest.approx(((0.5 - 0.1) / 2 * 1000 + 200) / 2)


def test_requests_of_one_token_have_a_ttft_but_no_itl_or_tpot():
    one = RequestRecord(0, sent=0.0, token_times=[0.3], tokens=1, done=0.3, streamed=True)
    result = summarize([one], 1.0)
    assert result["ttft_ms"]["mean"] == pytest.approx(300.0)
    assert [result[k] for k in ("itl_ms", "icl_ms", "tpot_ms", "output_token_throughput_per_user")] == [None] * 4


def test_output_token_throughput_runs_from_the_first_send_to_the_last_token_response():
    records = [
        RequestRecord(0, sent=0.5, token_times=[0.6, 0.7], tokens=2, done=0.8, streamed=True),
        RequestRecord(1, sent=1.0, token_times=[1.5, 2.5], tokens=2, done=2.6, streamed=True),
    ]
    result = summarize(records, duration_s=3.0)  # the load generator's window began 0.5 s before the first send
    assert result["benchmark_duration_s"] == 2.0 and result["output_token_throughput"] == 2.0
    assert result["output_tokens_per_s"] == pytest.approx(4 / 3.0, abs=0.01)


def test_every_summary_metric_has_a_definition_naming_its_source():
    from pytest_triton_llm.perf.metrics import DEFINITIONS

    record = RequestRecord(0, sent=0.0, token_times=[0.1, 0.2], tokens=2, done=0.2, streamed=True)
    measured = set(summarize([record], 1.0)) - {"requests", "errors", "output_tokens", "error_samples", "duration_s"}
    assert measured - {"throughput_rps"} == set(DEFINITIONS)
    for name in ("itl_ms", "icl_ms", "output_token_throughput"):
        assert "https://github.com/ai-dynamo/aiperf/" in DEFINITIONS[name], name
    assert "https://github.com/mlcommons/inference/" in DEFINITIONS["tpot_ms"]


def test_a_baseline_saved_when_itl_ms_meant_the_pooled_gaps_reads_them_as_icl_ms(tmp_path):
    old_point = {
        "output_tokens_per_s": 40.0,
        "itl_ms": {"mean": 30.0, "p50": 28.0, "p90": 35.0, "p99": 60.0},
        "runs": [{"output_tokens_per_s": 40.0, "itl_ms": {"p99": 60.0}}, {"output_tokens_per_s": 41.0, "itl_ms": {"p99": 62.0}}],
        "repeats": {"itl_ms.p99": {"mean": 61.0}, "output_tokens_per_s": {"mean": 40.5}},
    }
    path = tmp_path / "old.json"
    path.write_text(
        json.dumps(
            {"schema": 1, "kind": "pytest-triton-llm perf baseline", "run": {}, "deployments": {"e:v": {"c=1": old_point}}}
        )
    )
    point = load_baseline(path)["deployments"]["e:v"]["c=1"]
    assert point["icl_ms"] == {"mean": 30.0, "p50": 28.0, "p90": 35.0, "p99": 60.0} and "itl_ms" not in point
    assert [run["icl_ms"] for run in point["runs"]] == [{"p99": 60.0}, {"p99": 62.0}]
    assert set(point["repeats"]) == {"icl_ms.p99", "output_tokens_per_s"}
    now = {"itl_ms": {"p99": 31.0}, "icl_ms": {"p99": 66.0}}
    # the pooled gaps are compared with the pooled gaps; aiperf's ITL has nothing to be compared with
    assert FailRule.parse("icl_ms.p99:5").regression({"icl_ms": point["icl_ms"]}, now) == (
        "icl_ms.p99 rose 10.0% (60 -> 66; allowed 5%)"
    )
    assert FailRule.parse("itl_ms.p99:5").regression(point, now) == "itl_ms.p99: the baseline has no value to compare 31 with"


def test_a_baseline_saved_with_both_names_is_read_as_written(tmp_path):
    point = {
        "output_tokens_per_s": 40.0,
        "itl_ms": {"p99": 31.0},
        "icl_ms": {"p99": 60.0},
        "repeats": {"itl_ms.p99": {"mean": 31.0}},
    }
    save_baseline(tmp_path / "b.json", {"e:v": {"c=1": point}}, {})
    assert load_baseline(tmp_path / "b.json")["deployments"]["e:v"]["c=1"] == point


def test_the_most_specific_budget_applies_and_misses_are_named():
    budgets = [
        Budget(engine="e", min_output_tokens_per_s=1.0),
        Budget(engine="e", hardware="cpu", load_point="concurrency=4", min_output_tokens_per_s=50.0, max_ttft_p99_ms=10.0),
    ]
    identity = dict(engine="e", deployment="v1", hardware="cpu", image="local", load_point="concurrency=4")
    budget = find_budget(budgets, **identity)
    assert budget is budgets[1]
    assert find_budget(budgets, **dict(identity, engine="other")) is None
    rows = budget.check({"output_tokens_per_s": 40.0, "throughput_rps": 1.0, "latency_ms": {"p99": 5.0}, "ttft_ms": None})
    assert rows == [["min_output_tokens_per_s", "40", ">= 50", "MISSED"], ["max_ttft_p99_ms", "not measured", "10", "n/a"]]


def test_the_migration_budget_judges_the_llmapi_over_engine_throughput_ratio_only_at_its_load_point():
    budget = Budget(engine="e", deployment="llmapi", hardware="cpu", load_point="migration", min_throughput_ratio_vs_engine=0.5)
    identity = dict(engine="e", deployment="llmapi", hardware="cpu", image="local")
    assert find_budget([budget], **identity, load_point="concurrency=1") is None
    assert find_budget([budget], **identity, load_point="migration") is budget
    assert budget.check({"throughput_ratio_vs_engine": 0.42}) == [["min_throughput_ratio_vs_engine", "0.42", ">= 0.5", "MISSED"]]
    assert budget.check({"throughput_ratio_vs_engine": 1.04})[0][-1] == "ok"


def test_fail_rules_name_the_metric_and_how_much_it_got_worse():
    before = {"output_tokens_per_s": 100.0, "latency_ms": {"p99": 1000.0}}
    after = {"output_tokens_per_s": 70.0, "latency_ms": {"p99": 1100.0}}
    assert FailRule.parse("output_tokens_per_s:10").regression(before, after) == (
        "output_tokens_per_s dropped 30.0% (100 -> 70; allowed 10%)"
    )
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


def perf_options(**given) -> PerfOptions:
    """PerfOptions from the command line's values (those not given at the defaults the options declare)."""
    defaults: dict = {}

    class Group:  # collects each --perf-* option's destination and default, as pytest's parser would
        def addoption(self, name, **spec):
            store_true = spec.get("action") == "store_true"
            defaults[name.lstrip("-").replace("-", "_")] = spec.get("default", False if store_true else None)

    add_options(Group())
    return PerfOptions.from_config(SimpleNamespace(option=SimpleNamespace(**{**defaults, **given})))


def test_without_the_options_budgets_and_workloads_come_from_the_fixtures():
    options = perf_options()
    path, budgets = options.budgets_from(FIXTURES / "perf_budgets.toml")
    assert path == FIXTURES / "perf_budgets.toml" and budgets == load_budgets(path)
    assert options.workload_from(FIXTURES / "perf_workloads.toml")[0] == "default"


def test_a_users_budgets_and_workloads_files_replace_the_fixtures(tmp_path):
    (tmp_path / "budgets.toml").write_text(
        '[[budget]]\nengine = "llama-8b"\nhardware = "NVIDIA H200"\nmin_output_tokens_per_s = 2000\n'
    )
    (tmp_path / "workloads.toml").write_text(
        "[workload.mine]\ninput_tokens = {mean = 1024}\noutput_tokens = {mean = 256}\nrequests = 64\nconcurrency = [32]\n"
    )
    options = perf_options(
        perf_budgets=str(tmp_path / "budgets.toml"), perf_workloads=str(tmp_path / "workloads.toml"), perf_workload="mine"
    )
    path, budgets = options.budgets_from(FIXTURES / "perf_budgets.toml")
    assert path == tmp_path / "budgets.toml"
    assert budgets == [Budget(engine="llama-8b", hardware="NVIDIA H200", min_output_tokens_per_s=2000.0)]  # no cpu budget left
    name, workload = options.workload_from(FIXTURES / "perf_workloads.toml")
    assert name == "mine" and workload.requests == 64 and workload.load_points() == [("concurrency=32", {"concurrency": 32})]
    with pytest.raises(pytest.UsageError, match=r"^--perf-workload default: .*workloads.toml has mine$"):
        perf_options(perf_workloads=str(tmp_path / "workloads.toml")).workload_from(FIXTURES / "perf_workloads.toml")


@pytest.mark.parametrize(
    "option, text, message",
    [
        (
            "perf_budgets",
            '[[budget]]\nengine = "e"\nmin_output_tokens_per_s = "fast"\n',
            "--perf-budgets: {path}: budget #1: field 'min_output_tokens_per_s': expected number, got string 'fast'",
        ),
        (
            "perf_budgets",
            '[[budget]]\nengine = "e"\ngpu = "H200"\n',
            "--perf-budgets: {path}: budget #1: unknown field 'gpu' "
            "(allowed: deployment, engine, engine_digest, hardware, image, load_point, max_latency_p99_ms, max_ttft_p99_ms, "
            "min_output_tokens_per_s, min_speedup_vs_no_speculation, min_throughput_ratio_vs_engine, min_throughput_rps, "
            "workload)",
        ),
        (
            "perf_workloads",
            "[workload.w]\ninput_tokens = {mean = 8}\noutput_tokens = {mean = 8}\nrequests = 2.0\nconcurrency = [1]\n",
            "--perf-workloads: {path}: workload 'w': field 'requests': expected integer, got number 2.0",
        ),
        (
            "perf_workloads",
            "[workload.w]\ninput_tokens = {mean = 8}\nrequests = 1\nconcurrency = [1]\n",
            "--perf-workloads: {path}: workload 'w': missing field 'output_tokens' (table)",
        ),
        ("perf_budgets", None, "--perf-budgets: {path}: file not found"),
    ],
)
def test_a_schema_error_in_a_users_file_is_one_line_naming_the_file_and_the_field(tmp_path, option, text, message):
    path = tmp_path / "mine.toml"
    if text is not None:
        path.write_text(text)
    with pytest.raises(OptionError) as caught:
        perf_options(**{option: str(path)})
    assert str(caught.value) == message.format(path=path)


def test_a_broken_budgets_file_stops_the_run_with_one_usage_error_line(project):
    shutil.copy(FIXTURES / "perf_budgets.toml", project.path / "mine.toml")
    text = (project.path / "mine.toml").read_text().replace("max_ttft_p99_ms = 5000", 'max_ttft_p99_ms = "5 s"')
    (project.path / "mine.toml").write_text(text)
    result = project.runpytest_subprocess("--perf-budgets", "mine.toml", "--collect-only")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    assert [line for line in result.stderr.lines if line.strip()] == [
        "ERROR: --perf-budgets: mine.toml: budget #2: field 'max_ttft_p99_ms': expected number, got string '5 s'"
    ]


def test_the_gpu_workloads_take_256_requests_of_the_stated_lengths():
    workloads = load_workloads(FIXTURES / "perf_workloads.toml")
    shapes = {name: (w.input_tokens, w.output_tokens) for name, w in workloads.items() if name.startswith("gpu")}
    assert shapes == {
        "gpu": (Lengths(512), Lengths(512)),
        "gpu-prefill": (Lengths(2048), Lengths(128)),
        "gpu-decode": (Lengths(128), Lengths(512)),
    }
    for name in shapes:
        assert workloads[name].requests == 256 and workloads[name].fixed_output
        assert [point for point, _ in workloads[name].load_points()] == ["concurrency=4", "concurrency=16", "concurrency=64"]
    requests = synthetic_requests(workloads["gpu-prefill"], 256, range(100, 1000), max_input=4096, max_output=4096)
    assert {(len(r.input_ids), r.max_tokens) for r in requests} == {(2048, 128)}


JUDGED = {
    "hardware": "cpu",
    "image": "local",
    "budget_file": "fixtures/perf_budgets.toml",
    "judged": True,
    "budget": {"min_output_tokens_per_s": "ok", "max_latency_p99_ms": "ok", "max_ttft_p99_ms": "ok"},
    "budget_match": Budget(engine="smollm2-135m", deployment="inflight", hardware="cpu", image="local").match(2),
    "throughput_rps": 1.5,
    "output_tokens_per_s": 48.0,
    "latency_ms": {"p50": 900.0, "p99": 2100.0},
    "ttft_ms": {"p50": 80.0},
    "itl_ms": {"p50": 25.0},
}
NOT_JUDGED = dict(
    JUDGED,
    hardware="NVIDIA H200",
    image="24.09-trtllm",
    budget_file="/tmp/mybudgets.toml",
    judged=False,
    budget_match=None,
    budget="none for hardware NVIDIA H200, image 24.09-trtllm: measured, not judged",
)


def test_a_judged_load_point_names_its_budget_and_how_it_fared():
    assert perf_verdict(JUDGED) == "judged by budget #2 [smollm2-135m.inflight.cpu.local]: ok"
    missed = dict(JUDGED, budget={"min_output_tokens_per_s": "MISSED", "max_ttft_p99_ms": "n/a"})
    assert perf_verdict(missed) == "judged by budget #2 [smollm2-135m.inflight.cpu.local]: MISSED min_output_tokens_per_s"
    wildcard = dict(JUDGED, budget_match=Budget(engine="e", load_point="concurrency=4").match(1))
    assert perf_verdict(wildcard) == "judged by budget #1 [e.*.*.*.concurrency=4]: ok"


def test_a_load_point_without_a_budget_says_it_was_not_judged_for_which_hardware_in_which_file():
    assert perf_verdict(NOT_JUDGED) == (
        "not judged: no budget for hardware 'NVIDIA H200', image '24.09-trtllm' in /tmp/mybudgets.toml"
    )
    failed = {k: v for k, v in JUDGED.items() if k not in ("judged", "budget_match", "budget")}
    assert perf_verdict(failed) == "not judged: the load point failed before its budget check"


def test_the_summary_has_a_budget_row_per_load_point_with_its_hardware():
    lines = perf_lines({"smollm2-135m:inflight": {"concurrency=8": JUDGED}, "llama-8b:inflight": {"concurrency=64": NOT_JUDGED}})
    rows = [line.split() for line in lines]
    assert [
        "smollm2-135m:inflight",
        "concurrency=8",
        "cpu",
        "judged",
        "by",
        "budget",
        "#2",
        "[smollm2-135m.inflight.cpu.local]:",
        "ok",
        "not",
        "compared",
    ] in rows
    assert ["llama-8b:inflight", "concurrency=64", "NVIDIA", "H200", "not", "judged:"] == rows[-4][:6]
    assert lines[-3:-1] == ["perf budgets: /tmp/mybudgets.toml", "perf budgets: fixtures/perf_budgets.toml"]
    assert lines[-1] == "perf judged by: budgets (1 of 2 load points)"  # a nightly summary says whether anything did
    assert perf_lines({}) == []


def test_with_repeats_the_summary_shows_each_load_points_mean_interval_and_cv():
    runs = [{**JUDGED, "output_tokens_per_s": v, "latency_ms": {"p99": 900.0 + v}, "ttft_ms": None} for v in (20.0, 30.0, 40.0)]
    entry = {**JUDGED, "runs": runs, "repeats": spread(runs)}
    lines = perf_lines({"smollm2-135m:v1": {"concurrency=4": entry}, "smollm2-135m:inflight": {"concurrency=1": JUDGED}})
    header = next(line for line in lines if line.startswith("deployment") and "runs" in line)
    row = lines[lines.index(header) + 2].split()
    assert row[:3] == ["smollm2-135m:v1", "concurrency=4", "3"]
    assert " ".join(row[3:8]) == "30 [5.159, 54.84] (33%) 930"  # t(0.975, 2) = 4.303: 30 +- 4.303 x 10 / sqrt(3)
    assert row[-1] == "-"  # no TTFT: a V1 deployment does not stream
    assert lines[lines.index(header) + 3] == ""  # one row: the inflight point ran once, it has no spread


def test_with_slos_the_summary_shows_goodput_per_load_point():
    goodput = {"slos": {"ttft_ms": 500.0, "itl_ms.p50": 50.0}, "good": 9, "total": 12, "fraction": 0.75, "goodput_rps": 1.5}
    lines = perf_lines({"smollm2-135m:inflight": {"concurrency=4": {**JUDGED, "goodput": goodput}}})
    header = next(line for line in lines if "goodput req/s" in line)
    assert lines[lines.index(header) + 2].split() == [
        "smollm2-135m:inflight",
        "concurrency=4",
        "ttft_ms",
        "<=",
        "500,",
        "itl_ms.p50",
        "<=",
        "50",
        "9/12",
        "75.0%",
        "1.5",
    ]


def test_budgets_match_the_gpu_class_or_the_cpu_core_count_and_the_closest_hardware_wins():
    budgets = [
        Budget(engine="e", hardware="cpu", min_output_tokens_per_s=4.0),
        Budget(engine="e", hardware="cpu-2", min_output_tokens_per_s=10.0),
        Budget(engine="e", hardware="h200", min_output_tokens_per_s=500.0),
        Budget(engine="e", hardware="NVIDIA H200", min_output_tokens_per_s=600.0),
    ]
    ident = dict(engine="e", deployment="v1", image="local", load_point="concurrency=1")
    assert find_budget(budgets, **ident, hardware="cpu", hardware_class=hardware_class("cpu", 2)) is budgets[1]
    assert find_budget(budgets, **ident, hardware="cpu", hardware_class=hardware_class("cpu", 16)) is budgets[0]
    assert find_budget(budgets, **ident, hardware="NVIDIA H200", hardware_class="h200") is budgets[3]
    assert find_budget(budgets[:3], **ident, hardware="NVIDIA H200", hardware_class="h200") is budgets[2]
    assert find_budget(budgets[:3], **ident, hardware="NVIDIA A100-SXM4-80GB", hardware_class="a100") is None
    assert [hardware_class(n) for n in ("NVIDIA H100 80GB HBM3", "NVIDIA A100-SXM4-80GB", "NVIDIA L4", "Tesla T4")] == [
        "h100",
        "a100",
        "l4",
        "t4",
    ]


def test_a_budget_for_one_workload_does_not_judge_the_same_load_point_of_another():
    budgets = [
        Budget(engine="e", hardware="cpu", min_output_tokens_per_s=4.0),
        Budget(engine="e", hardware="cpu-2", load_point="concurrency=1", workload="default", min_output_tokens_per_s=18.0),
    ]
    ident = dict(engine="e", deployment="v1", image="local", load_point="concurrency=1", hardware="cpu", hardware_class="cpu-2")
    assert find_budget(budgets, **ident, workload="default") is budgets[1]
    assert find_budget(budgets, **ident, workload="smoke") is budgets[0]
    assert find_budget(budgets, **ident) is budgets[0]  # the migration gate names no workload


def test_the_shipped_2_core_budgets_name_load_points_their_workload_has():
    workloads = load_workloads(Path("fixtures/perf_workloads.toml"))
    tight = [b for b in load_budgets(Path("fixtures/perf_budgets.toml")) if b.hardware == "cpu-2"]
    assert {b.deployment for b in tight} == {"v1", "inflight", "llmapi", "openai:llama-cpp-python"}
    for b in tight:
        assert b.load_point in [name for name, _ in workloads[b.workload].load_points()], (b.workload, b.load_point)


def test_with_repeats_a_budget_misses_only_when_the_whole_interval_is_on_the_wrong_side():
    budget = Budget(engine="e", min_output_tokens_per_s=20.0, max_latency_p99_ms=1000.0)
    runs = lambda tps, p99: [{"output_tokens_per_s": t, "latency_ms": {"p99": p}} for t, p in zip(tps, p99, strict=True)]  # noqa: E731
    assert [r[3] for r in budget.check({}, runs([25, 26, 24], [800, 820, 790]))] == ["ok", "ok"]
    assert [r[3] for r in budget.check({}, runs([12, 13, 11], [1500, 1600, 1550]))] == ["MISSED", "MISSED"]
    straddling = budget.check({}, runs([15, 26, 19], [700, 1400, 950]))
    assert [r[3] for r in straddling] == ["inconclusive", "inconclusive"]
    assert straddling[0][1].startswith("20 [") and "]" in straddling[0][1]  # the mean and its interval


def test_repeats_report_mean_std_cv_and_interval_and_name_noisy_metrics():
    runs = [{"output_tokens_per_s": v, "latency_ms": {"p99": 100.0}} for v in (20.0, 30.0, 40.0)]
    out = spread(runs)
    assert out["output_tokens_per_s"]["mean"] == 30.0 and out["output_tokens_per_s"]["cv"] == pytest.approx(0.3333, abs=1e-3)
    assert out["output_tokens_per_s"]["ci_low"] < 30.0 < out["output_tokens_per_s"]["ci_high"]
    assert out["latency_ms.p99"]["cv"] == 0.0
    assert noisy(out) == ["output_tokens_per_s (CV 33%)"]


def test_a_baseline_with_repeats_is_compared_by_welch_and_noise_alone_does_not_fail():
    rule = FailRule.parse("output_tokens_per_s:5")
    runs = lambda *v: {"output_tokens_per_s": v[0], "runs": [{"output_tokens_per_s": x} for x in v]}  # noqa: E731
    assert rule.regression(runs(100, 104, 96, 101), runs(97, 103, 95, 99)) is None  # -2%: within the noise and 5%
    worse = rule.regression(runs(100, 101, 99, 100), runs(80, 81, 79, 80))
    assert worse.startswith("output_tokens_per_s dropped 20.0% (100 -> 80 over 4 and 4 runs; allowed 5%, Welch p")
    # a single noisy repeat 8% down is not significant with this spread, though one-run compare would fail it
    assert rule.regression(runs(100, 110, 90, 100), runs(92, 102, 82, 92)) is None
    assert rule.regression({"output_tokens_per_s": 100}, {"output_tokens_per_s": 92}) is not None


def test_against_a_reference_in_the_same_rounds_what_slows_both_sides_cancels_and_a_20_percent_drop_fails():
    rule = FailRule.parse("output_tokens_per_s:10")
    rounds = lambda *v: [{"output_tokens_per_s": x} for x in v]  # noqa: E731
    # a busy neighbour halves rounds 2 and 4 on both sides: Welch over these runs could tell nothing, the pairs can
    reference = rounds(100, 50, 102, 49, 101, 98)
    clean = rule.paired(reference, rounds(99, 51, 100, 50, 103, 97))
    assert clean["regression"] is None and clean["ratios"] == [0.99, 1.02, 0.9804, 1.0204, 1.0198, 0.9898]
    assert clean["power"] == (
        f"output_tokens_per_s: catches {clean['detectable_pct']:.1f}% or worse with power 0.8 (6 interleaved rounds)"
    )
    assert clean["detectable_pct"] < 20
    slow = rule.paired(reference, rounds(80, 41, 81, 39, 80, 79))
    assert slow["regression"].startswith("output_tokens_per_s dropped 19.9% against the reference (round ratios 0.8, 0.82,")
    assert slow["worse_pct"] == 19.87
    assert rule.regression({"runs": reference}, {"runs": rounds(80, 41, 81, 39, 80, 79)}) is None  # Welch misses it
    # a time rises: latency 30% up fails a 15% allowance, 5% up does not
    ttft = FailRule.parse("ttft_ms.p50:15")
    times = lambda *v: [{"ttft_ms": {"p50": x}} for x in v]  # noqa: E731
    assert ttft.paired(times(100, 200, 100), times(130, 262, 129))["regression"].startswith("ttft_ms.p50 rose 30.")
    assert ttft.paired(times(100, 200, 100), times(105, 209, 104))["regression"] is None
    assert rule.paired(rounds(100), rounds(50))["regression"] == (
        "output_tokens_per_s: 1 rounds with a value on both sides, 2 needed"
    )


def test_perf_against_needs_rounds_and_a_rule_and_excludes_a_saved_baseline(tmp_path):
    with pytest.raises(
        OptionError,
        match=r"^--perf-against e:v needs --perf-repeats 2 or more .* and at least one "
        r"--perf-compare-fail METRIC:PCT$",
    ):
        perf_options(perf_against="e:v", perf_compare_fail=["output_tokens_per_s:10"])
    with pytest.raises(OptionError, match="needs --perf-repeats 2 or more"):
        perf_options(perf_against="e:v", perf_repeats=4)
    with pytest.raises(
        OptionError,
        match=r"^--perf-compare-fail needs --perf-compare BASELINE, --perf-against DEPLOYMENT or --perf-against-url URL$",
    ):
        perf_options(perf_compare_fail=["output_tokens_per_s:10"])
    options = perf_options(perf_against="e:v", perf_repeats=4, perf_compare_fail=["output_tokens_per_s:10"])
    assert options.against == "e:v" and options.fail_rules == (FailRule("output_tokens_per_s", 10.0),)
    save_baseline(tmp_path / "b.json", {}, {})
    with pytest.raises(OptionError, match=r"^--perf-against\(-url\) and --perf-compare: judge against a live reference"):
        perf_options(
            perf_against="e:v",
            perf_repeats=4,
            perf_compare=str(tmp_path / "b.json"),
            perf_compare_fail=["output_tokens_per_s:10"],
        )


def test_perf_against_url_needs_an_http_url_beside_openai_url_with_rounds_and_a_rule():
    paired = dict(perf_repeats=4, perf_compare_fail=["output_tokens_per_s:20"])
    url, v1 = "http://127.0.0.1:8001/v1", "http://127.0.0.1:8000/v1"
    with pytest.raises(OptionError, match=r"^--perf-against-url 127.0.0.1:8001: give the endpoint's base URL, e.g. http"):
        perf_options(perf_against_url="127.0.0.1:8001", openai_url=v1, **paired)
    with pytest.raises(OptionError, match=r"^--perf-against-url measures beside the /v1 perf test: give --openai-url too$"):
        perf_options(perf_against_url=url, **paired)
    with pytest.raises(OptionError, match=rf"^--perf-against-url {url} needs --perf-repeats 2 or more"):
        perf_options(perf_against_url=url, openai_url=v1, perf_compare_fail=["output_tokens_per_s:20"])
    with pytest.raises(OptionError, match="at least one --perf-compare-fail METRIC:PCT$"):
        perf_options(perf_against_url=url, openai_url=v1, perf_repeats=4)
    options = perf_options(perf_against_url=url, openai_url=v1, **paired)
    assert (options.against_url, options.against, options.repeats) == (url, None, 4)


def test_goodput_counts_requests_within_every_slo_and_failed_ones_count_against_it():
    def record(ttft, gaps, error=None):
        r = RequestRecord(
            0,
            sent=0.0,
            streamed=True,
            token_times=[ttft] + [ttft + sum(gaps[: i + 1]) for i in range(len(gaps))],
            done=1.0,
            error=error,
        )
        return r

    records = [record(0.2, [0.03, 0.03]), record(0.6, [0.03]), record(0.1, [0.08, 0.09]), record(0.1, [0.01], error="x")]
    slos = parse_slos(["ttft_ms:500", "itl_ms.p50:50"])
    assert judge_goodput(records, slos, duration_s=2.0) == {
        "slos": {"ttft_ms": 500.0, "itl_ms.p50": 50.0},
        "good": 1,
        "total": 4,
        "fraction": 0.25,
        "goodput_rps": 0.5,
    }
    with pytest.raises(ValueError, match="a per-request metric is one of ttft_ms, itl_ms, tpot_ms, latency_ms"):
        parse_slos(["tokens_per_s:5"])


def test_the_summary_says_when_repeats_leave_a_budget_inconclusive():
    entry = {
        "judged": True,
        "budget_match": {"entry": 2, "engine": "e", "deployment": "*", "hardware": "cpu-2", "image": "*", "load_point": "*"},
        "budget": {"min_output_tokens_per_s": "inconclusive", "max_latency_p99_ms": "ok"},
        "runs": [{}, {}, {}],
    }
    assert perf_verdict(entry) == "judged by budget #2 [e.*.cpu-2]: inconclusive min_output_tokens_per_s (3 runs)"


def test_a_baseline_of_another_workload_or_hardware_is_refused_and_another_image_is_said():
    from pytest_triton_llm.perf.baseline import comparable

    base = {"workload": "default", "hardware": "cpu", "image": "24.09-trtllm", "engine_digest": "a"}
    assert comparable(base, dict(base)) == (None, [])
    refused, _ = comparable(base, dict(base, workload="smoke", hardware="NVIDIA H200"))
    assert refused == "workload 'default' (baseline) vs 'smoke'; hardware 'cpu' (baseline) vs 'NVIDIA H200'"
    assert comparable(base, dict(base, image="26.07-trtllm", engine_digest="b")) == (
        None,
        ["image 24.09-trtllm -> 26.07-trtllm", "engine_digest a -> b"],
    )


def test_the_summary_says_what_a_baseline_compare_decided_and_could_catch():
    from pytest_triton_llm.plugin.terminal import compare_verdict

    assert compare_verdict(JUDGED) == "not compared"
    compared = {
        "baseline": "b.json",
        "differs": ["image 24.09 -> 26.07"],
        "regressions": [],
        "power": ["output_tokens_per_s: catches 14.2% or worse with power 0.8"],
    }
    assert compare_verdict(dict(JUDGED, compared=compared)) == (
        "ok (across image 24.09 -> 26.07); output_tokens_per_s: catches 14.2% or worse with power 0.8"
    )
    regressed = dict(compared, differs=[], regressions=["output_tokens_per_s dropped 21.0%"])
    assert compare_verdict(dict(JUDGED, compared=regressed)).startswith("REGRESSED: output_tokens_per_s dropped 21.0%; ")
    live = {"against": "e:v (reference)", "rounds": 6, "regressions": [], "power": ["output_tokens_per_s: catches 9%"]}
    assert compare_verdict(dict(JUDGED, compared=live)) == (
        "ok against e:v (reference) (6 interleaved rounds); output_tokens_per_s: catches 9%"
    )


# -- --perf-records --------------------------------------------------------------------------------------------


def test_records_are_one_json_line_a_request_with_times_in_ns_since_the_epoch(tmp_path):
    from pytest_triton_llm.perf.records import HEADER, read_records, write_records

    offset = 1_700_000_000_000_000_000  # ns since the epoch at perf_counter 0
    done = RequestRecord(1, sent=2.0, streamed=True, token_times=[2.25, 2.5], tokens=2, done=2.75)
    failed = RequestRecord(0, sent=1.0, done=1.5, error="boom")
    path = tmp_path / "out" / "records.jsonl"
    write_records(path, [done, failed], offset, deployment="e:v", load_point="concurrency=2", workload="w", repeat=1)
    write_records(path, [done], offset + 7, deployment="e:v", load_point="concurrency=2", workload="w", repeat=2)
    header, records = read_records(path)
    assert header == HEADER
    assert records[0] == {
        "deployment": "e:v",
        "load_point": "concurrency=2",
        "workload": "w",
        "repeat": 1,
        "index": 0,
        "send_ns": offset + 1_000_000_000,
        "first_token_ns": None,
        "token_ns": [],
        "end_ns": offset + 1_500_000_000,
        "tokens": 0,
        "streamed": False,
        "error": "boom",
        "epoch_offset_ns": offset,
    }
    assert records[1]["token_ns"] == [offset + 2_250_000_000, offset + 2_500_000_000]
    assert records[1]["first_token_ns"] == offset + 2_250_000_000 and records[1]["tokens"] == 2
    assert (records[2]["repeat"], records[2]["send_ns"]) == (2, offset + 7 + 2_000_000_000)
    assert len(path.read_text().splitlines()) == 4  # one header, then one line a request


def test_perf_records_refuses_a_path_that_exists(tmp_path):
    (tmp_path / "r.jsonl").write_text("a user's file\n")
    with pytest.raises(OptionError) as caught:
        perf_options(perf_records=str(tmp_path / "r.jsonl"))
    assert str(caught.value) == (
        f"--perf-records {tmp_path / 'r.jsonl'}: the file exists; name a new one (a run never appends to or replaces "
        "an earlier run's records)"
    )
    assert (tmp_path / "r.jsonl").read_text() == "a user's file\n"
    assert perf_options(perf_records=str(tmp_path / "new.jsonl")).records == str(tmp_path / "new.jsonl")


# -- --perf-mlperf ---------------------------------------------------------------------------------------------


def streamed(index: int, ttft: float, gap: float, tokens: int, end_after: float = 0.0) -> RequestRecord:
    """A streamed request sent at 0: first token at `ttft`, then one every `gap` s; its end `end_after` the last."""
    times = [ttft + i * gap for i in range(tokens)]
    return RequestRecord(index, sent=0.0, streamed=True, token_times=times, tokens=tokens, done=times[-1] + end_after)


def test_the_mlperf_benchmarks_are_mlperf_confs_limits():
    from pytest_triton_llm.perf.mlperf import load_benchmarks

    benchmarks = load_benchmarks(FIXTURES / "mlperf.toml")
    limits = {name: (b.ttft_p99_ms, b.tpot_p99_ms) for name, b in benchmarks.items()}
    assert limits == {
        "llama3.1-8b": (2000.0, 100.0),
        "llama3.1-8b-interactive": (500.0, 30.0),
        "llama2-70b": (2000.0, 200.0),
        "llama2-70b-interactive": (450.0, 40.0),
    }
    assert benchmarks["llama2-70b"].min_mean_output_tokens == pytest.approx(0.9 * 294.45)
    assert {b.min_tokens_per_request for b in benchmarks.values()} == {2}


def mlperf(name: str):
    return perf_options(perf_mlperf=name).mlperf


def test_a_load_point_within_the_limits_is_valid():
    from pytest_triton_llm.perf.mlperf import judge

    records = [streamed(i, ttft=0.5 + i / 100, gap=0.05, tokens=32) for i in range(50)]
    entry = judge(*mlperf("llama3.1-8b"), records)
    assert (entry["verdict"], entry["reasons"]) == ("VALID", [])
    assert entry["ttft_p99_ms"] == pytest.approx(990.0) and entry["tpot_p99_ms"] == pytest.approx(50.0)


def test_a_slow_first_token_at_the_99th_percentile_is_invalid():
    from pytest_triton_llm.perf.mlperf import judge

    # loadgen's p99 of 100 samples is the sorted value at index 99: one slow request decides it, none of 99 others
    fast = [streamed(i, ttft=0.2, gap=0.02, tokens=16) for i in range(99)]
    entry = judge(*mlperf("llama3.1-8b-interactive"), [*fast, streamed(99, ttft=0.6, gap=0.02, tokens=16)])
    assert (entry["verdict"], entry["reasons"]) == ("INVALID", ["TTFT p99 600.0 ms > 500 ms"])
    assert judge(*mlperf("llama3.1-8b-interactive"), fast)["verdict"] == "VALID"


def test_a_slow_time_per_output_token_is_invalid_and_counts_the_requests_end():
    from pytest_triton_llm.perf.mlperf import judge

    # 90 ms between tokens, but the request ends 2 s after its last token: (latency - TTFT) / (tokens - 1) = 223 ms
    records = [streamed(i, ttft=0.1, gap=0.09, tokens=10, end_after=1.2) for i in range(10)]
    entry = judge(*mlperf("llama3.1-8b"), records)
    assert (entry["verdict"], entry["reasons"]) == ("INVALID", ["TPOT p99 223.3 ms > 100 ms"])
    assert judge(*mlperf("llama2-70b-interactive"), records)["reasons"][0] == "TPOT p99 223.3 ms > 40 ms"


def test_outputs_shorter_than_mlperfs_rules_are_invalid():
    from pytest_triton_llm.perf.mlperf import judge

    one_token = [streamed(0, ttft=0.1, gap=0.01, tokens=1), *(streamed(i, ttft=0.1, gap=0.01, tokens=8) for i in range(1, 5))]
    assert judge(*mlperf("llama3.1-8b"), one_token)["reasons"] == ["1 requests returned fewer than 2 tokens"]
    # llama2-70b's accuracy run must average 90% of the reference's 294.45 tokens a sample
    short = [streamed(i, ttft=0.1, gap=0.01, tokens=128) for i in range(5)]
    assert judge(*mlperf("llama2-70b"), short)["reasons"] == ["mean output 128.0 tokens < 265.005 a request"]
    assert judge(*mlperf("llama2-70b"), [streamed(i, ttft=0.1, gap=0.01, tokens=300) for i in range(5)])["verdict"] == "VALID"


def test_failed_and_unstreamed_requests_make_a_load_point_invalid():
    from pytest_triton_llm.perf.mlperf import judge

    records = [streamed(0, ttft=0.1, gap=0.01, tokens=8), RequestRecord(1, sent=0.0, done=0.1, error="boom")]
    assert judge(*mlperf("llama3.1-8b"), records)["reasons"] == ["1 of 2 requests failed"]
    whole = [RequestRecord(0, sent=0.0, token_times=[0.5], tokens=8, done=0.5)]
    assert judge(*mlperf("llama3.1-8b"), whole)["reasons"] == [
        "TTFT not measured for every request (MLPerf's Server scenario times the first token)"
    ]


def test_an_unknown_mlperf_benchmark_is_one_usage_line_naming_the_known_ones():
    with pytest.raises(OptionError) as caught:
        perf_options(perf_mlperf="llama3-8b")
    assert str(caught.value) == (
        "--perf-mlperf llama3-8b: known benchmarks are llama2-70b, llama2-70b-interactive, llama3.1-8b, llama3.1-8b-interactive"
    )


def test_the_summary_says_valid_or_invalid_and_why_per_load_point():
    from pytest_triton_llm.perf.mlperf import judge
    from pytest_triton_llm.plugin.terminal import mlperf_lines

    valid = judge(*mlperf("llama3.1-8b"), [streamed(i, ttft=0.5, gap=0.05, tokens=8) for i in range(4)])
    invalid = judge(*mlperf("llama3.1-8b"), [streamed(i, ttft=2.5, gap=0.05, tokens=8) for i in range(4)])
    lines = mlperf_lines([("e:v", "concurrency=1", {"mlperf": valid}), ("e:v", "concurrency=8", {"mlperf": invalid})])
    assert [line.rstrip().split(None, 5) for line in lines[3:]] == [
        ["e:v", "concurrency=1", "llama3.1-8b", "500", "50", "VALID"],
        ["e:v", "concurrency=8", "llama3.1-8b", "2500", "50", "INVALID: TTFT p99 2500.0 ms > 2000 ms"],
    ]


# -- --perf-sweep ----------------------------------------------------------------------------------------------


def sweep_runs(*tokens_per_s: float) -> list[dict]:
    return [{"output_tokens_per_s": t, "throughput_rps": t / 16, "latency_ms": {"p50": 1.0, "p99": 2.0}} for t in tokens_per_s]


def test_sweep_concurrencies_double_up_to_the_limit():
    from pytest_triton_llm.perf.sweep import concurrencies

    assert concurrencies(64) == [1, 2, 4, 8, 16, 32, 64]
    assert concurrencies(48) == [1, 2, 4, 8, 16, 32, 48]
    assert concurrencies(1) == [1]


def test_one_run_a_step_stops_when_the_point_estimate_gains_under_5_percent_and_the_knee_is_the_step_before():
    from pytest_triton_llm.perf.sweep import Sweep

    sweep = Sweep(64, slos=False)
    assert [sweep.add(c, sweep_runs(t)) for c, t in ((1, 20.0), (2, 36.0), (4, 50.0))] == [None, None, None]
    assert sweep.add(8, sweep_runs(52.0)) == "stalled at concurrency=8: +4.0% on concurrency=4 (one run a step: point estimate)"
    result = sweep.result()
    assert (result["knee"], result["knee_why"]) == (4, "the last step before the stall")
    assert [s["gain_pct"] for s in result["steps"][1:]] == [80.0, 38.89, 4.0]


def test_with_repeats_the_knee_is_the_step_before_the_gains_stopped_though_the_stall_was_called_later():
    from pytest_triton_llm.perf.sweep import Sweep

    # measured on 2 cores (2026-11-26, workload sweep, 2 runs a step): 32 gained nothing on 16, yet its runs spread
    # too far to call a stall; 64 lost 4.4% with a tight interval
    sweep = Sweep(64, slos=False)
    steps = {1: (15.06, 14.17), 2: (16.28, 17.19), 4: (39.14, 37.64), 8: (69.5, 75.83), 16: (111.03, 114.54)}
    for concurrency, runs in steps.items():
        assert sweep.add(concurrency, sweep_runs(*runs)) is None
    assert sweep.add(32, sweep_runs(113.07, 106.8)) is None
    assert sweep.add(64, sweep_runs(104.46, 105.79)).startswith("stalled at concurrency=64: -4.4% on concurrency=32")
    assert sweep.result()["knee"] == 16


def test_with_repeats_a_step_stalls_only_when_its_whole_interval_gains_under_5_percent():
    from pytest_triton_llm.perf.sweep import Sweep

    sweep = Sweep(64, slos=False)
    sweep.add(1, sweep_runs(20.0, 21.0, 19.0))
    # mean +2.5%, but the runs spread so far that the interval reaches past +5%: no evidence of a stall, go on
    assert sweep.add(2, sweep_runs(15.5, 20.5, 25.5)) is None
    stop = sweep.add(4, sweep_runs(20.4, 20.6, 20.5))
    assert stop.startswith("stalled at concurrency=4: +0.0% on concurrency=2, 95% interval up to +")
    # concurrency 2 gained 2.5% on the means: the stall began there, so the knee is the step before it
    result = sweep.result()
    assert (result["knee"], result["knee_why"]) == (
        1,
        "the last step before the stall (from concurrency=2 on the means gained under 5%)",
    )


def test_with_slos_the_sweep_stops_where_they_break_and_the_knee_is_the_highest_goodput_within_them():
    from pytest_triton_llm.perf.sweep import Sweep

    def good(rps, good, total=12):
        return {"good": good, "total": total, "fraction": round(good / total, 4), "goodput_rps": rps}

    sweep = Sweep(64, slos=True)
    assert sweep.add(1, sweep_runs(20.0), good(0.5, 12)) is None
    assert sweep.add(2, sweep_runs(40.0), good(1.2, 12)) is None
    assert sweep.add(4, sweep_runs(60.0), good(0.9, 9)) == (
        "SLOs broken at concurrency=4: 9/12 requests within every SLO (75.0% < 99%)"
    )
    result = sweep.result()
    assert (result["knee"], result["knee_why"]) == (2, "the highest goodput (1.2 req/s) of the steps within the SLOs")
    never = Sweep(64, slos=True)
    never.add(1, sweep_runs(20.0), good(0.1, 2))
    assert (never.result()["knee"], never.result()["knee_why"]) == (None, "no step met the SLOs")


def test_a_sweep_that_never_stalls_stops_at_its_limit_with_the_last_step_as_knee():
    from pytest_triton_llm.perf.sweep import Sweep

    sweep = Sweep(4, slos=False)
    assert [sweep.add(c, sweep_runs(10.0 * c)) for c in (1, 2, 4)] == [None, None, "reached --perf-sweep-max 4 without a stall"]
    assert (sweep.result()["knee"], sweep.result()["knee_why"]) == (4, "the last step: throughput had not stalled")


def test_perf_sweep_max_needs_the_sweep_and_a_positive_limit():
    assert perf_options(perf_sweep=True).sweep_max == 64
    assert perf_options(perf_sweep=True, perf_sweep_max=16).sweep_max == 16
    for given in (dict(perf_sweep_max=16), dict(perf_sweep=True, perf_sweep_max=0)):
        with pytest.raises(OptionError) as caught:
            perf_options(**given)
        assert str(caught.value) == f"--perf-sweep-max {given['perf_sweep_max']}: needs --perf-sweep and a concurrency >= 1"


def sweep_result() -> dict:
    from pytest_triton_llm.perf.sweep import Sweep

    sweep = Sweep(64, slos=False)
    for concurrency, tokens_per_s in ((1, 20.0), (2, 36.0), (4, 50.0), (8, 51.0)):
        runs = [{"output_tokens_per_s": tokens_per_s, "latency_ms": {"p50": 100.0 * concurrency, "p99": 150.0 * concurrency}}]
        sweep.add(concurrency, runs)
    return {"workload": "sweep", "max_concurrency": 64, **sweep.result()}


def test_the_plot_draws_a_sweep_and_marks_its_knee(tmp_path):
    pytest.importorskip("matplotlib", reason="the reference extra (matplotlib) is not installed")
    import matplotlib.pyplot as plt

    drawn = []
    real_scatter = plt.Axes.scatter

    def scatter(ax, *args, **kwargs):
        drawn.append(kwargs.get("label"))
        return real_scatter(ax, *args, **kwargs)

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(plt.Axes, "scatter", scatter)
        png = plot_latency_vs_throughput({}, tmp_path / "r.perf.png", sweeps={"e:v": sweep_result()})
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert drawn == ["e:v knee"]


def test_the_summary_has_a_sweep_table_with_its_knee_and_why_it_stopped():
    from pytest_triton_llm.plugin.terminal import sweep_lines

    lines = sweep_lines({"e:v": sweep_result()})
    assert lines[1] == (
        "perf sweep e:v (workload sweep): knee at concurrency=4, the last step before the stall; stalled at "
        "concurrency=8: +2.0% on concurrency=4 (one run a step: point estimate)"
    )
    rows = [line.split() for line in lines[4:]]
    assert [row[0] for row in rows] == ["1", "2", "4", "8"]
    assert rows[2] == ["4", "50.0", "+38.9%", "400", "/", "600", "-", "knee"]
    assert sweep_lines({}) == []


def test_without_a_statistic_an_itl_slo_is_the_requests_aiperf_itl_and_tpot_slos_are_mlperfs():
    # gaps of 31.25 and 93.75 ms: ITL 62.5 ms; Triton's empty final response 125 ms after the last token: TPOT 125 ms
    record = RequestRecord(0, sent=0.0, streamed=True, token_times=[0.125, 0.15625, 0.25], tokens=3, done=0.375)
    specs = ("itl_ms:62.5", "itl_ms:62.4", "itl_ms.max:93.75", "itl_ms.max:93.7", "tpot_ms:125", "tpot_ms:124.9")
    fractions = [judge_goodput([record], parse_slos([spec]), duration_s=1.0)["fraction"] for spec in specs]
    assert fractions == [1.0, 0.0, 1.0, 0.0, 1.0, 0.0]


@pytest.mark.parametrize(
    ("given", "message"),
    [
        ({"perf_calibrate": 1, "perf_budgets": "b.toml"}, "--perf-calibrate 1: give 2 runs or more"),
        ({"perf_calibrate": 3}, "--perf-calibrate needs --perf-budgets FILE: the budgets are appended there"),
        ({"perf_calibrate": 3, "perf_budgets": "b.toml", "perf_measure_only": True}, "--perf-calibrate judges nothing"),
    ],
)
def test_perf_calibrate_is_refused_in_one_line_where_it_cannot_write_or_would_judge(given, message):
    with pytest.raises(OptionError, match=message):
        perf_options(**given)


def test_perf_calibrate_runs_each_load_point_n_times_and_may_create_the_budgets_file(tmp_path):
    options = perf_options(perf_calibrate=3, perf_budgets=str(tmp_path / "new.toml"))
    assert (options.repeats, options.calibrate, options.budgets, options.require_budget) == (3, 3, [], True)
    assert not (tmp_path / "new.toml").exists()  # written at the session's end, from the runs
    assert perf_options(perf_measure_only=True).require_budget is False


def test_perf_repeats_max_needs_an_interval_to_start_from_and_room_above_the_repeats():
    with pytest.raises(OptionError, match="--perf-repeats-max 5 needs --perf-repeats 2 or more"):
        perf_options(perf_repeats_max=5)
    with pytest.raises(OptionError, match="no more than itself"):
        perf_options(perf_repeats=4, perf_repeats_max=3)
    assert perf_options(perf_repeats=3, perf_repeats_max=8).repeats_max == 8


def test_a_speculating_deployments_draft_counts_add_up_per_load_point_and_show_in_the_summary():
    """The llmapi model's counts come with a request's last response as strings; the load point sums them over the
    requests that returned them, and its rate is accepted / drafted over those."""
    records = [RequestRecord(i, sent=0.0, token_times=[0.1], tokens=1, done=0.2) for i in range(3)]
    for record, (drafted, accepted) in zip(records, [("8", "5"), ("4", "0")], strict=False):
        record.add({"text_output": np.array([b"x"]), "total_draft_tokens": np.array([drafted.encode()]),
                    "total_accepted_draft_tokens": np.array([accepted.encode()])}, keep=False)  # fmt: skip
    counts = summarize(records, 1.0)["speculation"]
    assert counts == {"requests": 2, "drafted": 12, "accepted": 5, "acceptance_rate": round(5 / 12, 3)}
    assert "speculation" not in summarize(records[2:], 1.0)  # no request returned counts: nothing said
    lines = perf_lines({"smollm2-135m:llmapi-ngram": {"concurrency=1": {**JUDGED, "speculation": counts}}})
    header = next(line for line in lines if "acceptance rate" in line)
    assert lines[lines.index(header) + 2].split() == ["smollm2-135m:llmapi-ngram", "concurrency=1", "2", "12", "5", "0.417"]
