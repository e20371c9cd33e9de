"""The engine -> PyTorch migration gate: an engine deployment (the engine ensemble) and an llmapi deployment of the
same checkpoint, both served, answering the same prompts and CNN/DailyMail articles the same way.

Greedy outputs must be identical, or within the engine's equality rule (lock [engines.X.equality]); every differing
prompt is listed side by side. Streams must add up to the unary answer on both, max_tokens must give the same token
counts, and throughput, time to first token and inter-token latency go into the report side by side with their ratio,
judged where fixtures/perf_budgets.toml (or --perf-budgets) sets min_throughput_ratio_vs_engine for load_point
"migration".

Over /v1 (class TestOverV1, run with --openai-url):
The migration gate to /v1: a Triton deployment (--deployment: ensemble, BLS or llmapi) and an OpenAI endpoint
(--openai-url) serving the same checkpoint answer the same prompts the same way.

Greedy outputs must agree under the pair's equality rule (fixtures/openai_migration.toml, else the Triton engine's
own rule); every differing prompt is listed side by side. Streams must add up to the unary answer on both sides,
max_tokens must give the same token counts, ROUGE on CNN/DailyMail must not drop by significantly more than the pair's
max_rouge_drop (a paired test, article by article), and throughput, time to first token and inter-chunk latency go
into the report side by side with their ratio (both sides driven by the perf suite's load engine at one concurrency),
judged by the pair's min_throughput_ratio where the file sets one."""

from __future__ import annotations

import statistics
import time
import pytest
from pytest_triton_llm.verdicts.equality import compare_texts
from pytest_triton_llm.host.hardware import hardware_class
from pytest_triton_llm.perf.budgets import Budget, find_budget
import dataclasses
from pytest_triton_llm.openai import migration as openai_migration
from pytest_triton_llm.accuracy.judge import underpowered_drop_gate
from pytest_triton_llm.accuracy.prompting import build_prompt
from pytest_triton_llm.accuracy.rouge import METRICS, per_article_scores
from pytest_triton_llm.accuracy.v1_summaries import V1_ENDPOINT, v1_summaries
from pytest_triton_llm.accuracy.verdicts import DRIFT_HEADER, as_report, drift_rows, judge_drift
from pytest_triton_llm.verdicts.equality import Rule, rule_of
from pytest_triton_llm.triton.load import Target, run_load
from pytest_triton_llm.openai.migration import PairsFileError
from pytest_triton_llm.perf.metrics import summarize
from pytest_triton_llm.perf.repeats import median_run
from pytest_triton_llm.common.tables import table
from pytest_triton_llm.openai.load import V1Target

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
        # and what both must be: max_tokens (the text re-encoded: give or take a merge), the prompt running on past it
        assert abs(counts[0] - max_tokens) <= 1, f"max_tokens {max_tokens}: both answers re-encode to {counts[0]} tokens"


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


V1_TOKENS = 24


TRITON_CONCURRENCY = 16  # the accuracy suite's


PAIRS_FILE = openai_migration.PAIRS_FILE


def _v1(openai_target, prompt: str, max_tokens: int = V1_TOKENS) -> str:
    return openai_target.endpoint.complete(openai_target.completion(prompt, max_tokens)).text


PERF_PROMPTS = 8  # each round: these prompts from both sides, PERF_CONCURRENCY at a time


PERF_CONCURRENCY = 4


PERF_ROUNDS = 3  # odd: the median round ratio is one round's


SHOWN = ("output_tokens_per_s", "ttft_ms", "itl_ms", "icl_ms", "latency_ms")  # of each side's median round


@pytest.fixture(scope="module")
def pair_entry(triton_llm, openai_target) -> dict:
    """fixtures/openai_migration.toml's entry for (the Triton side's engine, the endpoint's family), or {}."""
    try:
        return openai_migration.pair_entry(triton_llm.ref.engine_name, openai_target.family_name)
    except PairsFileError as exc:
        pytest.fail(str(exc), pytrace=False)


@pytest.fixture(scope="module")
def pair_rule(triton_llm, pair_entry) -> Rule:
    if "equality" in pair_entry:
        return Rule(**pair_entry["equality"])
    return rule_of(triton_llm)


