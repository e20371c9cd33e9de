import json
import os
import stat
import sys
import time
import types

import pytest

from pytest_triton_llm.triton.load import RequestRecord
from pytest_triton_llm.perf import monitor as mon
from pytest_triton_llm.perf import telemetry as tel
from pytest_triton_llm.perf.monitor import (
    ACTIVE,
    ITERATIONS,
    KV_FREE,
    KV_MAX,
    KV_USED,
    PENDING,
    LoadPointMonitor,
    Sampler,
    Samples,
    ScrapeFailed,
    counter_keys,
    interval_rates,
    kv_utilisation,
    page_values,
    queue_share,
    server_summary,
)
from pytest_triton_llm.perf.publish import publish
from pytest_triton_llm.perf.series import take_series
from pytest_triton_llm.perf.series_plot import plot_series
from pytest_triton_llm.common.progress import Progress
from pytest_triton_llm.triton.server_metrics import trtllm_gauges
from pytest_triton_llm.common.usage import OptionError

from .test_perf import perf_options

# tensorrtllm_backend README.md, "Triton Metrics" (what `curl localhost:8002/metrics` prints for an inflight batcher
# model), its nv_trt_llm_* block and, from the same section, the nv_inference_* families Triton publishes per model
# (their HELP lines left out)
UPSTREAM_PAGE = """\
# HELP nv_trt_llm_request_metrics TRT LLM request metrics
# TYPE nv_trt_llm_request_metrics gauge
nv_trt_llm_request_metrics{model="tensorrt_llm",request_type="context",version="1"} 1
nv_trt_llm_request_metrics{model="tensorrt_llm",request_type="scheduled",version="1"} 1
nv_trt_llm_request_metrics{model="tensorrt_llm",request_type="max",version="1"} 512
nv_trt_llm_request_metrics{model="tensorrt_llm",request_type="active",version="1"} 0
# HELP nv_trt_llm_runtime_memory_metrics TRT LLM runtime memory metrics
# TYPE nv_trt_llm_runtime_memory_metrics gauge
nv_trt_llm_runtime_memory_metrics{memory_type="pinned",model="tensorrt_llm",version="1"} 0
nv_trt_llm_runtime_memory_metrics{memory_type="gpu",model="tensorrt_llm",version="1"} 1610236
nv_trt_llm_runtime_memory_metrics{memory_type="cpu",model="tensorrt_llm",version="1"} 0
# HELP nv_trt_llm_kv_cache_block_metrics TRT LLM KV cache block metrics
# TYPE nv_trt_llm_kv_cache_block_metrics gauge
nv_trt_llm_kv_cache_block_metrics{kv_cache_block_type="tokens_per",model="tensorrt_llm",version="1"} 64
nv_trt_llm_kv_cache_block_metrics{kv_cache_block_type="used",model="tensorrt_llm",version="1"} 1
nv_trt_llm_kv_cache_block_metrics{kv_cache_block_type="free",model="tensorrt_llm",version="1"} 6239
nv_trt_llm_kv_cache_block_metrics{kv_cache_block_type="max",model="tensorrt_llm",version="1"} 6239
# HELP nv_trt_llm_inflight_batcher_metrics TRT LLM inflight_batcher-specific metrics
# TYPE nv_trt_llm_inflight_batcher_metrics gauge
nv_trt_llm_inflight_batcher_metrics{inflight_batcher_specific_metric="micro_batch_id",model="tensorrt_llm",version="1"} 0
nv_trt_llm_inflight_batcher_metrics{inflight_batcher_specific_metric="generation_requests",model="tensorrt_llm",version="1"} 0
nv_trt_llm_inflight_batcher_metrics{inflight_batcher_specific_metric="total_context_tokens",model="tensorrt_llm",version="1"} 0
# HELP nv_trt_llm_general_metrics General TRT LLM metrics
# TYPE nv_trt_llm_general_metrics gauge
nv_trt_llm_general_metrics{general_type="iteration_counter",model="tensorrt_llm",version="1"} 0
nv_trt_llm_general_metrics{general_type="timestamp",model="tensorrt_llm",version="1"} 1700074049
# TYPE nv_inference_request_success counter
nv_inference_request_success{model="tensorrt_llm",version="1"} 0
# TYPE nv_inference_queue_duration_us counter
nv_inference_queue_duration_us{model="tensorrt_llm",version="1"} 0
# TYPE nv_inference_compute_infer_duration_us counter
nv_inference_compute_infer_duration_us{model="tensorrt_llm",version="1"} 0
# TYPE nv_inference_pending_request_count gauge
nv_inference_pending_request_count{model="tensorrt_llm",version="1"} 0
"""

