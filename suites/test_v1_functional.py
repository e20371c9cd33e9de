"""Functional conformance of an OpenAI-compatible endpoint (--openai-url): the model list, greedy determinism,
max_tokens exact and never exceeded, stop strings, seeds and log probabilities, on /v1/completions and
/v1/chat/completions; the extension fields ignore_eos and min_tokens, and trtllm-serve's /perf_metrics. What the server
family's contract (openai_families.toml) says it does not honour is skipped with the contract's words."""

from __future__ import annotations

import math

import pytest

pytestmark = pytest.mark.functional

LONG = 48  # tokens of the reference greedy text that the max_tokens and stop checks cut
SEEDS = (1, 2, 3, 4)
ROOM = 256  # tokens the greedy answer of the fox prompt must end within, by itself
PAST_THE_END = 8  # tokens asked for beyond where the greedy answer ends


@pytest.fixture(scope="module")
def long_greedy(openai_target, prompts):
    """The greedy completion of the village prompt, LONG tokens: what shorter requests must be prefixes of."""
    answer = openai_target.endpoint.complete(openai_target.completion(prompts.completion["village"], LONG))
    # a precondition, not the check: the model must not have ended before LONG tokens (whether the count and the
    # finish reason are exact is what the tests check)
    assert answer.usage["completion_tokens"] >= LONG, f"the model ended by itself ({answer.usage}): {answer.text!r}"
    return answer


@pytest.fixture(scope="module")
def ended_greedy(openai_target, prompts):
    """The greedy completion of the fox prompt, which ends by itself (its finish_reason "stop") within ROOM tokens."""
    answer = openai_target.endpoint.complete(openai_target.completion(prompts.completion["fox"], ROOM))
    # a precondition, not the check: the ignore_eos and min_tokens checks need an answer that ends by itself
    assert answer.finish_reason == "stop", f"the greedy answer must end on its own within {ROOM} tokens: {answer.text!r}"
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


def test_chat_log_probs_describe_each_greedy_token_at_its_own_position(openai_target, prompts):
    """Each position's top_logprobs lists its own chosen token first, at the chosen log prob (greedy: the likeliest),
    not another position's (sglang#2088)."""
    field = openai_target.family.fields.get("top_logprobs")
    if field is None or field.supported not in ("yes", "partial"):  # partial: chat only, with logprobs true, as here
        pytest.skip(openai_target.family.why_not("top_logprobs") if field else "no top_logprobs field")
    answer = openai_target.endpoint.chat(openai_target.chat(prompts.chat_question, 12, logprobs=True, top_logprobs=2))
    content = (answer.logprobs or {}).get("content")
    assert content, "logprobs true with top_logprobs 2 answered no logprobs content"
    for position in content:
        listed = {t["token"]: t["logprob"] for t in position["top_logprobs"]}
        assert len(position["top_logprobs"]) == 2, f"top_logprobs 2 listed {listed} at {position['token']!r}"
        assert position["token"] in listed, f"the chosen {position['token']!r} is not among its alternatives {listed}"
        assert abs(listed[position["token"]] - position["logprob"]) <= 1e-4, (position, listed)
        assert position["logprob"] >= max(listed.values()) - 1e-4, (position, listed)  # greedy: the likeliest


def test_ignore_eos_runs_past_the_end_to_exactly_max_tokens(openai_target, prompts, ended_greedy):
    """A benchmark's fixed output lengths rest on it: the answer goes on past where the model would end."""
    if why := openai_target.lacks("ignore_eos"):
        pytest.skip(why)
    wanted = ended_greedy.usage["completion_tokens"] + PAST_THE_END
    answer = openai_target.endpoint.complete(openai_target.completion(prompts.completion["fox"], wanted, ignore_eos=True))
    assert answer.usage["completion_tokens"] == wanted, (answer.finish_reason, answer.text)
    if openai_target.max_tokens_finish_reason is not None:
        assert answer.finish_reason == openai_target.max_tokens_finish_reason
    assert answer.text.startswith(ended_greedy.text), (answer.text, ended_greedy.text)


def test_min_tokens_holds_the_end_back(openai_target, prompts, ended_greedy):
    """At least min_tokens tokens, the greedy answer unchanged up to where it ended."""
    if why := openai_target.lacks("min_tokens"):
        pytest.skip(why)
    least = ended_greedy.usage["completion_tokens"] + PAST_THE_END
    body = openai_target.completion(prompts.completion["fox"], least + ROOM, min_tokens=least)
    answer = openai_target.endpoint.complete(body)
    assert answer.usage["completion_tokens"] >= least, (answer.finish_reason, answer.text)
    assert answer.text.startswith(ended_greedy.text), (answer.text, ended_greedy.text)


PERF_METRICS = "/perf_metrics"
TIMES = ("arrival_time", "first_scheduled_time", "first_token_time", "last_token_time")
KEPT_WHEN = (
    "trtllm-serve fills it only when run with return_perf_metrics and perf_metrics_max_requests > 0 (--extra_llm_api_options)"
)


def test_perf_metrics_time_each_request_in_order(openai_target, prompts):
    """trtllm-serve's /perf_metrics: an entry per finished request, its executor timestamps in the order of a request's
    life, each entry handed out once (a read drains them). Skipped where the server keeps none (KEPT_WHEN)."""
    if PERF_METRICS not in openai_target.family.endpoints:
        pytest.skip(f"{openai_target.family.title}: no {PERF_METRICS} endpoint")
    openai_target.endpoint.request("GET", PERF_METRICS, under_v1=False)  # what earlier requests left
    for prompt in prompts.batch(2):
        openai_target.endpoint.complete(openai_target.completion(prompt, 8))
    first = openai_target.endpoint.request("GET", PERF_METRICS, under_v1=False)
    assert first.status == 200, first.body
    if first.body == []:
        pytest.skip(f"the server keeps no perf metrics ({PERF_METRICS} answered []): {KEPT_WHEN}")
    second = openai_target.endpoint.request("GET", PERF_METRICS, under_v1=False)
    ids = [entry["request_id"] for entry in first.body]
    assert len(ids) >= 2 and len(set(ids)) == len(ids), ids  # the two requests (and any other client's), each once
    assert not {entry["request_id"] for entry in second.body} & set(ids), "a read handed out entries a read before had"
    for entry in first.body:
        timing = entry["perf_metrics"]["timing_metrics"]
        times = [timing[name] for name in TIMES]
        assert times == sorted(times), dict(zip(TIMES, times, strict=True))
