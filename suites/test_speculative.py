"""Speculative decoding on TensorRT-LLM's PyTorch path: an llmapi deployment whose model.yaml sets a
speculative_config, against an llmapi deployment of the same engine that does not speculate (the
`triton_llm_speculation` pair). Greedy answers with speculation must be the answers without, unary, streamed and in
a concurrent batch (NVIDIA/TensorRT-LLM#11125: gibberish answers once Eagle3 drafted); the draft counts the model
returns with sampling_param_return_perf_metrics must add up, and be counted at all (NVIDIA/TensorRT-LLM#17082: zeroed
in the PyTorch flow). The engine ensemble's speculation (draft tokens through tensorrt_llm, the BLS's draft model)
is the property matrix's (suites/test_properties.py: draft_tokens, draft_model, lookahead)."""

from __future__ import annotations

import statistics
import time
from concurrent.futures import ThreadPoolExecutor

import pytest

from pytest_triton_llm.host.hardware import hardware_class
from pytest_triton_llm.perf.budgets import Budget, find_budget
from pytest_triton_llm.stand_ins.triton_models.tensorrt_llm.ngram import NGramDrafter
from pytest_triton_llm.triton.llmapi_contract import DRAFT_OUTPUTS, output_number, output_text
from pytest_triton_llm.triton.llmapi_reasons import ended
from pytest_triton_llm.verdicts.equality import compare_texts, rule_of

TOKENS = 32  # past the copied sentence: the drafts after it are refused too
SPEED_TOKENS = 24  # about the copied sentence: the answers' part that drafts can predict
SPEED_ROUNDS = 3  # odd: the median round's ratio is one round's
NOT_SLOWER = 1.0  # the floor where no budget sets min_speedup_vs_no_speculation: speculation must not cost time
pytestmark = [pytest.mark.speculative, pytest.mark.triton_llm_requires("llmapi")]


@pytest.fixture(scope="session")
def speculation_rule(triton_llm_speculation):
    """The rule of the speculating side's engine: how equal its answers must be to the plain deployment's."""
    return rule_of(triton_llm_speculation[0])


def _answers(served, prompts: list[str], concurrently: bool = False) -> list[str]:
    if not concurrently:
        return [served.client.generate(p, TOKENS).text for p in prompts]
    with ThreadPoolExecutor(len(prompts)) as pool:
        return list(pool.map(lambda p: served.client.generate(p, TOKENS).text, prompts))


def _same(expected: list[str], actual: list[str], rule, served, what: str) -> None:
    verdict = compare_texts(expected, actual, rule, served.tokenizer)
    assert verdict.passed, verdict.report(labels=[f"{what}: {name}" for name in range(len(expected))])


@pytest.mark.functional
@pytest.mark.parametrize("mode", ["alone", "batched"])
def test_greedy_answers_with_speculation_equal_those_without(triton_llm_speculation, prompts, speculation_rule, mode):
    drafting, plain = triton_llm_speculation
    asked = list(prompts.copying.values()) + prompts.batch(2)  # answers that copy the prompt, and two that need not
    expected = _answers(plain, asked)
    _same(expected, _answers(drafting, asked, concurrently=mode == "batched"), speculation_rule, drafting, mode)


# max_tokens that end an answer inside the copied sentence, where a step keeps several draft tokens (max_draft_len 4)
CUT_AT = (5, 7)