# What the embedded Triton 2.51.0 (nvidia-pytriton 0.7.0) adds on the same page (captured here, 2026-11-26): request
# failures labelled by reason, other models, and server-wide families without a model label
EMBEDDED_EXTRA = """\
# TYPE nv_inference_request_failure counter
nv_inference_request_failure{model="tensorrt_llm",reason="REJECTED",version="1"} 2
nv_inference_request_failure{model="ensemble",reason="REJECTED",version="1"} 5
nv_inference_pending_request_count{model="ensemble",version="1"} 7
# TYPE nv_pinned_memory_pool_used_bytes gauge
nv_pinned_memory_pool_used_bytes 0
"""

WINDOW = (10.0, 12.0)


def page(queue=0, infer=0, active=0, used=0, free=100, iterations=0, pending=0) -> dict:
    """A scrape's values (page_values' keys), Triton's durations in microseconds."""
    return {
        "nv_inference_queue_duration_us": queue,
        "nv_inference_compute_input_duration_us": 0,
        "nv_inference_compute_infer_duration_us": infer,
        "nv_inference_compute_output_duration_us": 0,
        PENDING: pending,
        ACTIVE: active,
        KV_USED: used,
        KV_FREE: free,
        ITERATIONS: iterations,
    }


def test_upstreams_trtllm_gauges_parse_as_before_the_shared_parser():
    gauges = trtllm_gauges(UPSTREAM_PAGE + EMBEDDED_EXTRA)
    assert gauges[("nv_trt_llm_request_metrics", "max")] == 512
    assert gauges[("nv_trt_llm_kv_cache_block_metrics", "free")] == 6239
    assert gauges[("nv_trt_llm_general_metrics", "timestamp")] == 1700074049
    assert len(gauges) == 16 and all(family.startswith("nv_trt_llm_") for family, _ in gauges)
    assert trtllm_gauges(UPSTREAM_PAGE, model="ensemble") == {}


def test_a_page_gives_every_nv_inference_and_nv_trt_llm_series_of_the_watched_model():
    values = page_values(UPSTREAM_PAGE + EMBEDDED_EXTRA, "tensorrt_llm")
    assert len(values) == 16 + 4 + 1  # nv_trt_llm_*, nv_inference_* and the failure of one reason
    assert values[KV_MAX] == 6239 and values['nv_trt_llm_request_metrics{request_type="max"}'] == 512
    assert values['nv_inference_request_failure{reason="REJECTED"}'] == 2  # the ensemble's 5 is another model's
    assert values[PENDING] == 0  # the ensemble's 7 is not this model's
    assert "nv_pinned_memory_pool_used_bytes" not in values
    counters = counter_keys(UPSTREAM_PAGE + EMBEDDED_EXTRA, values)
    assert counters == {
        "nv_inference_request_success",
        "nv_inference_queue_duration_us",
        "nv_inference_compute_infer_duration_us",
        'nv_inference_request_failure{reason="REJECTED"}',
    }


def test_a_sample_with_a_timestamp_is_read_without_it():
    text = 'nv_inference_pending_request_count{model="m",version="1"} 3 1700000000000\n'
    assert page_values(text, "m") == {PENDING: 3.0}


