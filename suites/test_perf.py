"""Throughput and latency per deployment and load point, with budgets and baselines.

The workload (fixtures/perf_workloads.toml, --perf-workload) sends synthetic token ids straight
to tensorrt_llm, as upstream's benchmark_core_model does (an llmapi deployment's tensorrt_llm takes them as text, and
its output lengths are the model's own: it has no min_tokens input), from an asyncio load generator: gRPC
streams (token by token on decoupled deployments, so TTFT and ITL are measured), closed-loop
concurrency points and open-loop Poisson rates. Each load point is recorded in the report
(metrics.perf), as JUnit properties, checked against the budgets (fixtures/perf_budgets.toml, or
--perf-budgets) for this hardware and image, and with --perf-compare-fail rules against --perf-compare's baseline
or against --perf-against's reference deployment, measured in the same rounds (on a shared machine a baseline saved
minutes before can differ by 20% from a clean rerun; interleaved rounds share the noise).
The terminal summary says per load point whether it was judged, by which budget, on which hardware.

Over /v1 (class TestOverV1, run with --openai-url):
Throughput and latency of an OpenAI-compatible endpoint (--openai-url) per load point of the perf workload, with the
metrics and budgets of the Triton perf suite.

The workload (fixtures/perf_workloads.toml, --perf-workload) draws the same token lengths; each prompt is its token ids
decoded by the endpoint's tokenizer, sent as a streamed /v1/completions body from the load engine's asyncio clients
(v1_load.V1Target), each content chunk timed. Output lengths are held to the drawn ones by ignore_eos or min_tokens,
whichever the family's contract honours; tokens are counted by the stream's usage where the family streams it, else
by its content chunks. Budgets (fixtures/perf_budgets.toml) match the endpoint as engine (--openai-engine, else the
model id), deployment "openai:<family>", image "openai" and the hardware that serves: this host's for an endpoint on a
loopback address, else not known (only "*" matches). --perf-against-url measures a reference endpoint (the server
migrated from, or a clean twin) in the same interleaved rounds, each side in its own family's body, and judges
--perf-compare-fail by a paired test; --perf-against and --perf-compare judge Triton deployments, not this test."""

from __future__ import annotations

import warnings
from functools import partial
import pytest
from pytest_triton_llm.host.hardware import hardware_class
from pytest_triton_llm.triton.load import Target, run_load
from pytest_triton_llm.stack.lock import DUMMY
from pytest_triton_llm.perf.baseline import comparable
from pytest_triton_llm.perf.client_processes import free_cores, load_processes
from pytest_triton_llm.perf.judge import (
    client_problems,
    judge_against,
    judge_budget,
    load_point_result,
    reference_failures,
    undecided_by,
)
from pytest_triton_llm.perf.metrics import DEFINITIONS, summarize
from pytest_triton_llm.perf.mlperf import judge as judge_mlperf
from pytest_triton_llm.perf.monitor import monitor_load
from pytest_triton_llm.perf.records import epoch_offset_ns, write_records
from pytest_triton_llm.perf.rounds import Side, measure_rounds
from pytest_triton_llm.perf.repeats import NOISY_CV, PerfNoisy, judge_goodput, noisy
from pytest_triton_llm.perf.sweep import Sweep, concurrencies
from pytest_triton_llm.perf.workload import encode, synthetic_requests
from pytest_triton_llm.plugin.selection import has_dummy_weights
from pytest_triton_llm.perf.metrics import V1_PERF
from pytest_triton_llm.openai.load import V1Target, v1_bodies

pytestmark = pytest.mark.perf


# the report's word on which definition each metric follows (the terminal summary prints the summary line)
PERF_DEFINITIONS = {
    "summary": "itl_ms is aiperf's ITL (per request), icl_ms aiperf's ICL (pooled gaps, itl_ms before 0.1.0), "
    "tpot_ms MLPerf's TPOT; definitions and sources in the report and docs/verdicts.md",
    **DEFINITIONS,
}


