"""The engine -> PyTorch migration gate: an engine deployment (the engine ensemble) and an llmapi deployment of the
same checkpoint, both served, answering the same prompts and CNN/DailyMail articles the same way.

Greedy outputs must be identical, or within the engine's equality rule (lock [engines.X.equality]); every differing
prompt is listed side by side. Streams must add up to the unary answer on both, max_tokens must give the same token
counts, and throughput, time to first token and inter-token latency go into the report side by side with their ratio,
judged where fixtures/perf_budgets.toml (or --perf-budgets) sets min_throughput_ratio_vs_engine for load_point
"migration"."""

from __future__ import annotations

import statistics
import time

import pytest

from pytest_triton_llm.verdicts.equality import compare_texts
from pytest_triton_llm.host.hardware import hardware_class
from pytest_triton_llm.perf.budgets import Budget, find_budget

pytestmark = pytest.mark.migration

TOKENS = 32
ARTICLES = 4  # a smoke workload on a CPU; --accuracy-samples is for the accuracy suite


def _side_by_side(prompts, old, new) -> str:
    rows = [f"  {p[:40]!r}\n    engine: {a!r}\n    llmapi: {b!r}" for p, a, b in zip(prompts, old, new, strict=False) if a != b]
    return f"{len(rows)} of {len(prompts)} prompts differ:\n" + "\n".join(rows)


def test_greedy_outputs_match_on_the_prompts(triton_llm_migration, prompts, triton_llm_report, migration_equality_rule):
    engine, llmapi = triton_llm_migration
    batch = prompts.batch()
    old = [engine.client.generate(p, TOKENS).text for p in batch]
    new = [llmapi.client.generate(p, TOKENS).text for p in batch]
    identical = sum(a == b for a, b in zip(old, new, strict=False))
    triton_llm_report.record(
        llmapi.id,
        "migration_prompts",
        {
            "against": engine.id,
            "prompts": len(batch),
            "identical": identical,
            "differing": [{"prompt": p, "engine": a, "llmapi": b} for p, a, b in zip(batch, old, new, strict=True) if a != b],
        },
    )
    verdict = compare_texts(old, new, migration_equality_rule, engine.tokenizer)
    assert verdict.passed, _side_by_side(batch, old, new) + "\n" + verdict.report(decode=engine.tokenizer.decode)


def test_greedy_summaries_match_on_cnn_dailymail(triton_llm_migration, cnn, triton_llm_report, migration_equality_rule):
    engine, llmapi = triton_llm_migration
    articles = [engine.chat_prompt(f"Summarize the following news article:\n{a.text[:1500]}") for a in cnn.articles[:ARTICLES]]
    old = [engine.client.generate(a, TOKENS).text for a in articles]
    new = [llmapi.client.generate(a, TOKENS).text for a in articles]
    identical = sum(a == b for a, b in zip(old, new, strict=True))
    triton_llm_report.record(
        llmapi.id, "migration_articles", {"against": engine.id, "articles": len(articles), "identical": identical}
    )
    verdict = compare_texts(old, new, migration_equality_rule, engine.tokenizer)
    assert verdict.passed, _side_by_side([a[-60:] for a in articles], old, new)


def test_streams_add_up_to_the_unary_answer_on_both(triton_llm_migration, prompts, migration_equality_rule):
    streaming = [s for s in triton_llm_migration if s.ref.options.decoupled]
    if not streaming:
        pytest.skip("neither side is decoupled: neither streams")
    prompt = prompts.completion["language"]
    for served in streaming:  # two requests: under the engine's rule, as half-precision kernels need
        verdict = compare_texts(
            [served.client.generate(prompt, TOKENS).text],
            [served.client.stream(prompt, TOKENS).text],
            migration_equality_rule,
            served.tokenizer,
        )
        assert verdict.passed, f"{served.id}: " + verdict.report(labels=["the streamed answer"])


def test_max_tokens_gives_the_same_token_counts(triton_llm_migration, prompts):
    engine, llmapi = triton_llm_migration
    for max_tokens in (1, 7):
        prompt = prompts.completion["columbus"]
        counts = [
            len(s.tokenizer.encode(s.client.generate(prompt, max_tokens).text, add_special_tokens=False))
            for s in (engine, llmapi)
        ]
        assert counts[0] == counts[1], f"max_tokens {max_tokens}: engine {counts[0]} tokens, llmapi {counts[1]}"


def _measure(served, prompts) -> dict:
    ttft, itl, tokens, start = [], [], 0, time.perf_counter()
    for prompt in prompts:
        events = served.client.stream(prompt, TOKENS).content_events
        ttft.append(events[0].t_s)
        itl.extend(b.t_s - a.t_s for a, b in zip(events, events[1:], strict=False))
        tokens += len(events)
    return {
        "tokens_per_s": round(tokens / (time.perf_counter() - start), 2),
        "ttft_ms_p50": round(1000 * statistics.median(ttft), 1),
        "icl_ms_p50": round(1000 * statistics.median(itl), 1),  # every gap pooled: aiperf's ICL (docs/verdicts.md)
    }


def test_throughput_ttft_and_itl_side_by_side(
    triton_llm_migration, prompts, triton_llm_report, perf_budgets, triton_llm_perf_options
):
    engine, llmapi = triton_llm_migration
    if not (engine.ref.options.decoupled and llmapi.ref.options.decoupled):
        pytest.skip("streams on both sides are needed to time the first token")
    batch = prompts.batch(4)
    rounds = [(_measure(engine, batch), _measure(llmapi, batch)) for _ in range(2)]  # interleaved: noise hits both
    old = max((r[0] for r in rounds), key=lambda m: m["tokens_per_s"])
    new = max((r[1] for r in rounds), key=lambda m: m["tokens_per_s"])
    ratio = round(new["tokens_per_s"] / old["tokens_per_s"], 3)
    budgets_file, budgets = perf_budgets
    budget = find_budget(
        budgets,
        engine=llmapi.ref.engine_name,
        deployment=llmapi.ref.name,
        hardware=llmapi.hardware,
        hardware_class=hardware_class(llmapi.hardware),
        image=llmapi.image,
        load_point="migration",
    )
    rows = budget.check({"throughput_ratio_vs_engine": ratio}) if budget is not None else []
    judged_by = {"file": str(budgets_file), "match": budget.match(budgets.index(budget) + 1)} if budget else {}
    if not any(row[0] == "min_throughput_ratio_vs_engine" for row in rows):  # no budget sets a floor: the default's
        floor = triton_llm_perf_options.migration_floor
        rows += Budget(engine=llmapi.ref.engine_name, min_throughput_ratio_vs_engine=floor).check(
            {"throughput_ratio_vs_engine": ratio}
        )
        judged_by = {"default_floor": floor, "option": "--perf-migration-floor"}
    triton_llm_report.record(
        llmapi.id,
        "migration_perf",
        {
            "against": engine.id,
            "engine": old,
            "llmapi": new,
            "llmapi_vs_engine_throughput_ratio": ratio,
            "budget": {**judged_by, "rows": rows},
        },
    )
    assert old["tokens_per_s"] > 0 and new["tokens_per_s"] > 0
    missed = [row for row in rows if row[-1] == "MISSED"]
    assert not missed, f"migration perf budget ({budgets_file}): {missed}; engine {old}, llmapi {new}"
