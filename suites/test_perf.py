"""Throughput and latency per deployment and load point, with budgets and baselines.

The workload (fixtures/perf_workloads.toml, --perf-workload) sends synthetic token ids straight
to tensorrt_llm, as upstream's benchmark_core_model does (an llmapi deployment's tensorrt_llm takes them as text, and
its output lengths are the model's own: it has no min_tokens input), from an asyncio load generator: gRPC
streams (token by token on decoupled deployments, so TTFT and ITL are measured), closed-loop
concurrency points and open-loop Poisson rates. Each load point is recorded in the report
(metrics.perf), as JUnit properties, checked against the budgets (fixtures/perf_budgets.toml, or
--perf-budgets) for this hardware and image, and against --perf-compare's baseline with --perf-compare-fail
rules. The terminal summary says per load point whether it was judged, by which budget, on which hardware.
"""

from __future__ import annotations

import pytest

from pytest_triton_llm.load import Target, run_load
from pytest_triton_llm.perf.budgets import find_budget
from pytest_triton_llm.perf.metrics import summarize
from pytest_triton_llm.perf.workload import encode, synthetic_requests
from pytest_triton_llm.terminal import table

pytestmark = pytest.mark.perf


def test_load_point(triton_llm, load_point, perf_workload, perf_budgets, triton_llm_report, triton_llm_perf_options,
                    record_property, triton_llm_progress):  # fmt: skip
    point_name, point = load_point
    workload_name, workload = perf_workload
    engine = triton_llm.ref.engine
    vocab = range(100, triton_llm.tokenizer.vocab_size)  # clear of the special tokens at the start
    requests = synthetic_requests(workload, workload.requests, vocab, engine.max_input_len, engine.max_output_len)
    warmup = synthetic_requests(workload, workload.warmup, vocab, engine.max_input_len, engine.max_output_len, seed_offset=1)
    streaming = triton_llm.client.decoupled  # token by token wherever the model can
    target = Target(triton_llm.server.endpoints)
    with triton_llm_progress.step(f"perf: {triton_llm.id} {point_name} ({len(requests)} requests, workload {workload_name})"):
        records, seconds = run_load(target, encode(requests, triton_llm.client, workload.fixed_output, streaming),
                                    encode(warmup, triton_llm.client, workload.fixed_output, streaming), seed=workload.seed,
                                    **point)  # fmt: skip
    result = summarize(records, seconds)
    # budgets are keyed by what actually served: the image (or "local") and the hardware it ran on
    identity = dict(engine=triton_llm.ref.engine_name, deployment=triton_llm.ref.name, hardware=triton_llm.hardware,
                    image=triton_llm.image, load_point=point_name)  # fmt: skip
    budgets_file, budgets = perf_budgets
    # recorded before the asserts, so that a failed load point still says where it ran and which budgets applied
    result.update(load_point=point_name, workload=workload_name, streamed=streaming, hardware=identity["hardware"],
                  image=identity["image"], budget_file=str(budgets_file))  # fmt: skip
    triton_llm_report.record_perf(triton_llm.id, point_name, result)
    for key in ("throughput_rps", "output_tokens_per_s"):
        record_property(f"perf.{point_name}.{key}", result[key])
    for key in ("latency_ms", "ttft_ms", "itl_ms"):
        if result[key]:
            record_property(f"perf.{point_name}.{key}.p99", result[key]["p99"])

    assert result["errors"] == 0, f"{result['errors']} requests failed: {result['error_samples']}"
    fixed_output = workload.fixed_output and not triton_llm.client.speaks_llmapi
    result["fixed_output"] = fixed_output  # false: output lengths as the model ended them
    if fixed_output:
        assert result["output_tokens"] == sum(r.max_tokens for r in requests), "requests did not yield their fixed lengths"
    if streaming:
        assert result["ttft_ms"] and result["itl_ms"], "a streaming deployment must give TTFT and inter-token latency"

    budget = find_budget(budgets, **identity)
    problems = []
    result["judged"], result["budget_match"] = budget is not None, None
    if budget is not None:
        result["budget_match"] = budget.match(next(i for i, b in enumerate(budgets, 1) if b is budget))
        rows = budget.check(result)
        result["budget"] = {r[0]: r[3] for r in rows}
        if any(r[3] == "MISSED" for r in rows):
            problems.append("missed its budget:\n" + "\n".join(table(["limit", "measured", "budget", ""], rows)))
    else:
        result["budget"] = f"none for hardware {identity['hardware']}, image {identity['image']}: measured, not judged"

    options = triton_llm_perf_options
    if options.compare:
        before = options.baseline_point(triton_llm.id, point_name)
        if before is None:
            problems.append(f"{options.compare} has no {point_name} for {triton_llm.id}")
        else:
            regressions = [r for rule in options.fail_rules if (r := rule.regression(before, result))]
            result["regressions"] = regressions
            problems += [f"regression at {point_name}: {r}" for r in regressions]
    if problems:
        pytest.fail(f"{triton_llm.id} {point_name}: " + "\n".join(problems), pytrace=False)