def test_load_point(
    triton_llm,
    load_point,
    perf_workload,
    perf_budgets,
    triton_llm_report,
    triton_llm_perf_options,
    record_property,
    triton_llm_progress,
    triton_llm_perf_reference,
):
    point_name, point = load_point
    workload_name, workload = perf_workload
    engine = triton_llm.ref.engine
    vocab = range(100, triton_llm.tokenizer.vocab_size)  # clear of the special tokens at the start
    requests = synthetic_requests(workload, workload.requests, vocab, engine.max_input_len, engine.max_output_len)
    warmup = synthetic_requests(workload, workload.warmup, vocab, engine.max_input_len, engine.max_output_len, seed_offset=1)
    streaming = triton_llm.client.decoupled  # token by token wherever the model can
    options = triton_llm_perf_options
    reference = triton_llm_perf_reference  # --perf-against: measured beside this deployment, round by round
    # each side's own encoding (token ids, or text for an llmapi model) and streaming, of the same requests
    served_sides = [triton_llm] if reference is None else [triton_llm, reference]
    sides = [
        Side(
            f"perf: {s.id}",
            s.id,
            Target(s.server.endpoints),
            encode(requests, s.client, workload.fixed_output, s.client.decoupled, bool(s.ref.speculative_config)),
            encode(warmup, s.client, workload.fixed_output, s.client.decoupled),
            # load processes per side: --perf-workers, else by the clients and the cores its server leaves this host
            load_processes(options.workers, point, free_cores(s.hardware == "cpu")),
            # both sides monitored: the same overhead
            partial(monitor_load, s, options.scrape_ms, triton_llm_report.run),
        )
        for s in served_sides
    ]
    # budgets are keyed by what actually served: the image (or "local") and the hardware it ran on (or its class)
    identity = dict(
        engine=triton_llm.ref.engine_name,
        deployment=triton_llm.ref.name,
        hardware=triton_llm.hardware,
        hardware_class=hardware_class(triton_llm.hardware),
        image=triton_llm.image,
        load_point=point_name,
        workload=workload_name,
        engine_digest=triton_llm.engine.digest,
    )
    budgets_file, budgets = perf_budgets
    undecided = undecided_by(budgets, identity, options)  # --perf-repeats-max: more runs while inconclusive
    measured, *against = measure_rounds(
        sides, point_name, point, workload_name, workload.seed, options, triton_llm_progress, undecided
    )
    runs, reference_runs = measured.runs, (against[0].runs if against else [])
    result = load_point_result(runs, measured.records, measured.seconds, options)
    if any(measured.series):  # one per run: moved to <report>.series.json when the run ends
        result["series"] = measured.series
    triton_llm_report.record_run("perf_definitions", PERF_DEFINITIONS)
    # recorded before the asserts, so that a failed load point still says where it ran and which budgets applied
    result.update(
        load_point=point_name,
        workload=workload_name,
        streamed=streaming,
        hardware=identity["hardware"],
        hardware_class=identity["hardware_class"],
        image=identity["image"],
        budget_file=str(budgets_file),
        engine_digest=triton_llm.engine.digest,
    )
    if has_dummy_weights(triton_llm.ref):  # random weights (lock source 'dummy'): these numbers are speed only
        result["weights"] = DUMMY
    triton_llm_report.record_perf(triton_llm.id, point_name, result)
    for key in ("throughput_rps", "output_tokens_per_s"):
        record_property(f"perf.{point_name}.{key}", result[key])
    for key in ("latency_ms", "ttft_ms", "itl_ms", "icl_ms", "tpot_ms"):
        if result[key]:
            record_property(f"perf.{point_name}.{key}.p99", result[key]["p99"])
    if "goodput" in result:  # --perf-slo: the share of requests within every SLO, and their rate
        record_property(f"perf.{point_name}.goodput_fraction", result["goodput"]["fraction"])
        record_property(f"perf.{point_name}.goodput_rps", result["goodput"]["goodput_rps"])

    assert result["errors"] == 0, f"{result['errors']} requests failed: {result['error_samples']}"
    assert (failed := reference_failures(reference_runs, reference.id if reference else "")) is None, failed
    fixed_output = workload.fixed_output and not triton_llm.client.speaks_llmapi
    result["fixed_output"] = fixed_output  # false: output lengths as the model ended them
    if fixed_output:
        assert all(r["output_tokens"] == sum(q.max_tokens for q in requests) for r in runs), (
            "requests did not yield their fixed lengths"
        )
    if streaming:
        assert result["ttft_ms"] and result["itl_ms"], "a streaming deployment must give TTFT and inter-token latency"

    who = f"{triton_llm.id} {point_name}"
    compared = reference is not None or options.baseline is not None
    problems = judge_budget(budgets_file, budgets, identity, result, runs, options, who, compared)

    problems += client_problems(runs, sides[0].workers, options, who)
    if len(runs) > 1 and (noisy_metrics := noisy(result["repeats"])):
        result["noisy"] = noisy_metrics
        warnings.warn(
            PerfNoisy(f"{triton_llm.id} {point_name}: runs varied by more than {NOISY_CV:.0%}: {', '.join(noisy_metrics)}"),
            stacklevel=1,
        )
    if reference is not None:
        problems += judge_against(result, options.fail_rules, reference_runs, runs, reference.id, point_name, options)
    if options.compare:
        before = options.baseline_point(triton_llm.id, point_name)
        refused, differs = comparable(before, result) if before is not None else (None, [])
        if before is None:
            problems.append(f"{options.compare} has no {point_name} for {triton_llm.id}")
        elif refused:
            problems.append(f"{options.compare} cannot be compared with this run at {point_name}: {refused}")
        else:
            regressions = [r for rule in options.fail_rules if (r := rule.regression(before, result))]
            result["compared"] = {
                "baseline": options.compare,
                "differs": differs,
                "regressions": regressions,
                "power": [rule.power(before, result) for rule in options.fail_rules],
            }
            result["regressions"] = regressions
            problems += [f"regression at {point_name}: {r}" for r in regressions]
    if problems:
        pytest.fail(f"{triton_llm.id} {point_name}: " + "\n".join(problems), pytrace=False)


