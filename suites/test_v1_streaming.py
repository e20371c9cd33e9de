"""Streaming over /v1 (server-sent events): the chunks add up to the unary text, they arrive while the model
generates, the stream ends with the unary finish_reason and [DONE], and streamed usage counts the tokens returned
(where the family's contract streams usage)."""

from __future__ import annotations

import pytest

pytestmark = pytest.mark.streaming

TOKENS = 32
PATHS = {"completions": "/completions", "chat": "/chat/completions"}


def _pair(openai_target, prompts, endpoint: str):
    """(unary answer, stream) of the same greedy request."""
    if endpoint == "chat":
        body = openai_target.chat(prompts.chat_question, TOKENS)
        return openai_target.endpoint.chat(body), openai_target.endpoint.stream(PATHS[endpoint], body)
    body = openai_target.completion(prompts.completion["village"], TOKENS)
    return openai_target.endpoint.complete(body), openai_target.endpoint.stream(PATHS[endpoint], body)


@pytest.mark.parametrize("endpoint", ["completions", "chat"])
def test_streamed_chunks_add_up_to_the_unary_text(openai_target, prompts, endpoint):
    unary, streamed = _pair(openai_target, prompts, endpoint)
    assert streamed.text == unary.text
    assert len(streamed.deltas) >= 2, f"{len(streamed.deltas)} text chunk(s): not streamed"


@pytest.mark.parametrize("endpoint", ["completions", "chat"])
def test_a_stream_ends_with_the_unary_finish_reason_and_done(openai_target, prompts, endpoint):
    unary, streamed = _pair(openai_target, prompts, endpoint)
    assert streamed.done, "the stream ended without data: [DONE]"
    assert streamed.finish_reason == unary.finish_reason


def test_chunks_arrive_while_the_model_generates(openai_target, prompts):
    """A server that buffers the answer and sends it at the end gives chunks that arrive together: here the first
    text chunk must come in the first half of the stream's time, the last in the second."""
    streamed = openai_target.endpoint.stream(
        PATHS["completions"], openai_target.completion(prompts.completion["village"], TOKENS)
    )
    total = streamed.times[-1] - streamed.sent_s
    first, last = streamed.times[0] - streamed.sent_s, streamed.times[-1] - streamed.times[0]
    assert first < total / 2 and last > total / 2, f"first chunk at {first:.3f} s, last {last:.3f} s after it, of {total:.3f} s"


@pytest.mark.parametrize("endpoint", ["completions", "chat"])
def test_streamed_usage_counts_the_tokens_returned(openai_target, prompts, endpoint):
    if why := openai_target.lacks("stream_options.include_usage"):
        pytest.skip(why)
    if endpoint == "chat":
        body = openai_target.chat(prompts.chat_question, TOKENS, stream_options={"include_usage": True})
        unary = openai_target.endpoint.chat(openai_target.chat(prompts.chat_question, TOKENS))
    else:
        body = openai_target.completion(prompts.completion["village"], TOKENS, stream_options={"include_usage": True})
        unary = openai_target.endpoint.complete(openai_target.completion(prompts.completion["village"], TOKENS))
    streamed = openai_target.endpoint.stream(PATHS[endpoint], body)
    assert streamed.usage_chunks == 1
    assert _counts(streamed.usage) == _counts(unary.usage)
    if openai_target.family.response.stream_usage.values[0].startswith("a last chunk"):  # the family's contract
        assert streamed.usage_alone_last, "the usage must come last, in a chunk of its own with choices [] (llama.cpp#15444)"
    # How many prompt tokens the KV cache held is the server's state, not the answer's: the unary request just put
    # this prompt in trtllm-serve's cache, so its stream may reuse it. Bounded, never compared.
    cached = (streamed.usage.get("prompt_tokens_details") or {}).get("cached_tokens", 0)
    assert 0 <= cached <= streamed.usage["prompt_tokens"], streamed.usage


def _counts(usage: dict) -> dict:
    return {key: usage[key] for key in ("prompt_tokens", "completion_tokens", "total_tokens")}
