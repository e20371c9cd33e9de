"""The perf suite through a real server samples its metrics page during the load point: figures in the report, the
time series in the side file the entry names, the plot beside latency; GPU telemetry where a GPU serves, else why not."""

import json
from pathlib import Path

import pytest

pytestmark = [pytest.mark.integration, pytest.mark.timeout(900)]

ROOT = Path(__file__).resolve().parents[2]
TRTLLM_KEYS = (
    'nv_trt_llm_request_metrics{request_type="active"}',
    'nv_trt_llm_kv_cache_block_metrics{kv_cache_block_type="used"}',
    'nv_trt_llm_general_metrics{general_type="iteration_counter"}',
    "nv_inference_queue_duration_us",
    "nv_inference_pending_request_count",
)


@pytest.mark.usefixtures("warm_cache")
def test_a_load_point_keeps_the_servers_metrics_over_time(pytester):
    # a budget of another engine only, and --perf-measure-only: the load point is measured, not judged (a busy
    # machine must not fail it)
    (pytester.path / "budgets.toml").write_text('[[budget]]\nengine = "none"\nhardware = "cpu"\nmin_output_tokens_per_s = 1\n')
    (pytester.path / "workloads.toml").write_text(  # the smoke workload's requests, at its concurrency=2 only
        "[workload.one]\ninput_tokens = { mean = 16, stdev = 0 }\noutput_tokens = { mean = 8, stdev = 0 }\nrequests = 4\n"
        "warmup = 1\nconcurrency = [2]\nfixed_output = true\n"
    )
    report = pytester.path / "out" / "r.json"
    run = pytester.runpytest_subprocess(
        str(ROOT / "suites"),
        "-m",
        "perf",
        "-k",
        "test_load_point",
        "-p",
        "no:cacheprovider",
        "--engines-lock",
        str(ROOT / "engines.lock"),
        "--perf-workloads",
        "workloads.toml",
        "--perf-workload",
        "one",
        "--perf-budgets",
        "budgets.toml",
        "--perf-measure-only",  # no budget matches: the series are what this test reads
        "--perf-scrape-ms",
        "100",
        "--deployment",
        "smollm2-135m:inflight",
        "--triton-llm-report",
        str(report),
        timeout=600,
    )
    run.assert_outcomes(passed=1)
    document = json.loads(report.read_text())
    entry = document["deployments"]["smollm2-135m:inflight"]["metrics"]["perf"]["concurrency=2"]
    server = entry["server_metrics"]
    assert server["model"] == "tensorrt_llm" and server["interval_ms"] == 100
    assert server["failed_scrapes"] == 0 and server["missing"] == []
    # 4 requests of 8 tokens at concurrency 2 take seconds on a CPU: tens of samples, and two requests in flight
    assert server["samples"] >= 10
    assert server["active_requests"]["max"] >= 1 and server["kv_cache_utilisation"]["max"] > 0
    assert server["iterations"] >= 8  # every token of a request is an iteration of the stand-in
    assert 0 <= server["queue_share"] <= 1
    side = Path(entry["series_file"])
    assert side == pytester.path / "out" / "r.series.json"
    [series] = json.loads(side.read_text())["deployments"]["smollm2-135m:inflight"]["concurrency=2"]
    t = series["server"]["t_s"]
    assert series["window_s"][1] == pytest.approx(entry["duration_s"], abs=0.01)
    assert sum(0 <= x <= series["window_s"][1] for x in t) == server["samples"]
    assert set(TRTLLM_KEYS) <= set(series["server"]["values"])
    assert "nv_inference_queue_duration_us" in series["server"]["rates_per_s"]
    assert max(series["server"]["values"][TRTLLM_KEYS[0]]) == server["active_requests"]["max"]
    assert (pytester.path / "out" / "r.series-smollm2-135m_inflight.png").read_bytes()[:4] == b"\x89PNG"
    assert "series" not in entry  # the report keeps the figures; the side file the series
    if document["run"]["gpu"] is None:
        assert entry["gpu_telemetry"] == {"absent": f"no GPU serves (hardware: {document['run']['hardware']})"}
        assert "gpu" not in series
    else:  # a GPU host: the GPU's power over the load point, and the tokens it gave per joule
        telemetry = entry["gpu_telemetry"]
        assert telemetry["gpu"] == document["run"]["gpu"]["index"] and telemetry["failed_samples"] == 0
        assert telemetry["power_w"]["mean"] > 0 and telemetry["energy_j"] > 0
        assert telemetry["tokens_per_joule"] == pytest.approx(entry["output_tokens"] / telemetry["energy_j"], rel=1e-3)
        assert len(series["gpu"]["values"]["power_w"]) == len(series["gpu"]["t_s"])
