"""Ending requests early: TensorRT-LLM's stop signal (upstream client --stop-after-ms) and
clients that cancel their gRPC stream (--stop-via-request-cancel).

Both go straight to the decoupled tensorrt_llm model, as upstream's client does.

Over /v1 (class TestOverV1, run with --openai-url):
Early stop over /v1: a client that closes its stream frees the server, which then does not finish the abandoned
request before answering the next one."""

from __future__ import annotations

import re
import time
from concurrent.futures import ThreadPoolExecutor
import pytest
from pytest_triton_llm.verdicts.equality import compare
from pytest_triton_llm.triton.client import GenerationError
from pytest_triton_llm.triton.tensor_contract import NO_END

pytestmark = [pytest.mark.early_stop, pytest.mark.triton_llm_requires("cancellation", "inflight_batcher_llm")]


LONG = 256  # far more tokens than are generated before the stop arrives


def active_requests(triton_llm) -> float:
    """TensorRT-LLM's nv_trt_llm_request_metrics{request_type="active"} gauge."""
    pattern = re.compile(r'^nv_trt_llm_request_metrics\{[^}]*request_type="active"[^}]*\} (\S+)$', re.M)
    match = pattern.search(triton_llm.client.metrics())
    assert match, "the server publishes no nv_trt_llm_request_metrics active gauge"
    return float(match.group(1))


def wait_until_idle(triton_llm, timeout_s: float = 15.0) -> float:
    deadline = time.monotonic() + timeout_s
    while (active := active_requests(triton_llm)) > 0 and time.monotonic() < deadline:
        time.sleep(0.1)
    return active


@pytest.mark.triton_llm_requires("stop_request")
@pytest.mark.parametrize("streaming", [True, False], ids=["streaming", "non-streaming"])
def test_stop_after_ms_returns_fewer_tokens_than_requested(triton_llm, prompts, streaming, equality_rule):
    ids = triton_llm.encode(prompts.completion["village"])
    result = triton_llm.client.stream_ids(
        ids, LONG, end_id=NO_END, streaming=streaming, request_id=f"stop-{streaming}", stop_after_s=0.5
    )
    assert 0 < len(result.token_ids) < LONG
    assert result.finals == 2, "the stopped request and the stop signal each end with a final response"
    full = triton_llm.client.generate_ids(ids, len(result.token_ids), end_id=NO_END).token_ids
    verdict = compare([full], [result.token_ids], equality_rule)  # the tokens before the stop are the greedy ones
    assert verdict.passed, verdict.report(decode=triton_llm.tokenizer.decode)


def test_a_cancelled_stream_frees_its_slot(triton_llm, prompts, equality_rule):
    ids = triton_llm.encode(prompts.completion["columbus"])
    expected = triton_llm.client.generate_ids(ids, 12, end_id=NO_END).token_ids
    slots = triton_llm.ref.engine.max_batch_size
    with ThreadPoolExecutor(slots) as pool:  # fill every slot, then walk away from all of them
        cancelled = list(
            pool.map(lambda _: triton_llm.client.stream_ids(ids, LONG, end_id=NO_END, cancel_after_s=1.0), range(slots))
        )
    assert all(r.cancelled and len(r.token_ids) < LONG for r in cancelled)
    assert wait_until_idle(triton_llm) == 0, "cancelled requests still hold their slots"
    with ThreadPoolExecutor(4) as pool:
        later = list(pool.map(lambda _: triton_llm.client.generate_ids(ids, 12, end_id=NO_END).token_ids, range(4)))
    verdict = compare([expected] * 4, later, equality_rule)  # 4 at once: half-precision kernels are not batch-invariant
    assert verdict.passed, verdict.report(decode=triton_llm.tokenizer.decode)
    assert triton_llm.server.ready()


@pytest.mark.triton_llm_requires("stop_request")
def test_stopping_one_request_leaves_concurrent_ones_unchanged(triton_llm, prompts, equality_rule):
    others = [triton_llm.encode(p) for p in [prompts.completion[n] for n in ("fibonacci", "colors", "machine_learning")]]
    solo = [triton_llm.client.generate_ids(ids, 24, end_id=NO_END).token_ids for ids in others]
    victim = triton_llm.encode(prompts.completion["fox"])
    with ThreadPoolExecutor(4) as pool:
        stopped = pool.submit(triton_llm.client.stream_ids, victim, LONG, end_id=NO_END, request_id="victim", stop_after_s=0.4)
        together = [pool.submit(triton_llm.client.generate_ids, ids, 24, end_id=NO_END) for ids in others]
        results = [f.result().token_ids for f in together]
    assert len(stopped.result().token_ids) < LONG
    verdict = compare(solo, results, equality_rule)
    assert verdict.passed, verdict.report(decode=triton_llm.tokenizer.decode)


UNKNOWN_REQUEST = "987654321"  # numeric: tensorrtllm_backend before v0.9.0 refused an id that is not a uint64 first


@pytest.mark.triton_llm_requires("stop_request")
def test_a_stop_signal_for_an_unknown_request_is_answered_as_its_version_does_and_harms_nothing(triton_llm, prompts, contract):
    """The family's answer (fixtures/contracts/<family>.toml [answers]): an error before the executor API, one empty
    final response since; either way the server serves on and nothing stays active."""
    expected = contract["answers"]["stop_of_an_unknown_request"]
    if "error" in expected:
        with pytest.raises(GenerationError, match=re.escape(expected["error"])):
            triton_llm.client.send_stop(UNKNOWN_REQUEST)
    else:
        answer = triton_llm.client.send_stop(UNKNOWN_REQUEST)
        assert answer.finals == 1 and not answer.content_events
    ids = triton_llm.encode(prompts.completion["colors"])
    assert len(triton_llm.client.generate_ids(ids, 8, end_id=NO_END).token_ids) == 8
    assert wait_until_idle(triton_llm) == 0


ABANDONED = 400  # tokens the closed stream asked for


READ = 3  # text chunks read before closing


def _no_early_end(openai_target) -> dict:
    """ignore_eos where the family honours it, so that the abandoned request would really run ABANDONED tokens."""
    return {} if openai_target.lacks("ignore_eos") else {"ignore_eos": True}


class TestOverV1:
    """The same capability over an OpenAI endpoint: run with --openai-url, deselected without it."""

    def test_a_client_that_closes_its_stream_frees_the_server(self, openai_target, prompts):
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