def test_counters_become_per_second_rates_and_a_reset_is_no_rate():
    times = [0.0, 0.5, 1.0, 1.5]
    rows = [{"c": 0}, {"c": 100}, {"c": 400}, {"c": 50}]  # the server restarted before the last scrape
    assert interval_rates(times, rows, {"c"}) == {"c": [None, 200.0, 600.0, None]}
    assert interval_rates(times, [{}, {"c": 1}, {"c": 2}, {"c": 3}], {"c"}) == {"c": [None, None, 2.0, 2.0]}


def test_queue_share_is_queue_time_over_queue_and_compute_time_between_two_pages():
    assert queue_share(page(queue=1000, infer=1000), page(queue=4000, infer=10000)) == 3000 / (3000 + 9000)
    assert queue_share(page(queue=5, infer=5), page(queue=5, infer=5)) is None  # no request finished between them
    assert queue_share({}, page()) is None  # a server without the durations


def test_kv_utilisation_is_used_over_used_and_free_blocks():
    assert kv_utilisation({KV_USED: 25, KV_FREE: 75, KV_MAX: 1000}) == 0.25
    assert kv_utilisation({KV_USED: 25, KV_MAX: 50}) == 0.5  # no free gauge published
    assert kv_utilisation({KV_FREE: 75}) is None


def test_the_summary_reads_gauges_inside_the_window_and_counters_between_the_samples_that_bracket_it():
    sampled = Samples(
        times=[9.8, 10.2, 11.0, 11.8, 12.1],
        values=[
            page(queue=0, infer=0, active=9, used=90, free=10, iterations=5),  # before the window: its gauges do not count
            page(queue=100, infer=100, active=2, used=10, free=90, iterations=10, pending=1),
            page(queue=300, infer=500, active=4, used=30, free=70, iterations=30),
            page(queue=600, infer=1200, active=6, used=50, free=50, iterations=50, pending=3),
            page(queue=900, infer=2100, active=0, used=0, free=100, iterations=60),
        ],
        failures=[(9.0, "URLError: refused"), (10.5, "URLError: timed out"), (11.5, "URLError: timed out")],
    )
    summary = server_summary(sampled, *WINDOW, interval_ms=250)
    assert summary == {
        "interval_ms": 250,
        "samples": 3,
        "failed_scrapes": 2,  # the one before the window is not this load point's
        "scrape_errors": ["URLError: timed out"],
        "active_requests": {"mean": 4.0, "max": 6.0},
        "scheduled_requests": None,  # not on these pages
        "pending_requests": {"mean": round(4 / 3, 3), "max": 3.0},
        "kv_cache_utilisation": {"mean": 0.3, "max": 0.5},
        "queue_share": round(900 / 3000, 4),
        "iterations": 55,
        "iterations_per_s": round(55 / 2.3, 2),
        "missing": [],
    }


def test_a_server_without_the_trtllm_families_says_which_are_missing():
    rows = [{"nv_inference_queue_duration_us": 0}, {"nv_inference_queue_duration_us": 5}]
    summary = server_summary(Samples([9.0, 13.0], rows), *WINDOW, interval_ms=250)
    assert summary["active_requests"] is None and summary["kv_cache_utilisation"] is None and summary["samples"] == 0
    assert summary["queue_share"] is None and summary["iterations"] is None
    assert summary["missing"] == [ACTIVE, KV_USED, PENDING, ITERATIONS]


def test_a_sampler_reads_at_start_while_running_and_at_the_end_and_keeps_failed_reads():
    calls = []

    def read():
        calls.append(1)
        if len(calls) == 2:
            raise ConnectionError("refused")
        return len(calls)

    with Sampler(read, 0.01) as sampler:
        time.sleep(0.1)
    assert len(calls) >= 3
    assert sampler.samples.values == [n for n in range(1, len(calls) + 1) if n != 2]
    assert [error for _, error in sampler.samples.failures] == ["ConnectionError: refused"]
    assert sampler.samples.times == sorted(sampler.samples.times)


