"""Robustness: malformed and hostile requests get an error (or a valid answer), never a crash.

Every case runs on every deployment of its layout (the engine line's ensemble and tensorrt_llm, or the llmapi
model); after each one the server must still be alive and ready, and after all of them a known greedy answer must
still come back unchanged.
"""

from __future__ import annotations

import json
import time
import urllib.error
import urllib.request
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import pytest

from pytest_triton_llm.client import GenerationError, Sampling
from pytest_triton_llm.tensor_contract import NO_END, Unbatched

pytestmark = pytest.mark.robustness

PROMPT = "The quick brown fox"
ERROR, ANSWER, EITHER = "error", "answer", "error or answer"


def ensemble(served, inputs: dict):
    return served.client.request("ensemble", inputs)


def core(served, **inputs):
    base = {"input_ids": (np.asarray([served.encode(PROMPT)], dtype=np.int32), "INT32"),
            "input_lengths": (len(served.encode(PROMPT)), "INT32"), "request_output_len": (4, "INT32")}  # fmt: skip
    return served.client.request("tensorrt_llm", {**base, **inputs})


def post_generate(served, body: bytes, model: str = "ensemble"):
    request = urllib.request.Request(f"http://{served.server.endpoints.http}/v2/models/{model}/generate", data=body)
    try:
        with urllib.request.urlopen(request, timeout=60) as resp:  # noqa: S310 (loopback)
            return json.loads(resp.read())
    except urllib.error.HTTPError as exc:
        raise GenerationError(f"HTTP {exc.code}: {exc.read().decode(errors='replace')}") from None


CASES = {
    "missing text_input": (ERROR, lambda s: ensemble(s, {"max_tokens": (8, "INT32")})),
    "missing max_tokens": (ERROR, lambda s: ensemble(s, {"text_input": (b"hi", "BYTES")})),
    "max_tokens sent as FP32": (ERROR, lambda s: ensemble(s, {"text_input": (b"hi", "BYTES"), "max_tokens": (8.0, "FP32")})),
    "text_input of shape [1, 2]": (
        ERROR,
        lambda s: ensemble(s, {"text_input": (np.array([[b"a", b"b"]], dtype=object), "BYTES"), "max_tokens": (8, "INT32")}),
    ),  # fmt: skip
    "max_tokens 0": (ERROR, lambda s: s.client.generate(PROMPT, 0)),
    "max_tokens -5": (ERROR, lambda s: s.client.generate(PROMPT, -5)),
    # TensorRT-LLM cuts the output to what max_seq_len leaves (a warning there)
    "max_tokens 2**31-1": (EITHER, lambda s: s.client.generate(PROMPT, 2**31 - 1)),
    "input longer than max_input_len": (ERROR, lambda s: s.client.generate("word " * 3000, 8)),
    "1 MB input": (ERROR, lambda s: s.client.generate("x" * 1_000_000, 8)),
    "invalid UTF-8": (ERROR, lambda s: s.client.generate(b"\xff\xfe\xfa not utf-8", 8)),
    "empty text": (EITHER, lambda s: s.client.generate("", 8)),  # a tokenizer that adds BOS makes it a 1-token prompt
    "10,000 stop words": (ANSWER, lambda s: s.client.generate(PROMPT, 8, stop_words=[f"zq{i}x" for i in range(10_000)])),
    "10,000 bad words": (ANSWER, lambda s: s.client.generate(PROMPT, 8, bad_words=[f"zq{i}x" for i in range(10_000)])),
    "end_id outside the vocabulary": (ANSWER, lambda s: s.client.generate(PROMPT, 8, end_id=10**7)),
    "negative pad_id": (ANSWER, lambda s: s.client.generate(PROMPT, 8, pad_id=-7)),
    "top_p 2.0": (ERROR, lambda s: s.client.generate(PROMPT, 8, sampling=Sampling(top_k=5, top_p=2.0))),
    "negative temperature": (ERROR, lambda s: s.client.generate(PROMPT, 8, sampling=Sampling(top_k=5, temperature=-1.0))),
    "beam_width 4": (ERROR, lambda s: core(s, beam_width=(4, "INT32"))),
    # TensorRT-LLM checks neither: an id past the vocabulary indexes past the embedding table (see STAND_IN_ONLY)
    "input ids outside the vocabulary": (
        ERROR,
        lambda s: core(s, input_ids=(np.asarray([[10**7, 3]], dtype=np.int32), "INT32"), input_lengths=(2, "INT32")),
    ),  # fmt: skip
    "input_lengths beyond input_ids": (EITHER, lambda s: core(s, input_lengths=(999, "INT32"))),
    "malformed stop_words_list offsets": (
        ERROR,
        lambda s: core(s, stop_words_list=(np.asarray([[[5, 6], [7, 1]]], dtype=np.int32), "INT32")),
    ),  # fmt: skip
    "unknown LoRA task id": (ERROR, lambda s: core(s, lora_task_id=(987654, "UINT64"))),
    "unknown model": (ERROR, lambda s: s.client.request("no_such_model", {"text_input": (b"hi", "BYTES")})),
    "garbage JSON to generate": (ERROR, lambda s: post_generate(s, b'{"text_input": "hi", "max_tokens": ')),
    "generate with a string max_tokens": (ERROR, lambda s: post_generate(s, b'{"text_input": "hi", "max_tokens": "lots"}')),
}