class TestOverV1:
    """The same capability over an OpenAI endpoint: run with --openai-url, deselected without it."""

    def test_greedy_outputs_agree_on_the_prompts(self, triton_llm, openai_target, prompts, triton_llm_report, pair_rule):
        batch = prompts.batch()
        old = [triton_llm.client.generate(p, V1_TOKENS).text for p in batch]
        new = [_v1(openai_target, p) for p in batch]
        identical = sum(a == b for a, b in zip(old, new, strict=True))
        triton_llm_report.record(
            triton_llm.id,
            "migration_v1_prompts",
            {
                "against": openai_target.options.url,
                "family": openai_target.family_name,
                "stand_in": openai_target.stand_in,
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

    def test_chat_answers_agree_with_the_chat_endpoint(self, triton_llm, openai_target, prompts, triton_llm_report, pair_rule):
        """The chat questions through the Triton side's chat template (what a client of the ensemble renders) against
        /v1/chat/completions, which renders them with the served model's template: the same greedy answers under the
        pair's rule. A /v1 server whose template differs (another system prompt, no generation prompt) answers otherwise.
        The short question only: the capital question's first greedy token already differs between SmolLM2-135M's
        float32 checkpoint and its Q4_1 GGUF (2026-12-05), a quantization's difference, not a template's."""
        questions = [prompts.chat_short]
        old = [triton_llm.client.generate(triton_llm.chat_prompt(q), V1_TOKENS).text for q in questions]
        new = [openai_target.endpoint.chat(openai_target.chat(q, V1_TOKENS)).text for q in questions]
        triton_llm_report.record(
            triton_llm.id,
            "migration_v1_chat",
            {"against": openai_target.options.url, "rule": pair_rule.describe(), "asked": questions, "triton": old, "v1": new},
        )
        verdict = compare_texts(old, new, pair_rule, triton_llm.tokenizer)
        assert verdict.passed, verdict.report(decode=triton_llm.tokenizer.decode, labels=questions)

    def test_streams_add_up_to_the_unary_answer_on_both(self, triton_llm, openai_target, prompts, triton_llm_report):
        prompt = prompts.completion["language"]
        v1 = {"stream": openai_target.endpoint.stream("/completions", openai_target.completion(prompt, V1_TOKENS)).text}
        v1["unary"] = _v1(openai_target, prompt)
        triton = None
        if triton_llm.ref.options.decoupled:
            triton = {
                "stream": triton_llm.client.stream(prompt, V1_TOKENS).text,
                "unary": triton_llm.client.generate(prompt, V1_TOKENS).text,
            }
        triton_llm_report.record(triton_llm.id, "migration_v1_streams", {"prompt": prompt, "triton": triton, "v1": v1})
        assert v1["stream"] == v1["unary"]
        if triton is None:
            pytest.skip(f"{triton_llm.id} is not decoupled: its side does not stream (the /v1 side's stream added up)")
        assert triton["stream"] == triton["unary"]

    def test_max_tokens_gives_the_same_token_counts(self, triton_llm, openai_target, prompts):
        prompt = prompts.completion["columbus"]
        for max_tokens in (1, 7):
            triton_count = len(triton_llm.client.generate_ids(triton_llm.encode(prompt), max_tokens).token_ids)
            v1_count = openai_target.endpoint.complete(openai_target.completion(prompt, max_tokens)).usage["completion_tokens"]
            assert (triton_count, v1_count) == (max_tokens, max_tokens)

    def test_throughput_ttft_and_itl_side_by_side(
        self, triton_llm, openai_target, prompts, triton_llm_report, pair_entry, triton_llm_perf_options
    ):
        """The same greedy prompts streamed by the perf suite's load engine from both sides at PERF_CONCURRENCY (the Triton
        entry model over gRPC streams, /v1/completions over server-sent events), in PERF_ROUNDS interleaved rounds (A B,
        B A, A B) so that the machine's noise hits both sides of a round; each round's ratio of output tokens/s (a Triton
        streamed response or a /v1 content chunk counts one), and their median judged by the pair's min_throughput_ratio,
        else by --perf-migration-floor: never measured and left unjudged."""
        if not triton_llm.ref.options.decoupled:
            pytest.skip(f"{triton_llm.id} is not decoupled: its first token cannot be timed")
        batch = prompts.batch(PERF_PROMPTS)
        given = openai_target.options
        loads = {
            "triton": (
                Target(triton_llm.server.endpoints, model=triton_llm.client.ensemble),
                [triton_llm.client.ensemble_inputs(p, V1_TOKENS, stream=True) for p in batch],
            ),
            "v1": (
                V1Target(given.url, given.headers, given.ca_file),
                [openai_target.completion(p, V1_TOKENS, stream=True) for p in batch],
            ),
        }
        rounds: list[dict] = []
        for number in range(PERF_ROUNDS):
            measured = {}
            for side in ("triton", "v1") if number % 2 == 0 else ("v1", "triton"):
                records, seconds = run_load(*loads[side], concurrency=PERF_CONCURRENCY)
                measured[side] = summarize(records, seconds)
            rounds.append(measured)
        errors = {side: sum(r[side]["errors"] for r in rounds) for side in loads}
        # a side with failed requests has no throughput to compare: its errors fail the test below
        ratios = (
            []
            if any(errors.values())
            else [round(r["v1"]["output_tokens_per_s"] / r["triton"]["output_tokens_per_s"], 3) for r in rounds]
        )
        ratio = statistics.median(ratios) if ratios else None
        floor = pair_entry.get("min_throughput_ratio", triton_llm_perf_options.migration_floor)
        judged_by = {"file": str(PAIRS_FILE)} if "min_throughput_ratio" in pair_entry else {"option": "--perf-migration-floor"}
        sides = {side: median_run([r[side] for r in rounds]) for side in loads}
        triton_llm_report.record(
            triton_llm.id,
            "migration_v1_perf",
            {
                "against": given.url,
                "prompts": len(batch),
                "max_tokens": V1_TOKENS,
                "concurrency": PERF_CONCURRENCY,
                **{side: {k: sides[side][k] for k in ("requests", "errors", "output_tokens", *SHOWN)} for side in loads},
                "round_ratios": ratios,
                "v1_vs_triton_throughput_ratio": ratio,
                "budget": {**judged_by, "min_throughput_ratio": floor},
            },
        )
        assert errors == {"triton": 0, "v1": 0}, {side: [e for r in rounds for e in r[side]["error_samples"]] for side in loads}
        assert ratio >= floor, (
            f"/v1 at {ratio}x the Triton deployment's output tokens/s (the median of rounds {ratios}), below {floor} "
            f"({judged_by}); triton {sides['triton']['output_tokens_per_s']}, /v1 {sides['v1']['output_tokens_per_s']}"
        )

    @pytest.mark.triton_llm_trained_weights("ROUGE needs trained weights")
    def test_rouge_drops_no_more_than_allowed_article_by_article(
        self, triton_llm, openai_target, cnn, pair_entry, triton_llm_accuracy_options, triton_llm_report, triton_llm_progress
    ):
        """Both sides summarize the same articles greedily as the Triton engine's [accuracy] table says: the Triton side
        the rendered prompt, the /v1 side the same user message on /v1/chat/completions (its server renders the chat
        template, as users' clients will call it) or, for a plain prompt, the same text on /v1/completions. Each article's
        ROUGE is paired across the sides; the gate fails on a mean drop significantly above max_rouge_drop."""
        settings = triton_llm.ref.engine.accuracy
        if settings is None:
            pytest.skip(f"engine {triton_llm.ref.engine_name} has no [accuracy] table in its lock: no prompting to compare by")
        rule = triton_llm_accuracy_options.rule(settings)
        drop_from = "--accuracy-max-drop" if triton_llm_accuracy_options.max_drop is not None else "the lock's max_drop"
        if triton_llm_accuracy_options.max_drop is None and "max_rouge_drop" in pair_entry:
            rule, drop_from = (
                dataclasses.replace(rule, max_drop=pair_entry["max_rouge_drop"]),
                f"{PAIRS_FILE.name} max_rouge_drop",
            )
        tokenizer, max_input_len = triton_llm.tokenizer, triton_llm.ref.engine.max_input_len
        articles = cnn.articles
        prompts = [build_prompt(a, settings, tokenizer, max_input_len) for a in articles]
        with triton_llm_progress.step(f"migration to /v1: summarizing {len(articles)} articles on {triton_llm.id}"):
            old = [
                g.text for g in triton_llm.client.generate_many(prompts, settings.max_new_tokens, concurrency=TRITON_CONCURRENCY)
            ]
        with triton_llm_progress.step(f"migration to /v1: summarizing {len(articles)} articles on {openai_target.options.url}"):
            new = v1_summaries(openai_target, articles, settings, tokenizer, max_input_len)
        references = [a.reference for a in articles]
        before, now = per_article_scores(old, references), per_article_scores(new, references)
        results = judge_drift(before, now, rule)
        triton_llm_report.record(
            triton_llm.id,
            "migration_v1_rouge",
            {
                "against": openai_target.options.url,
                "family": openai_target.family_name,
                "stand_in": openai_target.stand_in,
                "v1_endpoint": V1_ENDPOINT[settings.prompt],
                "dataset": cnn.source,
                "articles": len(articles),
                "max_new_tokens": settings.max_new_tokens,
                "triton": {m: round(sum(before[m]) / len(articles), 2) for m in METRICS},
                "v1": {m: round(sum(now[m]) / len(articles), 2) for m in METRICS},
                "identical": sum(a == b for a, b in zip(old, new, strict=True)),
                "alpha": rule.alpha,
                "power": rule.power,
                "max_drop": rule.max_drop,
                "max_drop_from": drop_from,
                "paired": as_report(results),
            },
        )
        paired = "\n".join(table(DRIFT_HEADER, drift_rows(results)))
        where = f"{len(articles)} articles of {cnn.source}, the drop of /v1 from {triton_llm.id}, alpha {rule.alpha:g}"
        failed = [m for m, r in results.items() if r.verdict == "fail"]
        assert not failed, f"ROUGE on /v1 dropped significantly more than {rule.max_drop:g} points ({where}):\n{paired}"
        underpowered_drop_gate(results, rule, len(articles), where, paired)