# what `nvidia-smi --query-gpu=<fields> --format=csv,noheader,nounits --id=0` prints on an H200 (driver 580.159.04,
# read on the device host 2026-11-26: "80.52, 0, 0, 345" idle); an older driver rejects power.draw.instant as this does
FAKE_SMI = """#!/usr/bin/env python3
import sys
query = next(a for a in sys.argv if a.startswith("--query-gpu=")).split("=", 1)[1].split(",")
if "power.draw.instant" in query and OLD_DRIVER:
    print('Field "power.draw.instant" is not a valid field to query.')
    sys.exit(2)
row = {"power.draw.instant": "312.50", "power.draw": "300.00", "memory.used": "70123", "utilization.gpu": "87",
       "clocks.sm": "[N/A]"}
print(", ".join(row[f] for f in query))
"""


@pytest.fixture(params=[False, True], ids=["driver-580", "older-driver"])
def fake_smi(request, tmp_path, monkeypatch):
    smi = tmp_path / "nvidia-smi"
    smi.write_text(FAKE_SMI.replace("/usr/bin/env python3", sys.executable).replace("OLD_DRIVER", str(request.param)))
    smi.chmod(smi.stat().st_mode | stat.S_IXUSR)
    monkeypatch.setenv("PATH", f"{tmp_path}{os.pathsep}{os.environ['PATH']}")
    monkeypatch.setattr(tel, "_pynvml", lambda: None)  # nvidia-smi is the reader under test, pynvml or not
    return request.param


def test_nvidia_smi_rows_parse_and_not_reported_is_none_never_zero():
    assert tel.parse_smi_row("80.52, 0, 0, 345") == {
        "power_w": 80.52,
        "memory_used_mib": 0,
        "gpu_util_pct": 0,
        "sm_clock_mhz": 345,
    }
    assert tel.parse_smi_row("[N/A], 1024, [Not Supported], 1980")["power_w"] is None
    with pytest.raises(ValueError, match="not 4 fields"):
        tel.parse_smi_row("80.52, 0")
    with pytest.raises(ValueError, match="'W' where a number belongs"):
        tel.parse_smi_row("80.52, 0, 0, W")


def test_the_gpu_that_serves_is_read_through_nvidia_smi(fake_smi):
    reader = tel.gpu_source({"index": 0, "name": "NVIDIA H200"})
    assert reader() == {
        "power_w": 300.0 if fake_smi else 312.5,
        "memory_used_mib": 70123.0,
        "gpu_util_pct": 87.0,
        "sm_clock_mhz": None,
    }
    assert reader.name == ("nvidia-smi (power.draw: 1 s averages)" if fake_smi else "nvidia-smi")


def test_without_a_gpu_telemetry_is_absent_and_says_why(tmp_path, monkeypatch):
    with pytest.raises(tel.TelemetryUnavailable, match=r"^no GPU serves \(hardware: cpu\)$"):
        tel.gpu_source(None)
    assert tel.served_gpu({"hardware": "cpu", "gpu": None}) == (None, "no GPU serves (hardware: cpu)")
    remote = {"hardware": "remote (not known from here)", "gpu": None}
    assert tel.served_gpu(remote) == (None, "no GPU of this host serves (hardware: remote (not known from here))")
    monkeypatch.setenv("PATH", str(tmp_path))
    monkeypatch.setattr(tel, "_pynvml", lambda: None)
    with pytest.raises(tel.TelemetryUnavailable, match="GPU 0 .NVIDIA H200. serves, but neither pynvml nor nvidia-smi"):
        tel.gpu_source({"index": 0, "name": "NVIDIA H200"})