def llmapi(served, drop=(), **extra):
    """A text request to the llmapi model with inputs left out or added (shaped as the served model takes them)."""
    inputs = {k: v for k, v in served.client.ensemble_inputs(PROMPT, 8).items() if k not in drop}
    unbatched = isinstance(inputs["sampling_param_max_tokens"][0], Unbatched)  # upstream's max_batch_size 0
    inputs.update({k: (Unbatched.of(value, dtype) if unbatched else value, dtype) for k, (value, dtype) in extra.items()})
    return served.client.request("tensorrt_llm", inputs)


# The llmapi model's cases. Where upstream's answer was not read (SamplingParams validation in TensorRT-LLM), a case
# accepts either outcome: what it checks is that the server survives and an error says something.
LLMAPI_CASES = {
    "missing text_input": (ERROR, lambda s: llmapi(s, drop=("text_input",))),
    "max_tokens 0": (EITHER, lambda s: s.client.generate(PROMPT, 0)),
    "max_tokens -5": (EITHER, lambda s: s.client.generate(PROMPT, -5)),
    "max_tokens 2**31-1": (EITHER, lambda s: s.client.generate(PROMPT, 2**31 - 1)),
    "input longer than max_input_len": (ERROR, lambda s: s.client.generate("word " * 3000, 8)),
    "1 MB input": (ERROR, lambda s: s.client.generate("x" * 1_000_000, 8)),
    "invalid UTF-8": (EITHER, lambda s: s.client.generate(b"\xff\xfe\xfa not utf-8", 8)),
    "empty text": (EITHER, lambda s: s.client.generate("", 8)),
    "1,000 stop strings": (ANSWER, lambda s: s.client.generate(PROMPT, 8, stop_words=[f"zq{i}x" for i in range(1000)])),
    "top_p 2.0": (EITHER, lambda s: s.client.generate(PROMPT, 8, sampling=Sampling(top_k=5, top_p=2.0))),
    "negative temperature": (EITHER, lambda s: s.client.generate(PROMPT, 8, sampling=Sampling(top_k=5, temperature=-1.0))),
    # upstream's model.py: a stop request needs the id of the request it stops
    "stop without a request id": (ERROR, lambda s: llmapi(s, stop=(True, "BOOL"))),
    "unknown model": (ERROR, lambda s: s.client.request("no_such_model", {"text_input": (b"hi", "BYTES")})),
    "garbage JSON to generate": (ERROR, lambda s: post_generate(s, b'{"text_input": "hi", "sampling_param_max_tokens": ',
                                                                "tensorrt_llm")),
    "generate with a string max_tokens": (ERROR, lambda s: post_generate(
        s, b'{"text_input": "hi", "sampling_param_max_tokens": "lots"}', "tensorrt_llm")),
}  # fmt: skip


@pytest.fixture(scope="session")
def known_answer(triton_llm, prompts):
    """The greedy chat answer before any hostile request."""
    return triton_llm.client.generate(triton_llm.chat_prompt(prompts.chat_question), 24).text


@pytest.mark.triton_llm_trained_weights("the known answer needs trained weights")
def test_a_known_answer_before_the_hostile_requests(triton_llm, known_answer, prompts):
    assert prompts.chat_expected in known_answer