@pytest.mark.functional
@pytest.mark.parametrize("mode", ["unary", "streamed", "batched"])
def test_stop_words_and_max_tokens_end_speculative_answers_where_they_end_those_without(
    triton_llm_speculation, prompts, speculation_rule, mode
):
    """A step that keeps several draft tokens can cross a stop word or max_tokens; the answer must still end where
    the one without speculation ends, nothing of the step after it (vLLM#47616 kept the tokens past a stop string,
    SGLang#31599 checked max_new_tokens first and emitted them), with the same finish and stop reasons: unary, streamed
    (the last response's text and reasons) and all of them at once. Stop words from the middle of each copied
    sentence, where drafts are kept."""
    drafting, plain = triton_llm_speculation
    if mode == "streamed" and not drafting.ref.options.decoupled:
        pytest.skip(f"{drafting.id} is not decoupled: it does not stream")
    asks = []
    for name, prompt in prompts.copying.items():
        words = plain.client.generate(prompt, TOKENS).text.split()
        if len(words) < 8:
            pytest.fail(f"{name}: the plain answer has {len(words)} words, too few to stop inside: {words}")
        asks += [(name, prompt, cut, {}) for cut in CUT_AT] + [(name, prompt, TOKENS, {"stop_words": [words[len(words) // 3]]})]
    expected = [_ended(plain, ask, "unary") for ask in asks]
    if mode == "batched":
        with ThreadPoolExecutor(len(asks)) as pool:
            got = list(pool.map(lambda ask: _ended(drafting, ask, "unary"), asks))
    else:
        got = [_ended(drafting, ask, mode) for ask in asks]
    for (name, _, tokens, options), (text, why), (spoken, said) in zip(asks, expected, got, strict=True):
        what = f"{mode} {name} max_tokens {tokens} {options}"
        _same([text], [spoken], speculation_rule, drafting, what)
        assert said == why, f"{what}: (finish, stop) reasons {said} with speculation, {why} without"
        # and what they must be: max_tokens cuts the copy (it runs past TOKENS), the stop word is named
        assert why == (("stop", options["stop_words"][0]) if options else ("length", "None")), f"{what}: {why}"


def _ended(served, ask: tuple, mode: str) -> tuple[str, tuple]:
    """The answer to one (name, prompt, max_tokens, options) and its (finish_reason, stop_reason)."""
    _, prompt, tokens, options = ask
    text, *why = ended(served.client, prompt, tokens, streamed=mode == "streamed", **options)
    return text, tuple(why)


@pytest.mark.streaming
@pytest.mark.triton_llm_requires("streaming")
def test_streamed_speculative_answers_equal_those_without_and_come_several_tokens_a_step(
    triton_llm_speculation, prompts, speculation_rule
):
    drafting, plain = triton_llm_speculation
    prompt = prompts.copying["fox"]
    expected = plain.client.generate(prompt, TOKENS).text
    events = drafting.client.stream(prompt, TOKENS).content_events
    texts = [e.text() for e in events]  # the llmapi model streams the text so far
    assert all(later.startswith(earlier) for earlier, later in zip(texts, texts[1:], strict=False)), texts
    _same([expected], texts[-1:], speculation_rule, drafting, "streamed")
    tokens = len(drafting.tokenizer.encode(texts[-1], add_special_tokens=False))
    # one response per step; a step that kept draft tokens carries them with the target's own: fewer steps than tokens
    assert len(events) < tokens, f"{len(events)} responses for {tokens} tokens: no step kept a draft token"


@pytest.mark.functional
@pytest.mark.triton_llm_requires("llmapi_perf_metrics")
def test_draft_counts_add_up_and_drafts_were_taken_on_a_copying_answer(triton_llm_speculation, prompts):
    drafting, plain = triton_llm_speculation
    prompt = prompts.copying["fox"]
    raw = drafting.client.generate(prompt, TOKENS, return_perf_metrics=True).raw
    rate, accepted, drafted = (output_number(raw, name) for name in DRAFT_OUTPUTS)
    tokens = len(drafting.tokenizer.encode(output_text(raw, "text_output"), add_special_tokens=False))
    # the first token comes from the context phase, undrafted; every later one may have been a kept draft token
    assert 1 <= accepted <= min(drafted, tokens - 1), (accepted, drafted, tokens)
    assert rate == pytest.approx(accepted / drafted, abs=1e-6), (rate, accepted, drafted)
    figures = [output_number(plain.client.generate(prompt, TOKENS, return_perf_metrics=True).raw, n) for n in DRAFT_OUTPUTS]
    assert figures == [0, 0, 0], f"the deployment that does not speculate counted drafts: {figures}"


@pytest.mark.functional
@pytest.mark.triton_llm_requires("llmapi_perf_metrics")
@pytest.mark.triton_llm_stand_in_only(
    "replays the drafter on the answer's re-encoded tokens: TensorRT-LLM's overlap scheduler drafts one step behind "
    "and CUDA-graph padding can count padded drafts, which the replay does not model"
)
def test_draft_counts_are_the_drafters_on_this_answer(triton_llm_speculation, prompts):
    drafting, _ = triton_llm_speculation
    config = drafting.ref.speculative_config
    if str(config.get("decoding_type", "")).lower() != "ngram" or config.get("is_public_pool", True):
        pytest.skip("the replay models a private NGram pool (speculative_config decoding_type NGram, is_public_pool false)")
    prompt = prompts.copying["garden"]
    raw = drafting.client.generate(prompt, TOKENS, return_perf_metrics=True).raw
    prompt_ids = drafting.tokenizer.encode(prompt)
    answer = drafting.tokenizer.encode(output_text(raw, "text_output"), add_special_tokens=False)
    drafter, drafted, accepted = NGramDrafter.from_config(config), 0, 0
    at = 1  # the context phase gave the first token; each later step drafts from the tokens so far
    while at < len(answer):
        draft = drafter.draft("replay", [*prompt_ids, *answer[:at]], len(prompt_ids) + TOKENS)
        kept = _agreeing(draft, answer[at:])
        drafted, accepted, at = drafted + len(draft), accepted + kept, at + kept + 1
    assert [output_number(raw, n) for n in DRAFT_OUTPUTS[1:]] == [accepted, drafted]


@pytest.mark.perf
@pytest.mark.triton_llm_requires("llmapi_perf_metrics")
def test_speculation_is_not_slower_at_concurrency_1_on_answers_that_copy_their_prompts(
    triton_llm_speculation, prompts, triton_llm_report, perf_budgets
):
    drafting, plain = triton_llm_speculation
    asked = list(prompts.copying.values())
    rounds = []
    for _ in range(SPEED_ROUNDS):  # interleaved: what the neighbours do slows both sides alike
        plain_s, _ = _timed(plain, asked)
        drafting_s, counts = _timed(drafting, asked)
        rounds.append({"no_speculation_s": plain_s, "speculation_s": drafting_s, **counts})
    speedup = statistics.median(r["no_speculation_s"] / r["speculation_s"] for r in rounds)
    budgets_file, budgets = perf_budgets
    identity = {"engine": drafting.ref.engine_name, "deployment": drafting.ref.name, "hardware": drafting.hardware}
    budget = find_budget(
        budgets, **identity, hardware_class=hardware_class(drafting.hardware), image=drafting.image, load_point="speculation"
    )
    if budget is None or budget.min_speedup_vs_no_speculation is None:
        budget = Budget(engine=drafting.ref.engine_name, min_speedup_vs_no_speculation=NOT_SLOWER)
    rows = budget.check({"speedup_vs_no_speculation": round(speedup, 3)})
    triton_llm_report.record(
        drafting.id,
        "speculation_perf",
        {
            "against": plain.id,
            "concurrency": 1,
            "prompts": len(asked),
            "rounds": rounds,
            "speedup": round(speedup, 3),
            "budget": rows,
        },
    )
    assert all(r["drafted"] > 0 for r in rounds), rounds
    assert not [row for row in rows if row[-1] == "MISSED"], f"speculation perf ({budgets_file}): {rows}; rounds {rounds}"


def _timed(served, asked: list[str]) -> tuple[float, dict]:
    """Seconds for the prompts one after the other, and the draft counts of their answers."""
    start, accepted, drafted = time.perf_counter(), 0, 0
    for prompt in asked:
        raw = served.client.generate(prompt, SPEED_TOKENS, return_perf_metrics=True).raw
        accepted += int(output_number(raw, "total_accepted_draft_tokens"))
        drafted += int(output_number(raw, "total_draft_tokens"))
    seconds = round(time.perf_counter() - start, 3)
    return seconds, {
        "accepted": accepted,
        "drafted": drafted,
        "acceptance_rate": round(accepted / drafted, 3) if drafted else 0.0,
    }


def _agreeing(draft: list[int], rest: list[int]) -> int:
    """How many of the draft's first tokens the answer goes on with."""
    return next((i for i, (d, t) in enumerate(zip(draft, rest, strict=False)) if d != t), min(len(draft), len(rest)))