def test_energy_integrates_power_over_the_load_point_and_gives_tokens_per_joule():
    times = [9.9, 10.5, 11.5, 12.2]
    readings = [{"power_w": w, "memory_used_mib": 1000.0} for w in (100.0, 100.0, 300.0, 300.0)]
    # 100 W to 10.5 s, a ramp to 300 W at 11.5 s, then 300 W: 50 + 200 + 150 J over [10, 12]
    assert tel.integral(times, [r["power_w"] for r in readings], *WINDOW) == pytest.approx(400.0)
    summary = tel.gpu_summary(times, readings, *WINDOW, output_tokens=1000)
    assert summary == {
        "samples": 2,
        "power_w": {"mean": 200.0, "max": 300.0},
        "memory_used_mib": {"mean": 1000.0, "max": 1000.0},
        "gpu_util_pct": None,
        "sm_clock_mhz": None,
        "energy_j": 400.0,
        "energy_method": "power samples integrated (trapezoids)",
        "tokens_per_joule": 2.5,
    }


def test_samples_that_do_not_cover_the_load_point_give_no_energy_rather_than_a_part():
    readings = [{"power_w": 100.0}, {"power_w": 100.0}]
    summary = tel.gpu_summary([10.5, 11.5], readings, *WINDOW, output_tokens=10)
    assert summary["energy_j"] is None and summary["tokens_per_joule"] is None
    assert summary["energy_missing"] == "the power samples do not cover the load point"


def test_nvmls_energy_counter_measures_the_energy_where_the_gpu_has_one():
    readings = [{"power_w": 1.0, "energy_mj": mj} for mj in (0.0, 100_000.0, 300_000.0)]
    joules, method = tel.energy_j([9.0, 11.0, 13.0], readings, *WINDOW)
    assert (joules, method) == (pytest.approx(150.0), "NVML total energy counter")  # 50 J/s to 11 s, then 100 J/s


def fake_pynvml(energy=True):
    """pynvml's calls that NvmlSource makes, answering as an H200 would (mW, bytes, %, MHz, mJ)."""
    nvml = types.SimpleNamespace(NVML_CLOCK_SM=1, NVMLError=RuntimeError, NVMLError_NotSupported=NotImplementedError)
    state = {"mj": 1_000_000.0, "shut": False}

    def energy_counter(handle):
        if not energy:
            raise RuntimeError("not supported")
        state["mj"] += 500.0
        return state["mj"]

    nvml.nvmlInit = lambda: None
    nvml.nvmlShutdown = lambda: state.update(shut=True)
    nvml.nvmlDeviceGetHandleByIndex = lambda index: f"gpu{index}"
    nvml.nvmlDeviceGetPowerUsage = lambda handle: 412_345
    nvml.nvmlDeviceGetMemoryInfo = lambda handle: types.SimpleNamespace(used=2 * 2**30)
    nvml.nvmlDeviceGetUtilizationRates = lambda handle: types.SimpleNamespace(gpu=93)
    nvml.nvmlDeviceGetClockInfo = lambda handle, clock: 1980
    nvml.nvmlDeviceGetTotalEnergyConsumption = energy_counter
    return nvml, state


def test_nvml_is_the_reader_where_pynvml_imports(monkeypatch):
    nvml, state = fake_pynvml()
    monkeypatch.setattr(tel, "_pynvml", lambda: nvml)
    reader = tel.gpu_source({"index": 1, "name": "NVIDIA H200"})
    assert reader.name == "nvml" and reader.handle == "gpu1"
    assert reader() == {
        "power_w": 412.345,
        "memory_used_mib": 2048.0,
        "gpu_util_pct": 93.0,
        "sm_clock_mhz": 1980.0,
        "energy_mj": 1_001_000.0,
    }
    reader.close()
    assert state["shut"]
    without, _ = fake_pynvml(energy=False)
    assert "energy_mj" not in tel.NvmlSource(0, without)()


def fetcher(pages: list[str]):
    """A metrics endpoint whose counters grow by a page per scrape; the second scrape fails."""
    calls = []

    def fetch() -> str:
        calls.append(1)
        if len(calls) == 2:
            raise TimeoutError("timed out")
        n = len(calls)
        return pages[0].replace("QUEUE", str(100 * n)).replace("INFER", str(300 * n))

    fetch.calls = calls  # type: ignore[attr-defined]
    return fetch


