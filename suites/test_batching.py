"""V1 (static) vs in-flight batching of the same engine, side by side in one run.

The throughput ratio goes into the report (`inflight_vs_v1_throughput_ratio`) and the
terminal summary; the two deployments are measured one after the other, never at once, in
interleaved rounds, V1 then in-flight, of which the best round's ratio counts: on a shared machine a busy neighbour
only ever slows a round down, and a round's two measurements, back to back, share the neighbours more than two
modes' best rounds do (taken from different rounds, V1's best at 37 tok/s against in-flight's 51 missed the floor,
while the rounds' own ratios were 1.25, 1.57, 1.42 and 1.71: a local CI run, 2026-12-04, beside the /v1 steps).
One round, and up to three more only while the best of those so far misses
the floor: once a host slowdown spanned three of the four measurements on a 2-core machine (in-flight
56 and 37 tok/s, V1 67 and 18; in-flight runs at 100+ unloaded) and failed the gate for the machine's
reason. A real regression (in-flight slow in every round, as with inflight_serializes_requests) misses the floor in
every round's ratio, so it still fails, three rounds later. A second round
that always ran bought nothing once the first met the floor: in CI (2026-11-28) each round cleared it
alone (ratios 1.95 and 2.30), and a round costs about 60 s on 2 cores (V1 40 s, in-flight 20 s).

Why in-flight wins, and by how much (a decode step of batch 16 costs little more than one of batch 1:
95 vs 67 ms on a 2-core CPU, and likewise on a GPU): a V1 batch runs as long as its longest request,
and requests that arrive while it runs wait for all of it. The V1 deployment starts a batch with what is queued when the model is
free (max_queue_delay_us = 0), so its batch sizes follow the arrivals (the report keeps the most requests each mode
scheduled in one iteration, from TensorRT-LLM's nv_trt_llm_request_metrics gauge).
The 16 clients start 20 ms apart, as load generators ramp up: requests that arrive in lockstep are
static batching's best case, which real traffic does not offer. 48 requests keep the in-flight
tail (the last long requests running alone) a small part of the run.
"""

from __future__ import annotations

import time
from concurrent.futures import ThreadPoolExecutor

import pytest

from pytest_triton_llm.verdicts.equality import compare_texts
from pytest_triton_llm.triton.load import Target, run_load
from pytest_triton_llm.perf.workload import mixed_lengths
from pytest_triton_llm.triton.tensor_contract import NO_END

pytestmark = pytest.mark.batching

CONCURRENCY = 16
REQUESTS = 32  # two concurrency's worth: V1 waits for each batch's longest (2.03x with 48 on 2 cores, 2026-12-01)
MIN_TOKENS, MAX_TOKENS = 8, 128
REQUIRED_RATIO = 1.5
ROUNDS, MAX_ROUNDS = 1, 4  # rounds 2 to 4 run only while the best ratio so far misses REQUIRED_RATIO
RAMP_S = 0.02  # between client starts


def test_v1_and_inflight_give_identical_greedy_outputs(triton_llm_pair, prompts, pair_equality_rule):
    batch = prompts.batch(16)
    outputs = [[g.text for g in served.client.generate_many(batch, 32, concurrency=16)] for served in triton_llm_pair]
    v1, inflight = outputs
    assert all(v1), "empty outputs"
    # under the engine's rule: exact on float32; float16 kernels are not batch-invariant
    tok = triton_llm_pair[0].tokenizer
    verdict = compare_texts(v1, inflight, pair_equality_rule, tok)
    assert verdict.passed, verdict.report(decode=tok.decode)


