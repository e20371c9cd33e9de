import importlib.util
import json
from pathlib import Path

import pytest

from pytest_triton_llm.perf.budgets import find_budget, load_budgets

SCRIPT = Path(__file__).resolve().parents[2] / "scripts" / "derive_budgets.py"
spec = importlib.util.spec_from_file_location("derive_budgets", SCRIPT)
derive = importlib.util.module_from_spec(spec)
spec.loader.exec_module(derive)

POINT = {
    "hardware": "NVIDIA H200",
    "hardware_class": "h200",
    "image": "local",
    "workload": "reference-gpu",
    "output_tokens_per_s": 900.0,
    "latency_ms": {"p99": 2000.0},
    "ttft_ms": {"p99": 50.0},
    "repeats": {
        "output_tokens_per_s": {"n": 3, "mean": 1000.0},
        "latency_ms.p99": {"n": 3, "mean": 1800.0},
        "ttft_ms.p99": {"n": 3, "mean": 40.0},
    },
}
V1_POINT = {**POINT, "ttft_ms": None, "repeats": {}}  # one run of a deployment that does not stream
REPORT = {
    "deployments": {
        "smollm2-135m:inflight": {"metrics": {"perf": {"concurrency=8": POINT}}},
        "smollm2-135m:v1": {"metrics": {"perf": {"concurrency=8": V1_POINT}}},
    }
}


def test_derived_budgets_sit_the_slack_away_from_the_measured_means_and_judge_that_hardware_class(tmp_path, capsys):
    report = tmp_path / "r.json"
    report.write_text(json.dumps(REPORT))
    assert derive.main([str(report), "--slack", "2"]) == 0
    budgets_file = tmp_path / "budgets.toml"
    budgets_file.write_text(capsys.readouterr().out)
    budgets = load_budgets(budgets_file)
    inflight, v1 = budgets
    assert (inflight.min_output_tokens_per_s, inflight.max_latency_p99_ms, inflight.max_ttft_p99_ms) == (500.0, 3600, 80)
    assert (v1.min_output_tokens_per_s, v1.max_latency_p99_ms, v1.max_ttft_p99_ms) == (450.0, 4000, None)
    ident = dict(
        engine="smollm2-135m",
        deployment="inflight",
        image="local",
        load_point="concurrency=8",
        workload="reference-gpu",
        hardware="NVIDIA H200",
    )
    assert find_budget(budgets, **ident, hardware_class="h200") is inflight
    assert find_budget(budgets, **ident, hardware_class="a100") is None
    assert all(row[3] == "ok" for row in inflight.check(POINT))
    header = budgets_file.read_text().strip().splitlines()[0]
    assert header.startswith("[[budget]]  # derived ") and header.endswith(
        " from 1 session(s) of 3 run(s): output_tokens_per_s 1000; latency_ms.p99 1800; ttft_ms.p99 40; slack 2x from the worst"
    )


def session(throughput: float, latency: float, hardware_class: str = "h200") -> dict:
    point = {
        **POINT,
        "hardware_class": hardware_class,
        "repeats": {
            "output_tokens_per_s": {"n": 3, "mean": throughput},
            "latency_ms.p99": {"n": 3, "mean": latency},
            "ttft_ms.p99": {"n": 3, "mean": 40.0},
        },
    }
    return {"deployments": {"smollm2-135m:inflight": {"metrics": {"perf": {"concurrency=8": point}}}}}


def test_budgets_of_several_sessions_take_the_slowest_session_and_state_the_spread(tmp_path, capsys):
    paths = []
    for name, report in (("a", session(1000.0, 1800.0)), ("b", session(700.0, 2400.0))):
        paths.append(tmp_path / f"{name}.json")
        paths[-1].write_text(json.dumps(report))
    assert derive.main([*map(str, paths), "--slack", "1.5"]) == 0
    budgets_file = tmp_path / "budgets.toml"
    budgets_file.write_text(capsys.readouterr().out)
    [budget] = load_budgets(budgets_file)
    assert (budget.min_output_tokens_per_s, budget.max_latency_p99_ms) == (466.7, 3600)
    header = budgets_file.read_text().strip().splitlines()[0]
    assert header.endswith(
        " from 2 session(s) of 3+3 run(s): output_tokens_per_s 1000 / 700 (spread 1.43x); latency_ms.p99 1800 / 2400 "
        "(spread 1.33x); ttft_ms.p99 40 / 40 (spread 1.00x); slack 1.5x from the worst"
    )


def test_reports_of_two_hardware_classes_are_refused(tmp_path, capsys):
    paths = []
    for name, report in (("a", session(1000.0, 1800.0)), ("b", session(700.0, 2400.0, "a100"))):
        paths.append(tmp_path / f"{name}.json")
        paths[-1].write_text(json.dumps(report))
    with pytest.raises(SystemExit) as exited:
        derive.main(list(map(str, paths)))
    assert exited.value.code == 2
    assert (
        capsys.readouterr()
        .err.strip()
        .splitlines()[-1]
        .endswith("error: the reports measured a100, h200: derive one hardware class at a time")
    )


def test_a_report_without_perf_load_points_is_refused_with_what_to_run(tmp_path, capsys):
    report = tmp_path / "r.json"
    report.write_text(json.dumps({"deployments": {"e:v1": {"metrics": {}}}}))
    assert derive.main([str(report)]) == 1
    assert "pytest -m perf" in capsys.readouterr().err
