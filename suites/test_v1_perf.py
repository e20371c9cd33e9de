"""Throughput and latency of an OpenAI-compatible endpoint (--openai-url) per load point of the perf workload, with the
metrics and budgets of the Triton perf suite.

The workload (fixtures/perf_workloads.toml, --perf-workload) draws the same token lengths; each prompt is its token ids
decoded by the endpoint's tokenizer, sent as a streamed /v1/completions body from the load engine's asyncio clients
(v1_load.V1Target), each content chunk timed. Output lengths are held to the drawn ones by ignore_eos or min_tokens,
whichever the family's contract honours; tokens are counted by the stream's usage where the family streams it, else
by its content chunks. Budgets (fixtures/perf_budgets.toml) match the endpoint as engine (--openai-engine, else the
model id), deployment "openai:<family>", image "openai" and the hardware that serves: this host's for an endpoint on a
loopback address, else not known (only "*" matches). --perf-against and --perf-compare judge Triton deployments, not
this test.
"""

from __future__ import annotations


import pytest

from pytest_triton_llm.host.hardware import hardware_class
from pytest_triton_llm.perf.client_processes import free_cores, load_processes
from pytest_triton_llm.perf.judge import client_problems, judge_budget, load_point_result, undecided_by
from pytest_triton_llm.perf.rounds import Side, measure_rounds
from pytest_triton_llm.perf.workload import synthetic_requests
from pytest_triton_llm.perf.metrics import V1_PERF
from pytest_triton_llm.openai.load import V1Target, v1_bodies

pytestmark = pytest.mark.perf
IMAGE = "openai"  # what budgets match as the image of an OpenAI endpoint
TOKENS_FROM = {True: "usage (stream_options.include_usage)", False: "content chunks (the family streams no usage)"}


def test_load_point_over_v1(
    openai_target,
    load_point,
    perf_workload,
    perf_budgets,
    triton_llm_report,
    triton_llm_perf_options,
    record_property,
    triton_llm_progress,
):
    point_name, point = load_point
    workload_name, workload = perf_workload
    options = triton_llm_perf_options
    tokenizer, engine = openai_target.tokenizer, openai_target.engine
    vocab = range(100, tokenizer.vocab_size)  # clear of the special tokens at the start
    limits = (engine.max_input_len, engine.max_output_len) if engine is not None else (10**9, 10**9)
    requests = synthetic_requests(workload, workload.requests, vocab, *limits)
    warmup = synthetic_requests(workload, workload.warmup, vocab, *limits, seed_offset=1)
    family, base = openai_target.family, openai_target.greedy()
    bodies, held = v1_bodies(requests, base, tokenizer.decode, family, workload.fixed_output)
    warmup_bodies, _ = v1_bodies(warmup, base, tokenizer.decode, family, workload.fixed_output)
    by_usage = "stream_options" in bodies[0]
    given = openai_target.options
    target = V1Target(given.url, given.headers, given.ca_file)
    served = openai_target.hardware  # this host's for a loopback URL, else REMOTE
    workers = load_processes(options.workers, point, free_cores(served == "cpu"))
    side = Side(f"perf over /v1: {given.url}", f"openai {given.url}", target, bodies, warmup_bodies, workers)
    identity = dict(
        engine=given.engine or openai_target.model,
        deployment=openai_target.deployment,
        hardware=served,
        hardware_class=hardware_class(served),
        image=IMAGE,
        load_point=point_name,
        workload=workload_name,
    )
    undecided = undecided_by(*perf_budgets[1:], identity, options)  # --perf-repeats-max: more runs while inconclusive
    [measured] = measure_rounds([side], point_name, point, workload_name, workload.seed, options, triton_llm_progress, undecided)
    runs = measured.runs
    result = load_point_result(runs, measured.records, measured.seconds, options)
    result.update(
        url=given.url,
        model=openai_target.model,
        family=openai_target.family_name,
        stand_in=openai_target.stand_in,
        endpoint=target.path,
        load_point=point_name,
        workload=workload_name,
        streamed=True,
        hardware=served,
        hardware_class=identity["hardware_class"],
        engine=identity["engine"],
        deployment=identity["deployment"],
        image=IMAGE,
        budget_file=str(perf_budgets[0]),
        lengths_held_by=held,
        tokens_from=TOKENS_FROM[by_usage],
    )
    who = f"/v1 {point_name}"
    problems = judge_budget(*perf_budgets, identity, result, runs, options, who)
    # recorded before the asserts, so that a failed load point still says what was measured and what judged it
    triton_llm_report.record_run_entry(V1_PERF, point_name, result)
    for key in ("throughput_rps", "output_tokens_per_s"):
        record_property(f"perf.v1.{point_name}.{key}", result[key])

    assert result["errors"] == 0, f"{result['errors']} requests failed: {result['error_samples']}"
    drawn = sum(r.max_tokens for r in requests)
    if by_usage and held in ("ignore_eos", "min_tokens"):  # the usage counts every token: the lengths must be exact
        assert [r["output_tokens"] for r in runs] == [drawn] * len(runs), (
            f"the answers did not hold their drawn lengths ({drawn} tokens in all) by {held}"
        )
    assert result["ttft_ms"] and result["icl_ms"], "a streamed answer must give TTFT and inter-chunk latency"
    problems += client_problems(runs, workers, options, who)
    if problems:
        pytest.fail(f"/v1 {given.url} {point_name}: " + "\n".join(problems), pytrace=False)
