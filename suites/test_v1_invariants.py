"""Serving invariants over /v1 (MLPerf TEST06's questions asked of an OpenAI endpoint): usage adds up, concurrent
requests get the answers they get alone, and concurrent streams are whole, each ending as it does alone."""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor

import pytest

from pytest_triton_llm.verdicts.equality import assert_agree

pytestmark = pytest.mark.invariants

TOKENS = 16
CONCURRENT = 4


def test_usage_adds_up(openai_target, prompts):
    """The totals add up, and completion_tokens counts what was generated: exactly max_tokens where max_tokens cut
    the answer (its finish_reason says so), fewer where the model stopped. A family that answers "stop" for both
    (Triton's openai_frontend) cannot say which ended an answer: there only the bounds are checked."""
    cut = openai_target.max_tokens_finish_reason
    cut = None if cut == "stop" else cut
    for prompt in prompts.batch(CONCURRENT):
        answer = openai_target.endpoint.complete(openai_target.completion(prompt, TOKENS))
        usage = answer.usage
        assert usage["total_tokens"] == usage["prompt_tokens"] + usage["completion_tokens"], usage
        assert usage["prompt_tokens"] > 0 and 0 < usage["completion_tokens"] <= TOKENS, usage
        if cut is not None and answer.finish_reason == cut:
            assert usage["completion_tokens"] == TOKENS, (answer.finish_reason, usage, answer.text)


def test_concurrent_requests_get_the_answers_they_get_alone(openai_target, prompts, openai_equality_rule):
    batch = prompts.batch(CONCURRENT)
    alone = [openai_target.endpoint.complete(openai_target.completion(p, TOKENS)).text for p in batch]
    with ThreadPoolExecutor(CONCURRENT) as pool:
        together = list(pool.map(lambda p: openai_target.endpoint.complete(openai_target.completion(p, TOKENS)).text, batch))
    assert_agree(alone, together, openai_equality_rule, openai_target.tokenizer)


def test_concurrent_streams_are_whole_and_end_as_they_do_alone(openai_target, prompts, openai_equality_rule):
    """A server that ends one stream early when another request arrives (llama-cpp-python's interrupt_requests,
    its default) fails here: that stream stops short of its unary text (an early divergence, which no rule allows)."""
    batch = prompts.batch(CONCURRENT)
    alone = [openai_target.endpoint.complete(openai_target.completion(p, TOKENS)) for p in batch]
    with ThreadPoolExecutor(CONCURRENT) as pool:
        streams = list(
            pool.map(lambda p: openai_target.endpoint.stream("/completions", openai_target.completion(p, TOKENS)), batch)
        )
    assert_agree([a.text for a in alone], [s.text for s in streams], openai_equality_rule, openai_target.tokenizer)
    assert all(s.done for s in streams), [s.done for s in streams]
    same = [(s.finish_reason, a.finish_reason) for s, a in zip(streams, alone, strict=True) if s.text == a.text]
    assert all(mine == theirs for mine, theirs in same), same
