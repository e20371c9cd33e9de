"""The migration gate to /v1: a Triton deployment (--deployment: ensemble, BLS or llmapi) and an OpenAI endpoint
(--openai-url) serving the same checkpoint answer the same prompts the same way.

Greedy outputs must agree under the pair's equality rule (fixtures/openai_migration.toml, else the Triton engine's
own rule); every differing prompt is listed side by side. Streams must add up to the unary answer on both sides,
max_tokens must give the same token counts, and throughput, time to first token and inter-chunk latency go into the
report side by side with their ratio, judged by the pair's min_throughput_ratio where the file sets one."""

from __future__ import annotations

import statistics
import time

import pytest

from pytest_triton_llm.equality import Rule, compare_texts
from pytest_triton_llm.schema import load_toml

from .conftest import FIXTURES, equality_rule_of

pytestmark = pytest.mark.migration

TOKENS = 24
PAIRS_FILE = FIXTURES / "openai_migration.toml"


@pytest.fixture(scope="module")
def pair_entry(triton_llm, openai_target) -> dict:
    """fixtures/openai_migration.toml's entry for (the Triton side's engine, the endpoint's family), or {}."""
    return load_toml(PAIRS_FILE).get("pairs", {}).get(triton_llm.ref.engine_name, {}).get(openai_target.family_name, {})


@pytest.fixture(scope="module")
def pair_rule(triton_llm, pair_entry) -> Rule:
    if "equality" in pair_entry:
        return Rule(**pair_entry["equality"])
    return equality_rule_of(triton_llm)


def _v1(openai_target, prompt: str, max_tokens: int = TOKENS) -> str:
    return openai_target.endpoint.complete(openai_target.completion(prompt, max_tokens)).text


def test_greedy_outputs_agree_on_the_prompts(triton_llm, openai_target, prompts, triton_llm_report, pair_rule):
    batch = prompts.batch()
    old = [triton_llm.client.generate(p, TOKENS).text for p in batch]
    new = [_v1(openai_target, p) for p in batch]
    identical = sum(a == b for a, b in zip(old, new, strict=True))
    triton_llm_report.record(
        triton_llm.id,
        "migration_v1_prompts",
        {
            "against": openai_target.options.url,
            "family": openai_target.family_name,
            "rule": pair_rule.describe(),
            "prompts": len(batch),
            "identical": identical,
            "side_by_side": [{"prompt": p, "triton": a, "v1": b} for p, a, b in zip(batch, old, new, strict=True)],
        },
    )
    verdict = compare_texts(old, new, pair_rule, triton_llm.tokenizer)
    differing = [f"  {p!r}\n    triton: {a!r}\n    /v1:    {b!r}" for p, a, b in zip(batch, old, new, strict=True) if a != b]
    assert verdict.passed, (
        f"{len(differing)} of {len(batch)} differ:\n"
        + "\n".join(differing)
        + "\n"
        + verdict.report(decode=triton_llm.tokenizer.decode)
    )


def test_streams_add_up_to_the_unary_answer_on_both(triton_llm, openai_target, prompts, triton_llm_report):
    prompt = prompts.completion["language"]
    v1 = {"stream": openai_target.endpoint.stream("/completions", openai_target.completion(prompt, TOKENS)).text}
    v1["unary"] = _v1(openai_target, prompt)
    triton = None
    if triton_llm.ref.options.decoupled:
        triton = {
            "stream": triton_llm.client.stream(prompt, TOKENS).text,
            "unary": triton_llm.client.generate(prompt, TOKENS).text,
        }
    triton_llm_report.record(triton_llm.id, "migration_v1_streams", {"prompt": prompt, "triton": triton, "v1": v1})
    assert v1["stream"] == v1["unary"]
    if triton is None:
        pytest.skip(f"{triton_llm.id} is not decoupled: its side does not stream (the /v1 side's stream added up)")
    assert triton["stream"] == triton["unary"]


def test_max_tokens_gives_the_same_token_counts(triton_llm, openai_target, prompts):
    prompt = prompts.completion["columbus"]
    for max_tokens in (1, 7):
        triton_count = len(triton_llm.client.generate_ids(triton_llm.encode(prompt), max_tokens).token_ids)
        v1_count = openai_target.endpoint.complete(openai_target.completion(prompt, max_tokens)).usage["completion_tokens"]
        assert (triton_count, v1_count) == (max_tokens, max_tokens)


def _timed(stream_once, batch) -> dict:
    ttft, gaps, chunks, start = [], [], 0, time.perf_counter()
    for prompt in batch:
        sent, times = stream_once(prompt)
        ttft.append(times[0] - sent)
        gaps.extend(b - a for a, b in zip(times, times[1:], strict=False))
        chunks += len(times)
    return {
        "chunks_per_s": round(chunks / (time.perf_counter() - start), 2),
        "ttft_ms_p50": round(1000 * statistics.median(ttft), 1),
        "icl_ms_p50": round(1000 * statistics.median(gaps), 1),  # every gap pooled: aiperf's ICL
    }


def test_throughput_ttft_and_itl_side_by_side(triton_llm, openai_target, prompts, triton_llm_report, pair_entry):
    """One text chunk per token on both sides (the Triton stream's content events, the SSE deltas), in two
    interleaved rounds so that the machine's noise hits both; the better round of each side is kept."""
    if not triton_llm.ref.options.decoupled:
        pytest.skip(f"{triton_llm.id} is not decoupled: its first token cannot be timed")
    batch = prompts.batch(4)

    def triton_once(prompt):
        sent = time.perf_counter()
        return sent, [sent + e.t_s for e in triton_llm.client.stream(prompt, TOKENS).content_events]

    def v1_once(prompt):
        streamed = openai_target.endpoint.stream("/completions", openai_target.completion(prompt, TOKENS))
        return streamed.sent_s, streamed.times

    rounds = [(_timed(triton_once, batch), _timed(v1_once, batch)) for _ in range(2)]
    old = max((r[0] for r in rounds), key=lambda m: m["chunks_per_s"])
    new = max((r[1] for r in rounds), key=lambda m: m["chunks_per_s"])
    ratio = round(new["chunks_per_s"] / old["chunks_per_s"], 3)
    floor = pair_entry.get("min_throughput_ratio")
    triton_llm_report.record(
        triton_llm.id,
        "migration_v1_perf",
        {
            "against": openai_target.options.url,
            "triton": old,
            "v1": new,
            "v1_vs_triton_throughput_ratio": ratio,
            "budget": {"file": str(PAIRS_FILE), "min_throughput_ratio": floor}
            if floor is not None
            else "none for this pair: measured, not judged",
        },
    )
    assert old["chunks_per_s"] > 0 and new["chunks_per_s"] > 0
    if floor is not None:
        assert ratio >= floor, (
            f"/v1 at {ratio}x the Triton deployment's throughput, below {floor} ({PAIRS_FILE}); triton {old}, /v1 {new}"
        )