MONITORED_PAGE = """\
# TYPE nv_inference_queue_duration_us counter
nv_inference_queue_duration_us{model="tensorrt_llm",version="1"} QUEUE
# TYPE nv_inference_compute_input_duration_us counter
nv_inference_compute_input_duration_us{model="tensorrt_llm",version="1"} 0
# TYPE nv_inference_compute_infer_duration_us counter
nv_inference_compute_infer_duration_us{model="tensorrt_llm",version="1"} INFER
# TYPE nv_inference_compute_output_duration_us counter
nv_inference_compute_output_duration_us{model="tensorrt_llm",version="1"} 0
nv_trt_llm_request_metrics{model="tensorrt_llm",request_type="active",version="1"} 3
nv_trt_llm_kv_cache_block_metrics{kv_cache_block_type="used",model="tensorrt_llm",version="1"} 16
nv_trt_llm_kv_cache_block_metrics{kv_cache_block_type="free",model="tensorrt_llm",version="1"} 48
"""


def monitored_run(interval_ms, gpu, reader=None, no_gpu=""):
    """A load point of about 0.12 s under the monitor; with sampling on it lasts until the monitor has scraped 3
    times (the second fails), however late a busy machine runs its thread (CI's gpu-extra run once got one scrape)."""
    fetch = fetcher([MONITORED_PAGE])
    watch = LoadPointMonitor(fetch, "tensorrt_llm", interval_ms, gpu, no_gpu, gpu_reader=reader)
    with watch:
        sent = time.perf_counter()
        time.sleep(0.12)
        deadline = time.monotonic() + 30
        while interval_ms and len(fetch.calls) < 3 and time.monotonic() < deadline:
            time.sleep(0.01)
        done = time.perf_counter()
    record = RequestRecord(0, sent=sent, token_times=[done], tokens=60, done=done, streamed=True)
    return watch, done - sent, [record]


def test_a_monitored_load_point_gets_server_figures_gpu_energy_and_its_series():
    def reader():
        return {"power_w": 250.0, "memory_used_mib": 1.0, "gpu_util_pct": 50.0, "sm_clock_mhz": 1980.0}

    reader.name = "fake"  # type: ignore[attr-defined]
    with pytest.warns(ScrapeFailed, match=r"^tensorrt_llm: 1 failed metrics scrapes \(see server_metrics"):
        watch, seconds, records = monitored_run(10, {"index": 0, "name": "NVIDIA H200"}, reader)
        summary = watch.attach({"output_tokens": 60}, records)
    server = summary["server_metrics"]
    assert server["model"] == "tensorrt_llm" and server["failed_scrapes"] == 1
    assert server["scrape_errors"] == ["TimeoutError: timed out"]
    assert server["active_requests"] == {"mean": 3.0, "max": 3.0}
    assert server["kv_cache_utilisation"] == {"mean": 0.25, "max": 0.25}
    assert server["queue_share"] == 0.25  # 100 us queued per 300 us computed, scrape after scrape
    gpu = summary["gpu_telemetry"]
    assert gpu["gpu"] == 0 and gpu["source"] == "fake" and gpu["failed_samples"] == 0
    assert gpu["energy_j"] == pytest.approx(250.0 * seconds, abs=1e-3)
    assert gpu["tokens_per_joule"] == pytest.approx(60 / (250.0 * seconds), rel=1e-3)
    series = watch.series
    assert series["window_s"] == [0.0, round(seconds, 4)] and series["model"] == "tensorrt_llm"
    assert series["server"]["t_s"][0] < 0 < series["server"]["t_s"][-1]  # the first scrape precedes the first request
    assert set(series["server"]["values"][ACTIVE]) == {3.0}
    assert set(series["server"]["rates_per_s"]) == {
        "nv_inference_queue_duration_us",
        "nv_inference_compute_input_duration_us",
        "nv_inference_compute_infer_duration_us",
        "nv_inference_compute_output_duration_us",
    }
    assert series["server"]["failed"][0]["error"] == "TimeoutError: timed out"
    assert series["gpu"]["values"]["power_w"] == [250.0] * len(series["gpu"]["t_s"])
    json.dumps(series)  # the side file takes it as it is


