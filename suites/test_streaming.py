"""Token streaming through the ensemble (stream=true) and the tensorrt_llm model (streaming=true).

Runs on decoupled deployments (in-flight batching); a V1 deployment must refuse streaming
with TensorRT-LLM's own error.
"""

from __future__ import annotations

import pytest

from pytest_triton_llm.triton.client import GenerationError
from pytest_triton_llm.triton.tensor_contract import NO_END

pytestmark = pytest.mark.streaming

TOKENS = 32


@pytest.mark.triton_llm_entry_models
@pytest.mark.triton_llm_requires("streaming", "inflight_batcher_llm")  # end_id -1: the llmapi model has none
def test_tokens_arrive_as_separate_responses(triton_llm, prompts):
    text = triton_llm.client.stream(prompts.completion["fox"], TOKENS, end_id=NO_END)
    assert len(text.content_events) == TOKENS


@pytest.mark.triton_llm_requires("streaming", "inflight_batcher_llm")
def test_the_core_model_streams_one_token_per_response(triton_llm, prompts):
    ids = triton_llm.encode(prompts.completion["fox"])
    result = triton_llm.client.stream_ids(ids, TOKENS, end_id=NO_END)
    assert [len(e.token_ids()) for e in result.content_events] == [1] * TOKENS


@pytest.mark.triton_llm_entry_models
@pytest.mark.triton_llm_requires("streaming")
@pytest.mark.parametrize("name", ["fox", "fibonacci", "language"])
def test_concatenated_stream_equals_the_non_streamed_output(triton_llm, prompts, name):
    prompt = prompts.completion[name]
    streamed = triton_llm.client.stream(prompt, TOKENS)
    assert streamed.text == triton_llm.client.generate(prompt, TOKENS).text


@pytest.mark.triton_llm_requires("streaming", "inflight_batcher_llm")
@pytest.mark.parametrize("name", ["fox", "fibonacci", "language"])
def test_the_core_models_stream_equals_its_non_streamed_ids(triton_llm, prompts, name):
    ids = triton_llm.encode(prompts.completion[name])
    assert triton_llm.client.stream_ids(ids, TOKENS).token_ids == triton_llm.client.generate_ids(ids, TOKENS).token_ids


@pytest.mark.triton_llm_entry_models
@pytest.mark.triton_llm_requires("streaming", "inflight_batcher_llm")  # end_id -1: the llmapi model has none
def test_first_token_arrives_well_before_the_last(triton_llm, prompts):
    result = triton_llm.client.stream(prompts.completion["village"], 64, end_id=NO_END)
    events = result.content_events
    first, last = events[0].t_s, events[-1].t_s
    assert len(events) == 64
    assert first < last / 4, f"first token after {first:.2f} s, last after {last:.2f} s: the output was not streamed"


def _one_final_flag_last(result) -> None:
    flags = [e.final for e in result.events]
    assert flags.count(True) == 1 and flags[-1], flags


@pytest.mark.triton_llm_entry_models
@pytest.mark.triton_llm_requires("streaming")
def test_only_the_last_response_is_flagged_final(triton_llm, prompts):
    _one_final_flag_last(triton_llm.client.stream(prompts.completion["columbus"], 16))


@pytest.mark.triton_llm_requires("streaming", "inflight_batcher_llm")
def test_only_the_core_models_last_response_is_flagged_final(triton_llm, prompts):
    _one_final_flag_last(triton_llm.client.stream_ids(triton_llm.encode(prompts.completion["columbus"]), 16))


@pytest.mark.triton_llm_entry_models
@pytest.mark.triton_llm_requires("streaming")
@pytest.mark.triton_llm_trained_weights("the known answer needs trained weights")
def test_http_generate_stream_and_grpc_streaming_agree(triton_llm, prompts):
    prompt = triton_llm.chat_prompt(prompts.chat_question)
    sse = triton_llm.client.stream(prompt, TOKENS, protocol="sse")
    grpc = triton_llm.client.stream(prompt, TOKENS, protocol="grpc")
    assert len(sse.content_events) > 1 and len(grpc.content_events) > 1
    assert sse.text == grpc.text
    assert prompts.chat_expected in grpc.text


@pytest.mark.triton_llm_entry_models
@pytest.mark.triton_llm_requires("v1")
def test_v1_refuses_streaming_with_tensorrt_llm_error(triton_llm, prompts):
    with pytest.raises(GenerationError, match="Streaming is only supported if model is deployed using decoupled mode"):
        triton_llm.client.stream(prompts.completion["fox"], 8)
    assert triton_llm.server.ready()
