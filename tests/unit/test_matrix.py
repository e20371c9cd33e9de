import json

from pytest_triton_llm.cli import main


def report(path, image, outcomes, ratio=None, served_by="project stand-in"):
    tests = [
        {"nodeid": f"suites/test_{suite}.py::t{i}", "outcome": o, "deployment": "m:v1", "markers": []}
        for i, (suite, o) in enumerate(outcomes)
    ]
    document = {
        "schema": 1,
        "run": {"options": {"image": image}},
        "tests": tests,
        "summary": {},
        "deployments": {
            "m:v1": {
                "server_version": "2.50.0",
                "server_ready_s": 12.5,
                "served_by": served_by,
                "metrics": {"accuracy": {"rouge1": 30.25}},
            }
        },
    }
    if ratio is not None:
        document["inflight_vs_v1_throughput_ratio"] = ratio
    path.write_text(json.dumps(document))
    return path


def test_matrix_renders_suites_by_image_with_outcomes_and_metrics(tmp_path, capsys):
    a = report(
        tmp_path / "a.json",
        "nvcr.io/nvidia/tritonserver:24.09-trtllm-python-py3",
        [("functional", "passed"), ("functional", "passed"), ("lora", "skipped")],
        ratio=2.2,
    )
    b = report(
        tmp_path / "b.json",
        "nvcr.io/nvidia/tritonserver:24.04-trtllm-python-py3",
        [("functional", "passed"), ("functional", "failed"), ("lora", "passed")],
        served_by="TensorRT-LLM 0.9.0 (C++ backend)",
    )
    assert main(["matrix", str(a), str(b), "--output", str(tmp_path / "m.md")]) == 0
    out = capsys.readouterr().out
    assert out.splitlines()[:6] == [
        "| suite | 24.09-trtllm | 24.04-trtllm |",
        "| --- | --- | --- |",
        "| **tensorrt_llm served by** | project stand-in | TensorRT-LLM 0.9.0 (C++ backend) |",  # stand-in: no compat claim
        "| functional | 2 passed | FAIL 1 failed, 1 passed |",
        "| lora | 1 skipped | 1 passed |",
        "",
    ]
    assert "| inflight / V1 throughput | 2.20x | - |" in out and "| ROUGE-1 m:v1 | 30.25 | 30.25 |" in out
    assert (tmp_path / "m.md").read_text() == out


def test_local_runs_are_named_by_where_their_server_came_from(tmp_path, capsys):
    wheel = report(tmp_path / "wheel.json", "local", [("functional", "passed")])
    inside = json.loads(report(tmp_path / "inside.json", "local", [("functional", "passed")]).read_text())
    inside["server"] = {"binary": "/opt/tritonserver/bin/tritonserver", "origin": "the serving image's"}
    (tmp_path / "inside.json").write_text(json.dumps(inside))
    assert main(["matrix", str(wheel), str(tmp_path / "inside.json")]) == 0
    assert capsys.readouterr().out.splitlines()[0] == "| suite | local (Triton 2.50.0) | in-image (Triton 2.50.0) |"


def test_a_file_that_is_not_a_report_is_one_clear_error(tmp_path, capsys):
    (tmp_path / "x.json").write_text('{"hello": 1}')
    assert main(["matrix", str(tmp_path / "x.json")]) == 2
    assert "not a pytest-triton-llm report" in capsys.readouterr().err


def test_a_folder_of_reports_skips_other_json_and_says_so(tmp_path, capsys):
    report(tmp_path / "a.json", "nvcr.io/nvidia/tritonserver:24.09-trtllm-python-py3", [("functional", "passed")])
    (tmp_path / "accuracy-outputs.json").write_text('{"outputs": []}')
    assert main(["matrix", str(tmp_path)]) == 0
    out, err = capsys.readouterr()
    assert "24.09-trtllm" in out
    assert (
        err.strip() == f"pytest-triton-llm: skipped {tmp_path / 'accuracy-outputs.json'}: not a pytest-triton-llm "
        "report (written by --triton-llm-report, schema 1)"
    )


def test_a_remote_run_is_its_own_column_named_by_its_url(tmp_path, capsys):
    local = report(tmp_path / "local.json", "local", [("functional", "passed")])
    remote = report(tmp_path / "remote.json", "remote grpc://triton.ml.svc:8001", [("functional", "failed")])
    assert main(["matrix", str(local), str(remote)]) == 0
    header = capsys.readouterr().out.splitlines()[0]
    assert "remote grpc://triton.ml.svc:8001" in header and "local (Triton 2.50.0)" in header