def test_saturation_sweep(
    triton_llm, perf_workload, triton_llm_report, triton_llm_perf_options, triton_llm_progress, record_property
):
    """--perf-sweep (collected only with it): concurrency 1, 2, 4, ... on the --perf-workload's lengths until output
    throughput stalls or an SLO breaks; the knee goes to the report (perf_sweep), the summary and the plot."""
    options = triton_llm_perf_options
    workload_name, workload = perf_workload
    engine = triton_llm.ref.engine
    vocab = range(100, triton_llm.tokenizer.vocab_size)
    client, streaming = triton_llm.client, triton_llm.client.decoupled
    cpu_served = triton_llm.hardware == "cpu"
    sweep = Sweep(options.sweep_max, bool(options.slos))
    for concurrency in concurrencies(options.sweep_max):
        count = max(workload.requests, 2 * concurrency)  # every client sends at least twice: more than the ramp
        requests = synthetic_requests(workload, count, vocab, engine.max_input_len, engine.max_output_len)
        warmup = synthetic_requests(workload, workload.warmup, vocab, engine.max_input_len, engine.max_output_len, 1)
        load = (
            Target(triton_llm.server.endpoints),
            encode(requests, client, workload.fixed_output, streaming, bool(triton_llm.ref.speculative_config)),
            encode(warmup, client, workload.fixed_output, streaming),
        )
        runs, records_all, seconds_all = [], [], 0.0
        for repeat in range(1, options.repeats + 1):
            offset_ns = epoch_offset_ns()
            with triton_llm_progress.step(f"perf sweep: {triton_llm.id} concurrency={concurrency} run {repeat}"):
                records, seconds = run_load(
                    *load,
                    seed=workload.seed,
                    concurrency=concurrency,
                    workers=load_processes(options.workers, {"concurrency": concurrency}, free_cores(cpu_served)),
                )
            if options.records:
                point = f"sweep:concurrency={concurrency}"
                write_records(
                    options.records,
                    records,
                    offset_ns,
                    deployment=triton_llm.id,
                    load_point=point,
                    workload=workload_name,
                    repeat=repeat,
                )
            runs.append(summarize(records, seconds))
            records_all += records
            seconds_all += seconds
        failed = [r for r in runs if r["errors"]]
        assert not failed, (
            f"concurrency={concurrency}: {sum(r['errors'] for r in failed)} requests failed: {failed[0]['error_samples']}"
        )
        goodput = judge_goodput(records_all, options.slos, seconds_all) if options.slos else None
        extra = {"mlperf": judge_mlperf(*options.mlperf, records_all)} if options.mlperf else {}
        if sweep.add(concurrency, runs, goodput, requests=count, **extra):
            break
    result = {"workload": workload_name, "max_concurrency": options.sweep_max, **sweep.result()}
    triton_llm_report.record(triton_llm.id, "perf_sweep", result)
    record_property("perf.sweep.knee_concurrency", result["knee"])
    assert result["knee"] is not None, f"{triton_llm.id}: no knee: {result['knee_why']} ({result['stopped']})"


