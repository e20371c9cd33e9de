"""--perf-calibrate's budgets: derived from the runs and their spread, keyed to the engine build and the hardware
class, appended to the user's file without touching what it holds; the budgets then judge runs like those."""

from __future__ import annotations

from pytest_triton_llm.perf.budgets import find_budget, load_budgets
from pytest_triton_llm.perf.calibrate import MIN_MARGIN, calibrate, prediction_factor
from pytest_triton_llm.perf.metrics import V1_PERF


def point(rates, p99s, ttfts, **extra) -> dict:
    runs = [
        {"output_tokens_per_s": r, "latency_ms": {"p99": p}, "ttft_ms": {"p99": t}}
        for r, p, t in zip(rates, p99s, ttfts, strict=True)
    ]
    keys = {"hardware_class": "h200", "image": "26.07-trtllm-python-py3", "workload": "default", "engine_digest": "d1"}
    return {**runs[0], "runs": runs, "errors": 0, **keys, **extra}


def document(**points) -> dict:
    return {"deployments": {"llama:inflight": {"metrics": {"perf": points}}}}


def test_limits_lie_beyond_the_worst_run_by_the_larger_of_10_percent_and_a_99_percent_prediction_of_one_more_run(tmp_path):
    budgets = tmp_path / "b.toml"
    steady = point([1000, 1010, 990], [200, 202, 198], [50, 50.5, 49.5])  # cv 1%: 8.04 spreads are 8%, the 10% floor decides
    noisy = point([1000, 800, 1200], [200, 200, 200], [50, 50, 50])  # cv 20%: 8.04 spreads for 3 runs, 161%
    done, skipped = calibrate(budgets, document(**{"concurrency=1": steady, "concurrency=8": noisy}), "2026-11-29")
    assert (done, skipped) == (["llama:inflight concurrency=1", "llama:inflight concurrency=8"], [])
    one, eight = load_budgets(budgets)
    assert (one.min_output_tokens_per_s, one.max_latency_p99_ms, one.max_ttft_p99_ms) == (
        round(990 / (1 + MIN_MARGIN), 1),
        round(202 * (1 + MIN_MARGIN)),
        round(50.5 * (1 + MIN_MARGIN)),
    )
    assert round(prediction_factor(3), 2) == 8.04 and round(prediction_factor(20), 2) == 2.6
    assert eight.min_output_tokens_per_s == round(800 / (1 + prediction_factor(3) * 0.2), 1)
    keys = (one.engine, one.deployment, one.hardware, one.image, one.load_point, one.workload, one.engine_digest)
    assert keys == ("llama", "inflight", "h200", "26.07-trtllm-python-py3", "concurrency=1", "default", "d1")
    identity = dict(engine="llama", deployment="inflight", hardware="NVIDIA H200", hardware_class="h200")
    identity.update(image="26.07-trtllm-python-py3", load_point="concurrency=1", workload="default")
    assert find_budget([one, eight], **identity, engine_digest="d1") is one
    assert find_budget([one, eight], **identity, engine_digest="rebuilt") is None  # another build is not judged by it


def test_a_second_calibration_keeps_every_entry_the_file_holds(tmp_path):
    budgets = tmp_path / "b.toml"
    budgets.write_text('# mine\n[[budget]]\nengine = "other"\nmin_output_tokens_per_s = 1\n')
    steady = point([1000, 1010, 990], [200, 202, 198], [50, 51, 49])
    calibrate(budgets, document(**{"concurrency=1": steady}), "2026-11-29")
    first = budgets.read_text()
    done, [why] = calibrate(budgets, document(**{"concurrency=1": point([1, 1, 1], [9, 9, 9], [9, 9, 9])}), "2026-11-30")
    assert done == [] and "already holds a budget with these keys; it is kept as it is" in why
    assert budgets.read_text() == first and first.startswith('# mine\n[[budget]]\nengine = "other"\n')


def test_failed_requests_calibrate_nothing_and_a_v1_load_point_is_calibrated_under_its_own_keys(tmp_path):
    budgets = tmp_path / "b.toml"
    broken = point([1000, 1010, 990], [200, 202, 198], [50, 51, 49], errors=2)
    v1 = point([60, 61, 59], [900, 910, 890], [40, 41, 39], engine="smollm2-135m", deployment="openai:llama-cpp-python")
    doc = {**document(**{"concurrency=1": broken}), V1_PERF: {"concurrency=4": v1}}
    done, [why] = calibrate(budgets, doc, "2026-11-29")
    assert done == ["smollm2-135m:openai:llama-cpp-python concurrency=4"] and "2 requests failed" in why
    [entry] = load_budgets(budgets)
    assert (entry.engine, entry.deployment, entry.load_point) == ("smollm2-135m", "openai:llama-cpp-python", "concurrency=4")
