"""Functional conformance of an OpenAI-compatible endpoint (--openai-url): the model list, greedy determinism,
max_tokens exact and never exceeded, stop strings, seeds and log probabilities, on /v1/completions and
/v1/chat/completions. What the server family's contract (openai_families.toml) says it does not honour is skipped
with the contract's words."""

from __future__ import annotations

import math

import pytest

pytestmark = pytest.mark.functional

LONG = 48  # tokens of the reference greedy text that the max_tokens and stop checks cut
SEEDS = (1, 2, 3, 4)


@pytest.fixture(scope="module")
def long_greedy(openai_target, prompts):
    """The greedy completion of the village prompt, LONG tokens: what shorter requests must be prefixes of."""
    answer = openai_target.endpoint.complete(openai_target.completion(prompts.completion["village"], LONG))
    # a precondition, not the check: the model must not have ended before LONG tokens (whether the count and the
    # finish reason are exact is what the tests check)
    assert answer.usage["completion_tokens"] >= LONG, f"the model ended by itself ({answer.usage}): {answer.text!r}"
    return answer


def test_v1_models_lists_the_served_model(openai_target, prompts):
    """Listed once, and named by the answers to requests for it (a client that routes or bills by the answer's
    `model` must find the listed id there)."""
    listed = openai_target.endpoint.models()
    assert [m["id"] for m in listed].count(openai_target.model) == 1
    assert all(m["object"] == "model" for m in listed)
    completion = openai_target.endpoint.complete(openai_target.completion(prompts.completion["fox"], 2))
    chat = openai_target.endpoint.chat(openai_target.chat(prompts.chat_question, 2))
    assert (completion.body["model"], chat.body["model"]) == (openai_target.model, openai_target.model)


@pytest.mark.parametrize("endpoint", ["completions", "chat"])
def test_greedy_answer_is_deterministic(openai_target, prompts, endpoint):
    if endpoint == "chat":
        body = openai_target.chat(prompts.chat_question, 24)
        first, second = openai_target.endpoint.chat(body), openai_target.endpoint.chat(body)
    else:
        body = openai_target.completion(prompts.completion["fox"], 24)
        first, second = openai_target.endpoint.complete(body), openai_target.endpoint.complete(body)
    assert first.text, "the model generated nothing"
    assert (second.text, second.usage["completion_tokens"]) == (first.text, first.usage["completion_tokens"])


@pytest.mark.parametrize("max_tokens", [1, 5, 16])
def test_max_tokens_cuts_the_greedy_text_at_exactly_that_many_tokens(openai_target, prompts, long_greedy, max_tokens):
    expected_reason = openai_target.max_tokens_finish_reason
    if expected_reason is None:
        pytest.skip(f"{openai_target.family.title}: the finish_reason of a completion cut by max_tokens is unknown")
    answer = openai_target.endpoint.complete(openai_target.completion(prompts.completion["village"], max_tokens))
    assert answer.usage["completion_tokens"] == max_tokens
    assert answer.finish_reason == expected_reason
    assert long_greedy.text.startswith(answer.text), (answer.text, long_greedy.text)


def test_a_stop_string_ends_the_text_before_it(openai_target, prompts, long_greedy):
    if why := openai_target.lacks("stop"):
        pytest.skip(why)
    words = long_greedy.text.split()
    stop = next(w for w in words[3:] if long_greedy.text.index(w) > 8 and w.isalpha())  # a word well inside the text
    answer = openai_target.endpoint.complete(openai_target.completion(prompts.completion["village"], LONG, stop=[stop]))
    assert answer.text == long_greedy.text[: long_greedy.text.index(stop)]
    assert answer.finish_reason == "stop"
    assert answer.usage["completion_tokens"] < LONG


def test_the_same_seed_samples_the_same_text_and_other_seeds_other_texts(openai_target, prompts):
    if why := openai_target.lacks("seed"):
        pytest.skip(why)
    sampled = {}
    for seed in SEEDS:
        body = openai_target.completion(prompts.completion["haiku"], 24, temperature=1.0, seed=seed)
        first, second = openai_target.endpoint.complete(body), openai_target.endpoint.complete(body)
        assert second.text == first.text, f"seed {seed} sampled two texts"
        sampled[seed] = first.text
    assert len(set(sampled.values())) > 1, f"{len(SEEDS)} seeds at temperature 1 sampled one text: {sampled}"


def test_log_probs_describe_the_greedy_tokens(openai_target, prompts):
    if why := openai_target.lacks("logprobs"):
        pytest.skip(why)
    answer = openai_target.endpoint.complete(openai_target.completion(prompts.completion["fox"], 12, logprobs=2))
    logprobs = answer.logprobs
    assert logprobs is not None, "logprobs=2 answered no logprobs"
    assert len(logprobs["tokens"]) == len(logprobs["token_logprobs"]) == answer.usage["completion_tokens"]
    assert "".join(logprobs["tokens"]) == answer.text
    for token, logprob, top in zip(logprobs["tokens"], logprobs["token_logprobs"], logprobs["top_logprobs"], strict=True):
        assert logprob <= 0.0 and math.isfinite(logprob)
        assert len(top) == 2
        # greedy: the chosen token is the likeliest (ties aside)
        assert logprob >= max(top.values()) - 1e-4, (token, logprob, top)
