"""Early stop over /v1: a client that closes its stream frees the server, which then does not finish the abandoned
request before answering the next one."""

from __future__ import annotations

import time

import pytest

pytestmark = pytest.mark.early_stop

ABANDONED = 400  # tokens the closed stream asked for
READ = 3  # text chunks read before closing


def test_a_client_that_closes_its_stream_frees_the_server(openai_target, prompts):
    """Measured as a ratio on one server: the next request must answer in under half the time the abandoned one
    would still have taken (its remaining tokens at the stream's own pace). A server that serves one request at a
    time and generates on for a gone client fails; a batching server passes either way (its active-request count
    is not read here)."""
    body = openai_target.completion(prompts.completion["village"], ABANDONED, **_no_early_end(openai_target))
    length = openai_target.endpoint.complete(body).usage["completion_tokens"]  # what the abandoned one would run
    assert length > 10 * READ, f"the greedy answer ends after {length} tokens: too short to tell"
    streamed = openai_target.endpoint.stream("/completions", body, stop_after=READ)
    assert streamed.closed_early and len(streamed.deltas) == READ
    per_token_s = (streamed.times[-1] - streamed.times[0]) / (READ - 1)
    start = time.perf_counter()
    answer = openai_target.endpoint.complete(openai_target.completion(prompts.completion["fox"], 4))
    waited = time.perf_counter() - start
    remaining = (length - READ) * per_token_s
    assert answer.usage["completion_tokens"] == 4
    assert waited < remaining / 2, f"the next request took {waited:.2f} s; the abandoned one had {remaining:.2f} s to go"


def _no_early_end(openai_target) -> dict:
    """ignore_eos where the family honours it, so that the abandoned request would really run ABANDONED tokens."""
    return {} if openai_target.lacks("ignore_eos") else {"ignore_eos": True}