IMAGE = "openai"  # what budgets match as the image of an OpenAI endpoint


TOKENS_FROM = {True: "usage (stream_options.include_usage)", False: "content chunks (the family streams no usage)"}


def _v1_side(target, requests, warmup, workload, workers: int) -> tuple[Side, str, bool]:
    """An endpoint's side of a /v1 load point: the requests in its own family's body (the prompt text decoded by its
    tokenizer, greedy, lengths held as its contract allows); -> (side, what holds the lengths, tokens by usage)."""
    family, base, decode = target.family, target.greedy(), target.tokenizer.decode
    bodies, held = v1_bodies(requests, base, decode, family, workload.fixed_output)
    warmup_bodies, _ = v1_bodies(warmup, base, decode, family, workload.fixed_output)
    given = target.options
    load = V1Target(given.url, given.headers, given.ca_file)
    side = Side(f"perf over /v1: {given.url}", f"openai {given.url}", load, bodies, warmup_bodies, workers)
    return side, held, "stream_options" in bodies[0]


class TestOverV1:
    """The same capability over an OpenAI endpoint: run with --openai-url, deselected without it."""

    def test_load_point_over_v1(
        self,
        openai_target,
        openai_perf_reference,
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
        options, reference = triton_llm_perf_options, openai_perf_reference
        tokenizer, engine = openai_target.tokenizer, openai_target.engine
        vocab = range(100, tokenizer.vocab_size)  # clear of the special tokens at the start
        limits = (engine.max_input_len, engine.max_output_len) if engine is not None else (10**9, 10**9)
        requests = synthetic_requests(workload, workload.requests, vocab, *limits)
        warmup = synthetic_requests(workload, workload.warmup, vocab, *limits, seed_offset=1)
        given = openai_target.options
        served = openai_target.hardware  # this host's for a loopback URL, else REMOTE
        workers = load_processes(options.workers, point, free_cores(served == "cpu"))
        side, held, by_usage = _v1_side(openai_target, requests, warmup, workload, workers)
        # --perf-against-url: the reference endpoint in the same interleaved rounds, sent the same prompts
        sides = [side] if reference is None else [side, _v1_side(reference, requests, warmup, workload, workers)[0]]
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
        measured, *against = measure_rounds(
            sides, point_name, point, workload_name, workload.seed, options, triton_llm_progress, undecided
        )
        runs = measured.runs
        result = load_point_result(runs, measured.records, measured.seconds, options)
        result.update(
            url=given.url,
            model=openai_target.model,
            family=openai_target.family_name,
            stand_in=openai_target.stand_in,
            endpoint=side.target.path,
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
        problems = judge_budget(*perf_budgets, identity, result, runs, options, who, compared=reference is not None)
        reference_runs = against[0].runs if against else []
        if reference is not None:
            problems += judge_against(
                result, options.fail_rules, reference_runs, runs, reference.options.url, point_name, options
            )
        # recorded before the asserts, so that a failed load point still says what was measured and what judged it
        triton_llm_report.record_run_entry(V1_PERF, point_name, result)
        for key in ("throughput_rps", "output_tokens_per_s"):
            record_property(f"perf.v1.{point_name}.{key}", result[key])

        assert result["errors"] == 0, f"{result['errors']} requests failed: {result['error_samples']}"
        assert (failed := reference_failures(reference_runs, reference.options.url if reference else "")) is None, failed
        drawn = sum(r.max_tokens for r in requests)
        if by_usage and held in ("ignore_eos", "min_tokens"):  # the usage counts every token: the lengths must be exact
            assert [r["output_tokens"] for r in runs] == [drawn] * len(runs), (
                f"the answers did not hold their drawn lengths ({drawn} tokens in all) by {held}"
            )
        assert result["ttft_ms"] and result["icl_ms"], "a streamed answer must give TTFT and inter-chunk latency"
        problems += client_problems(runs, workers, options, who)
        if problems:
            pytest.fail(f"/v1 {given.url} {point_name}: " + "\n".join(problems), pytrace=False)