def _throughput(served, prompts) -> dict:
    encoded = [served.encode(p) for p in prompts]
    lengths = mixed_lengths(REQUESTS, MIN_TOKENS, MAX_TOKENS)
    requests = [served.client.core_inputs(encoded[i % len(encoded)], n, end_id=NO_END) for i, n in enumerate(lengths)]
    target = Target(served.server.endpoints, "tensorrt_llm")
    run_load(target, requests[:1], concurrency=1)  # warm-up outside the measurement
    with served.client.watch_trtllm_gauges(interval_s=0.1) as watch:
        records, seconds = run_load(target, requests, concurrency=CONCURRENCY, stagger_s=RAMP_S)
    errors = [r.error for r in records if r.error]
    assert not errors, f"{len(errors)} requests failed: {errors[:3]}"
    assert sorted(r.tokens for r in records) == sorted(lengths), "requests did not yield their lengths"
    tokens = sum(r.tokens for r in records)
    # TensorRT-LLM's gauge: the most requests one iteration scheduled (a V1 batch's size follows the arrivals)
    scheduled = watch.most("nv_trt_llm_request_metrics", "scheduled")
    return {
        "requests": len(records),
        "output_tokens": tokens,
        "duration_s": round(seconds, 2),
        "output_tokens_per_s": round(tokens / seconds, 2),
        "most_scheduled": scheduled,
    }


def test_inflight_output_token_throughput_is_at_least_1_5x_v1(triton_llm_pair, prompts, triton_llm_report):
    v1_served, inflight_served = triton_llm_pair
    batch = prompts.batch()
    rounds: dict[str, list[dict]] = {"v1": [], "inflight": []}
    for done in range(1, MAX_ROUNDS + 1):
        rounds["v1"].append(_throughput(v1_served, batch))
        rounds["inflight"].append(_throughput(inflight_served, batch))
        # each round's two modes measured back to back, under the same neighbours: the best round's ratio counts
        ratios = [i["output_tokens_per_s"] / v["output_tokens_per_s"] for v, i in zip(*rounds.values(), strict=True)]
        best = max(range(done), key=ratios.__getitem__)
        ratio, v1, inflight = ratios[best], rounds["v1"][best], rounds["inflight"][best]
        if done >= ROUNDS and ratio >= REQUIRED_RATIO:
            break
    per_round = {mode: [m["output_tokens_per_s"] for m in measured] for mode, measured in rounds.items()}
    triton_llm_report.record_run("inflight_vs_v1_throughput_ratio", round(ratio, 3))
    triton_llm_report.record_run(
        "inflight_vs_v1_throughput",
        {
            "v1": dict(v1, deployment=v1_served.id),
            "inflight": dict(inflight, deployment=inflight_served.id),
            "workload": {
                "requests": REQUESTS,
                "concurrency": CONCURRENCY,
                "output_tokens": [MIN_TOKENS, MAX_TOKENS],
                "client_ramp_ms": RAMP_S * 1000,
            },
            "rounds_output_tokens_per_s": per_round,
            "summary": f"v1 {v1['output_tokens_per_s']:.1f} tok/s, inflight {inflight['output_tokens_per_s']:.1f} tok/s "
            f"({REQUESTS} requests of {MIN_TOKENS}..{MAX_TOKENS} tokens at concurrency {CONCURRENCY}, clients "
            f"{RAMP_S * 1000:.0f} ms apart; the best of {done} interleaved rounds' ratios)",
        },
    )
    assert ratio >= REQUIRED_RATIO, (
        f"inflight/V1 output-token throughput {ratio:.2f} < {REQUIRED_RATIO} (the best of {done} rounds' ratios "
        f"{[round(r, 2) for r in ratios]}, tok/s {per_round}): v1 {v1}, inflight {inflight}"
    )


def test_a_short_request_overtakes_long_ones_on_inflight(triton_llm_pair, prompts):
    _, inflight = triton_llm_pair
    long_ids = inflight.encode(prompts.completion["village"])
    short_ids = inflight.encode(prompts.completion["columbus"])
    finished = {}

    def run(name, ids, max_tokens, delay_s):
        time.sleep(delay_s)
        inflight.client.generate_ids(ids, max_tokens, end_id=NO_END)
        finished[name] = time.perf_counter()

    with ThreadPoolExecutor(5) as pool:
        jobs = [pool.submit(run, f"long-{i}", long_ids, 128, 0.0) for i in range(4)]
        jobs.append(pool.submit(run, "short", short_ids, 8, 0.5))  # sent while the long ones run
        for job in jobs:
            job.result()
    assert finished["short"] < min(t for name, t in finished.items() if name.startswith("long"))
