import importlib.util
import json
from pathlib import Path

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
    assert "3 run(s)" in budgets_file.read_text()


def test_a_report_without_perf_load_points_is_refused_with_what_to_run(tmp_path, capsys):
    report = tmp_path / "r.json"
    report.write_text(json.dumps({"deployments": {"e:v1": {"metrics": {}}}}))
    assert derive.main([str(report)]) == 1
    assert "pytest -m perf" in capsys.readouterr().err