def test_without_a_gpu_the_load_point_says_why_and_carries_no_gpu_figures():
    with pytest.warns(ScrapeFailed):
        watch, _, records = monitored_run(10, None, no_gpu="no GPU serves (hardware: cpu)")
        summary = watch.attach({"output_tokens": 60}, records)
    assert summary["gpu_telemetry"] == {"absent": "no GPU serves (hardware: cpu)"}
    assert "gpu" not in watch.series and summary["server_metrics"]["samples"] >= 1


def test_scrape_ms_0_reads_nothing_and_says_so():
    watch, _, records = monitored_run(0, {"index": 0, "name": "NVIDIA H200"})
    summary = watch.attach({"output_tokens": 60}, records)
    assert summary["server_metrics"] == {"absent": "off (--perf-scrape-ms 0)"}
    assert summary["gpu_telemetry"] == {"absent": "off (--perf-scrape-ms 0)"}
    assert watch.series == {}


def test_perf_scrape_ms_defaults_to_250_and_refuses_a_negative_interval():
    assert perf_options().scrape_ms == 250
    assert perf_options(perf_scrape_ms=0).scrape_ms == 0
    with pytest.raises(OptionError, match=r"^--perf-scrape-ms must be >= 0 \(0: no sampling\), got -5$"):
        perf_options(perf_scrape_ms=-5)


def series_of(seconds: float, gpu: bool) -> dict:
    t = [-0.1, 0.0, 0.25, 0.5, seconds]
    series = {
        "window_s": [0.0, seconds],
        "interval_ms": 250,
        "model": "tensorrt_llm",
        "server": {
            "t_s": t,
            "values": {ACTIVE: [0, 2, 4, 4, 1], PENDING: [0, 0, 1, 0, 0]},
            "rates_per_s": {},
            "queue_share": [None, 0.1, 0.2, None, 0.3],
            "kv_cache_utilisation": [0.0, 0.1, 0.2, 0.2, 0.05],
            "failed": [],
        },
    }
    if gpu:
        series["gpu"] = {"index": 0, "source": "nvidia-smi", "t_s": t, "values": {"power_w": [80, 300, 420, 430, 200]}}
    return series


def test_publish_moves_the_series_to_a_side_file_that_the_entries_name_and_plots_them(tmp_path):
    pytest.importorskip("matplotlib", reason="the reference extra (matplotlib) is not installed")
    point = {"output_tokens_per_s": 10.0, "latency_ms": {"p50": 100.0, "p99": 150.0}, "requests": 4}
    results = {
        "e:inflight": {"concurrency=1": dict(point, series=[series_of(0.8, gpu=True)])},
        "e:v1": {"concurrency=1": dict(point, series=[series_of(0.6, False), series_of(0.7, False)])},
    }
    report = tmp_path / "out" / "r.json"
    plots = publish(results, {}, str(tmp_path / "base.json"), str(report), Progress(lambda line: None))
    assert plots == [
        str(tmp_path / "out" / "r.perf.png"),
        str(tmp_path / "out" / "r.series-e_inflight.png"),
        str(tmp_path / "out" / "r.series-e_v1.png"),
    ]
    assert all(open(p, "rb").read(8) == b"\x89PNG\r\n\x1a\n" for p in plots)
    side = json.loads((tmp_path / "out" / "r.series.json").read_text())
    assert side["deployments"]["e:v1"]["concurrency=1"][1]["window_s"] == [0.0, 0.7]
    assert results["e:inflight"]["concurrency=1"]["series_file"] == str(tmp_path / "out" / "r.series.json")
    assert "series" not in results["e:v1"]["concurrency=1"]
    assert "series" not in (tmp_path / "base.json").read_text()  # the baseline keeps figures, not time series