STAND_IN_ONLY = {"input ids outside the vocabulary": "TensorRT-LLM does not check ids against the vocabulary"}
FLOODS = ("1 MB input", "10,000 stop words", "10,000 bad words", "1,000 stop strings")  # stress a server: triton_llm_load


def _marks(case: str) -> list:
    marks = [pytest.mark.triton_llm_stand_in_only(STAND_IN_ONLY[case])] if case in STAND_IN_ONLY else []
    return marks + ([pytest.mark.triton_llm_load] if case in FLOODS else [])


@pytest.mark.triton_llm_requires("inflight_batcher_llm")
@pytest.mark.parametrize("case", [pytest.param(c, marks=_marks(c)) for c in CASES])
def test_hostile_request_is_answered_not_crashed(triton_llm, known_answer, case):
    _survives(triton_llm, case, *CASES[case])


@pytest.mark.triton_llm_requires("llmapi")
@pytest.mark.parametrize("case", [pytest.param(c, marks=_marks(c)) for c in LLMAPI_CASES])
def test_hostile_llmapi_request_is_answered_not_crashed(triton_llm, known_answer, case):
    _survives(triton_llm, case, *LLMAPI_CASES[case])


def _survives(triton_llm, case: str, expected: str, send) -> None:
    try:
        send(triton_llm)
        outcome = ANSWER
    except GenerationError as exc:
        outcome = ERROR
        assert str(exc).strip(), "an error response must say what went wrong"
    assert outcome in expected, f"{case}: expected {expected}, got {outcome}"
    assert triton_llm.server.alive() and triton_llm.server.ready(), f"the server did not survive: {case}"


@pytest.mark.triton_llm_load
def test_200_concurrent_clients_are_all_answered(triton_llm, known_answer):
    with ThreadPoolExecutor(200) as pool:
        answers = list(pool.map(lambda i: triton_llm.client.generate(f"{PROMPT} {i}", 4).text, range(200)))
    assert len(answers) == 200 and all(answers)
    assert triton_llm.server.ready()


@pytest.mark.triton_llm_requires("inflight_batcher_llm")
def test_a_client_that_disappears_mid_request_costs_nothing(triton_llm, known_answer, prompts):
    ids = triton_llm.encode(PROMPT)
    if triton_llm.client.decoupled:  # walks away from its stream mid-generation
        result = triton_llm.client.stream_ids(ids, 200, end_id=NO_END, cancel_after_s=0.5)
        assert result.cancelled and len(result.token_ids) < 200
    else:  # hangs up its HTTP connection before the answer
        body = json.dumps({"text_input": PROMPT, "max_tokens": 200, "end_id": NO_END}).encode()
        request = urllib.request.Request(f"http://{triton_llm.server.endpoints.http}/v2/models/ensemble/generate", data=body)
        with pytest.raises((TimeoutError, urllib.error.URLError)):
            urllib.request.urlopen(request, timeout=0.5)  # noqa: S310 (loopback)
    time.sleep(0.5)
    assert triton_llm.server.ready()
    assert len(triton_llm.client.generate_ids(ids, 6, end_id=NO_END).token_ids) == 6


@pytest.mark.triton_llm_requires("llmapi")
def test_a_client_that_walks_away_from_an_llmapi_request_costs_nothing(triton_llm, known_answer, prompts):
    if triton_llm.client.decoupled:
        result = triton_llm.client.stream(PROMPT, 200, cancel_after_s=0.5)
        assert result.cancelled
    else:
        body = json.dumps({"text_input": PROMPT, "sampling_param_max_tokens": 200}).encode()
        url = f"http://{triton_llm.server.endpoints.http}/v2/models/tensorrt_llm/generate"
        with pytest.raises((TimeoutError, urllib.error.URLError)):
            urllib.request.urlopen(urllib.request.Request(url, data=body), timeout=0.5)  # noqa: S310 (loopback)
    time.sleep(0.5)
    assert triton_llm.server.ready()
    assert triton_llm.client.generate(prompts.completion["fox"], 6).text


def test_the_known_answer_is_unchanged_after_all_of_them(triton_llm, known_answer, prompts):
    assert triton_llm.client.generate(triton_llm.chat_prompt(prompts.chat_question), 24).text == known_answer