def test_a_v1_only_run_is_drawn_and_its_perf_save_says_why_no_baseline_was_written(tmp_path):
    pytest.importorskip("matplotlib", reason="the reference extra (matplotlib) is not installed")
    point = {"output_tokens_per_s": 40.0, "latency_ms": {"p50": 700.0, "p99": 800.0}, "requests": 12}
    said = []
    v1 = {"openai http://127.0.0.1:8000/v1": {"concurrency=1": point}}
    report, base = tmp_path / "r.json", tmp_path / "base.json"
    plots = publish({}, {}, str(base), str(report), Progress(said.append), v1=v1)
    assert plots == [str(tmp_path / "r.perf.png")] and not base.exists()
    assert said == [
        f"[triton-llm] perf: {base} not written: --perf-save keeps Triton deployments' load points, and this run measured "
        "/v1 only"
    ]


def test_the_series_plot_skips_deployments_without_a_measured_window(tmp_path):
    pytest.importorskip("matplotlib", reason="the reference extra (matplotlib) is not installed")
    assert plot_series({"e:v1": {"concurrency=1": [dict(series_of(1.0, False), window_s=None)]}}, {}, tmp_path / "r.json") == []
    assert take_series({"e:v1": {"c": {"series": []}}}) == {}


def test_monitor_load_watches_the_deployments_core_model_on_the_reports_gpu():
    client = types.SimpleNamespace(endpoints=None, core_model="tensorrt_llm")
    served = types.SimpleNamespace(client=client)
    watch = mon.monitor_load(served, 250, {"hardware": "NVIDIA H200", "gpu": {"index": 3, "name": "NVIDIA H200"}})
    assert (watch.model, watch.interval_ms, watch.gpu) == ("tensorrt_llm", 250, {"index": 3, "name": "NVIDIA H200"})
    watch = mon.monitor_load(served, 250, {"hardware": "cpu", "gpu": None})
    assert (watch.gpu, watch.no_gpu) == (None, "no GPU serves (hardware: cpu)")


@pytest.fixture
def metrics_endpoint():
    """A metrics endpoint on loopback: Triton's page, except that its third answer is a 503."""
    import http.server
    import threading

    from pytest_triton_llm.host.endpoints import Endpoints

    answers = []

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_GET(self):
            answers.append(self.path)
            status, body = (503, b"busy") if len(answers) == 3 else (200, UPSTREAM_PAGE.encode())
            self.send_response(status)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args):  # quiet
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield Endpoints("unused:1", "unused:2", f"127.0.0.1:{server.server_address[1]}"), answers
    server.shutdown()


def test_monitor_load_scrapes_the_servers_metrics_endpoint_and_counts_an_error_answer(metrics_endpoint):
    endpoints, answers = metrics_endpoint
    served = types.SimpleNamespace(client=types.SimpleNamespace(endpoints=endpoints, core_model="tensorrt_llm"))
    with mon.monitor_load(served, 20, {"hardware": "cpu", "gpu": None}) as watch:
        sent = time.perf_counter()
        time.sleep(0.2)
        done = time.perf_counter()
    assert set(answers) == {"/metrics"} and len(answers) >= 4
    with pytest.warns(ScrapeFailed, match="1 failed metrics scrapes"):
        summary = watch.attach({"output_tokens": 1}, [RequestRecord(0, sent=sent, tokens=1, done=done)])
    assert summary["server_metrics"]["scrape_errors"] == ["HTTPError: HTTP Error 503: Service Unavailable"]
    assert summary["server_metrics"]["failed_scrapes"] == 1
    assert summary["server_metrics"]["kv_cache_utilisation"] == {"mean": round(1 / 6240, 3), "max": round(1 / 6240, 3)}
