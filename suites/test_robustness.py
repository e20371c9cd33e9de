"""Robustness: malformed and hostile requests get the outcome upstream gives them (an error, or an answer), never a crash.

Every case runs on every deployment of its layout (the engine line's ensemble and tensorrt_llm, or the llmapi
model); after each one the server must still be alive and ready, and after all of them a known greedy answer must
still come back unchanged.

Over /v1 (class TestOverV1, run with --openai-url):
Robustness of an OpenAI endpoint: hostile or malformed bodies are answered with the status the family's contract
states and a message, never a dropped connection, and the server goes on answering as before."""

from __future__ import annotations

import json
import time
import urllib.error
import urllib.request
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
import numpy as np
import pytest
from pytest_triton_llm.triton.client import GenerationError, Sampling
from pytest_triton_llm.stack.repository import family_version, served_family
from pytest_triton_llm.stack.repository.llmapi import llmapi_family
from pytest_triton_llm.triton.tensor_contract import NO_END, Unbatched

pytestmark = pytest.mark.robustness


PROMPT = "The quick brown fox"


ERROR, ANSWER = "error", "answer"
# an answer that must be the plain request's (PROMPT, 8 tokens): what the hostile part adds cannot apply to this prompt
SAME = "the plain answer"


HUGE = 1_000_000  # far past max_seq_len, clear of int32 overflow (2**31-1 overflows TensorRT-LLM's own clamp: UB)


def ensemble(served, inputs: dict):
    return served.client.request("ensemble", inputs)


def core(served, **inputs):
    base = {
        "input_ids": (np.asarray([served.encode(PROMPT)], dtype=np.int32), "INT32"),
        "input_lengths": (len(served.encode(PROMPT)), "INT32"),
        "request_output_len": (4, "INT32"),
    }
    return served.client.request("tensorrt_llm", {**base, **inputs})


def post_generate(served, body: bytes, model: str = "ensemble"):
    request = urllib.request.Request(f"http://{served.server.endpoints.http}/v2/models/{model}/generate", data=body)
    try:
        with urllib.request.urlopen(request, timeout=60) as resp:  # noqa: S310 (loopback)
            return json.loads(resp.read())
    except urllib.error.HTTPError as exc:
        raise GenerationError(f"HTTP {exc.code}: {exc.read().decode(errors='replace')}") from None


def _family(served) -> tuple[int, ...]:
    return family_version(served_family(served.ref, served.server.version))


@dataclass(frozen=True)
class Undocumented:
    """No source says what upstream answers here (`why`): the server must survive the request, and the outcome's check
    is skipped with that reason, never passed."""

    why: str


def executor_error(served) -> str | Undocumented:
    """ERROR on the families whose backend builds TensorRT-LLM executor requests (tensorrtllm_backend v0.10 on: the
    checks are readable in SamplingConfig / Request::validate). Before, TensorRT-LLM's batch manager was a closed
    library."""
    if _family(served) >= (0, 10):
        return ERROR
    family = served_family(served.ref, served.server.version)
    return Undocumented(f"{family}'s batch manager is a closed library: no source says whether it refuses this")


def _llmapi_no_room(served) -> str | Undocumented:
    """A prompt that leaves nothing of max_seq_len: TensorRT-LLM 1.x's worker refuses it (default_max_tokens <= 0);
    what the 0.19/0.20-era worker did is not known."""
    family = llmapi_family(served.server.version)
    if family == "llmapi-0.19":
        return Undocumented(f"{family}: what its worker does with no room under max_seq_len is not known")
    return ERROR


def _empty_prompt(served) -> str:
    """TensorRT-LLM refuses a request without tokens (Request::validate: !mInputTokenIds.empty()): an empty text is an
    error where the tokenizer adds no token of its own (no BOS), an answer where it does."""
    return ERROR if not served.encode("") else ANSWER


def _text_input_dims(served) -> str:
    """The ensemble's text_input is [-1] up to tensorrtllm_backend v0.11.0 (two strings: preprocessing reads the first)
    and [1] from v0.12.0 (Triton core refuses the shape): read off the served config, not assumed."""
    dims = next(t["dims"] for t in served.client.model_config("ensemble")["input"] if t["name"] == "text_input")
    return ANSWER if [int(d) for d in dims] == [-1] else ERROR


def _lora_task(served) -> str:
    """An unknown task id is "not found in cache" on an engine built with LoRA; an engine without the LoRA plugin
    ignores lora_task_id (TensorRT-LLM reads it only with a LoRA config)."""
    return ERROR if served.ref.engine.lora is not None else ANSWER


# case -> (expected: ERROR, ANSWER, Undocumented, or a function of the served deployment giving one, send). Sources:
# Triton core (input count, dtype, shape, unknown model, the generate endpoint's JSON), tensorrtllm_backend's
# inflight_batcher_llm/src (utils.cc) and TensorRT-LLM's executor (requestImpl.h validate, samplingConfig.cpp checks,
# llmRequest.cpp validate); docs/architecture.md, "Fidelity to upstream", names them.
CASES = {
    "missing text_input": (ERROR, lambda s: ensemble(s, {"max_tokens": (8, "INT32")})),
    "missing max_tokens": (ERROR, lambda s: ensemble(s, {"text_input": (b"hi", "BYTES")})),
    "max_tokens sent as FP32": (ERROR, lambda s: ensemble(s, {"text_input": (b"hi", "BYTES"), "max_tokens": (8.0, "FP32")})),
    "text_input of shape [1, 2]": (
        _text_input_dims,
        lambda s: ensemble(s, {"text_input": (np.array([[b"a", b"b"]], dtype=object), "BYTES"), "max_tokens": (8, "INT32")}),
    ),
    "max_tokens 0": (executor_error, lambda s: s.client.generate(PROMPT, 0)),
    "max_tokens -5": (executor_error, lambda s: s.client.generate(PROMPT, -5)),
    # TensorRT-LLM cuts the output to what max_seq_len leaves (llmRequest.cpp validate: a warning, not an error)
    "max_tokens 1,000,000": (ANSWER, lambda s: s.client.generate(PROMPT, HUGE)),
    "input longer than max_input_len": (ERROR, lambda s: s.client.generate("word " * 3000, 8)),
    "1 MB input": (ERROR, lambda s: s.client.generate("x" * 1_000_000, 8)),
    "invalid UTF-8": (ERROR, lambda s: s.client.generate(b"\xff\xfe\xfa not utf-8", 8)),
    "empty text": (_empty_prompt, lambda s: s.client.generate("", 8)),
    "10,000 stop words": (SAME, lambda s: s.client.generate(PROMPT, 8, stop_words=[f"zq{i}x" for i in range(10_000)])),
    "10,000 bad words": (SAME, lambda s: s.client.generate(PROMPT, 8, bad_words=[f"zq{i}x" for i in range(10_000)])),
    # newer TensorRT-LLM validates it ("EndId (..) is not within acceptable range"), older ones never match it
    "end_id outside the vocabulary": (
        Undocumented("TensorRT-LLM validates end_id from a release no source names; before it, such an end_id never ends"),
        lambda s: s.client.generate(PROMPT, 8, end_id=10**7),
    ),
    "negative pad_id": (SAME, lambda s: s.client.generate(PROMPT, 8, pad_id=-7)),
    "top_p 2.0": (executor_error, lambda s: s.client.generate(PROMPT, 8, sampling=Sampling(top_k=5, top_p=2.0))),
    "negative temperature": (
        executor_error,
        lambda s: s.client.generate(PROMPT, 8, sampling=Sampling(top_k=5, temperature=-1.0)),
    ),
    "beam_width 4": (executor_error, lambda s: core(s, beam_width=(4, "INT32"))),
    # TensorRT-LLM checks neither: an id past the vocabulary indexes past the embedding table (see STAND_IN_ONLY)
    "input ids outside the vocabulary": (
        ERROR,
        lambda s: core(s, input_ids=(np.asarray([[10**7, 3]], dtype=np.int32), "INT32"), input_lengths=(2, "INT32")),
    ),
    # the executor takes the ids of a batch of one as they are; input_lengths is not read for it
    "input_lengths beyond input_ids": (ANSWER, lambda s: core(s, input_lengths=(999, "INT32"))),
    "malformed stop_words_list offsets": (
        executor_error,
        lambda s: core(s, stop_words_list=(np.asarray([[[5, 6], [7, 1]]], dtype=np.int32), "INT32")),
    ),
    "unknown LoRA task id": (_lora_task, lambda s: core(s, lora_task_id=(987654, "UINT64"))),
    "unknown model": (ERROR, lambda s: s.client.request("no_such_model", {"text_input": (b"hi", "BYTES")})),
    "garbage JSON to generate": (ERROR, lambda s: post_generate(s, b'{"text_input": "hi", "max_tokens": ')),
    "generate with a string max_tokens": (ERROR, lambda s: post_generate(s, b'{"text_input": "hi", "max_tokens": "lots"}')),
}


CASE_NEEDS = {
    "unknown LoRA task id": ("lora_input",),
    "garbage JSON to generate": ("generate_endpoint",),
    "generate with a string max_tokens": ("generate_endpoint",),
}


def llmapi(served, drop=(), **extra):
    """A text request to the llmapi model with inputs left out or added (shaped as the served model takes them)."""
    inputs = {k: v for k, v in served.client.ensemble_inputs(PROMPT, 8).items() if k not in drop}
    unbatched = isinstance(inputs["sampling_param_max_tokens"][0], Unbatched)  # upstream's max_batch_size 0
    inputs.update({k: (Unbatched.of(value, dtype) if unbatched else value, dtype) for k, (value, dtype) in extra.items()})
    return served.client.request("tensorrt_llm", inputs)


# The llmapi model's cases. Its model.py wraps every failure as "Error generating request: ..."; SamplingParams and the
# executor's C++ Request decide most outcomes (TensorRT-LLM tensorrt_llm/sampling_params.py, requestImpl.h).
LLMAPI_CASES = {
    "missing text_input": (ERROR, lambda s: llmapi(s, drop=("text_input",))),
    # 0.20-era workers deduce max_tokens from max_seq_len for a falsy 0, later ones refuse it
    "max_tokens 0": (
        Undocumented(
            "0.20-era workers deduce max_tokens from max_seq_len for a falsy 0, later ones refuse it; "
            "no source names the release between"
        ),
        lambda s: s.client.generate(PROMPT, 0),
    ),
    "max_tokens -5": (ERROR, lambda s: s.client.generate(PROMPT, -5)),
    "max_tokens 2**31-1": (ANSWER, lambda s: s.client.generate(PROMPT, 2**31 - 1)),  # clipped to max_seq_len
    "input longer than max_seq_len": (_llmapi_no_room, lambda s: s.client.generate("word " * 3000, 8)),
    "1 MB input": (ERROR, lambda s: s.client.generate("x" * 1_000_000, 8)),
    "invalid UTF-8": (ERROR, lambda s: s.client.generate(b"\xff\xfe\xfa not utf-8", 8)),
    "empty text": (_empty_prompt, lambda s: s.client.generate("", 8)),
    "1,000 stop strings": (SAME, lambda s: s.client.generate(PROMPT, 8, stop_words=[f"zq{i}x" for i in range(1000)])),
    "top_p 2.0": (ERROR, lambda s: s.client.generate(PROMPT, 8, sampling=Sampling(top_k=5, top_p=2.0))),
    "negative temperature": (ERROR, lambda s: s.client.generate(PROMPT, 8, sampling=Sampling(top_k=5, temperature=-1.0))),
    # upstream's model.py: a stop request needs the id of the request it stops
    "stop without a request id": (ERROR, lambda s: llmapi(s, stop=(True, "BOOL"))),
    "unknown model": (ERROR, lambda s: s.client.request("no_such_model", {"text_input": (b"hi", "BYTES")})),
    "garbage JSON to generate": (
        ERROR,
        lambda s: post_generate(s, b'{"text_input": "hi", "sampling_param_max_tokens": ', "tensorrt_llm"),
    ),
    "generate with a string max_tokens": (
        ERROR,
        lambda s: post_generate(s, b'{"text_input": "hi", "sampling_param_max_tokens": "lots"}', "tensorrt_llm"),
    ),
}


# the llmapi model takes a stop input from TensorRT-LLM 0.20 (llmapi-1.0 on; tensorrtllm_backend v0.19.0 declares none)
LLMAPI_CASE_NEEDS = {
    "stop without a request id": ("stop_request",),
    "garbage JSON to generate": ("generate_endpoint",),
    "generate with a string max_tokens": ("generate_endpoint",),
}


@pytest.fixture(scope="session")
def known_answer(triton_llm, prompts):
    """The greedy chat answer before any hostile request."""
    return triton_llm.client.generate(triton_llm.chat_prompt(prompts.chat_question), 24).text


@pytest.mark.triton_llm_trained_weights("the known answer needs trained weights")
def test_a_known_answer_before_the_hostile_requests(triton_llm, known_answer, prompts):
    assert prompts.chat_expected in known_answer


STAND_IN_ONLY = {"input ids outside the vocabulary": "TensorRT-LLM does not check ids against the vocabulary"}


FLOODS = ("1 MB input", "10,000 stop words", "10,000 bad words", "1,000 stop strings")  # stress a server: triton_llm_load


def _marks(case: str, needs: dict | None = None) -> list:
    marks = [pytest.mark.triton_llm_stand_in_only(STAND_IN_ONLY[case])] if case in STAND_IN_ONLY else []
    marks += [pytest.mark.triton_llm_requires(*needs[case])] if needs and case in needs else []
    return marks + ([pytest.mark.triton_llm_load] if case in FLOODS else [])


@pytest.mark.triton_llm_requires("inflight_batcher_llm")
@pytest.mark.parametrize("case", [pytest.param(c, marks=_marks(c, CASE_NEEDS)) for c in CASES])
def test_hostile_request_is_answered_not_crashed(triton_llm, known_answer, case):
    _survives(triton_llm, case, *CASES[case])


@pytest.mark.triton_llm_requires("llmapi")
@pytest.mark.parametrize("case", [pytest.param(c, marks=_marks(c, LLMAPI_CASE_NEEDS)) for c in LLMAPI_CASES])
def test_hostile_llmapi_request_is_answered_not_crashed(triton_llm, known_answer, case):
    _survives(triton_llm, case, *LLMAPI_CASES[case])


def _survives(triton_llm, case: str, expected, send) -> None:
    if callable(expected):  # decided by what the deployment serves (its family, tokenizer, engine)
        expected = expected(triton_llm)
    try:
        result, error = send(triton_llm), None
    except GenerationError as exc:
        result, error = None, str(exc).strip()
    # a python model's process can die while tritonserver stays ready: the model must still answer
    alive = triton_llm.server.alive() and triton_llm.server.ready()
    after = _answer_after(triton_llm)
    if isinstance(expected, Undocumented):
        assert alive, f"the server did not survive: {case}"
        assert after is None, f"the model no longer answers after {case}: {after}"
        pytest.skip(f"{case}: {expected.why}; the server survived, the outcome is not checked")
    if expected == ERROR:
        assert error is not None, f"{case}: expected an error, got an answer: {getattr(result, 'text', result)!r}"
        assert error, "an error response must say what went wrong"
    else:
        assert error is None, f"{case}: expected an answer, got an error: {error}"
        text = getattr(result, "text", None)
        assert text is None or isinstance(text, str), f"{case}: the answer's text is not text: {text!r}"
        if expected == SAME:  # no "zq...x" word can occur in it, a pad id pads nothing of a batch of one
            plain = triton_llm.client.generate(PROMPT, 8).text
            assert text == plain, f"{case}: answered {text!r}, the plain request {plain!r}"
    assert alive, f"the server did not survive: {case}"
    assert after is None, f"the model no longer answers after {case}: {after}"


def _answer_after(triton_llm) -> str | None:
    """Why a plain request fails now, or None: it is answered."""
    try:
        triton_llm.client.generate(PROMPT, 2)
    except GenerationError as exc:
        return str(exc).strip() or type(exc).__name__
    return None


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


NOT_JSON = "not JSON"


BAD_BODIES = {
    NOT_JSON: "{'prompt': 'single quotes are not JSON'",
    "max_tokens a string": {"prompt": "Hello", "max_tokens": "ten"},
    "prompt a number": {"prompt": 42, "max_tokens": 4},
    "temperature a string": {"prompt": "Hello", "max_tokens": 4, "temperature": "hot"},
    "a JSON list": "[1, 2, 3]",
}


def _message(body) -> str:
    """The error text of an error body, in any of the shapes the families use (openai_families.toml errors)."""
    if isinstance(body, dict):
        error = body.get("error", body.get("detail", body.get("message")))
        if isinstance(error, dict):
            return str(error.get("message", ""))
        return json.dumps(error) if isinstance(error, list) else str(error or "")
    return ""


def _answered_as_stated(openai_target, prompts, reply, error, reference_answer: str, served: str | None = None) -> None:
    """`reply` has the status the contract states for `error`'s case: a 200 carries `served` (the answer the request
    asked for), an error the contract's plain text where it states one, else a message; and the server then answers
    the reference request as before."""
    assert reply.status == int(error.status), f"{error.case}: expected HTTP {error.status}, got {reply.status}: {reply.body!r}"
    if served is not None and reply.status == 200:
        assert reply.body["choices"][0]["text"] == served
    elif error.text:  # the family answers this case in plain text
        assert reply.body == error.text
    else:
        assert _message(reply.body), f"HTTP {reply.status} without an error message: {reply.body!r}"
    again = openai_target.endpoint.complete(openai_target.completion(prompts.completion["fox"], 8))
    assert again.text == reference_answer


# a 1x1 PNG: an image any image-text model can read, so a refusal is about the model, not the image
PNG_1X1 = "data:image/png;base64,iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mP8z8DwHwAFBQIAX8jx0gAAAABJRU5ErkJggg=="


@pytest.fixture(scope="module")
def reference_answer(openai_target, prompts):
    return openai_target.endpoint.complete(openai_target.completion(prompts.completion["fox"], 8)).text


class TestOverV1:
    """The same capability over an OpenAI endpoint: run with --openai-url, deselected without it."""

    @pytest.mark.parametrize("endpoint", ["completions", "chat"])
    @pytest.mark.parametrize("case", list(BAD_BODIES))
    def test_a_malformed_body_gets_the_contracts_error_and_the_server_serves_on(
        self, openai_target, prompts, reference_answer, case, endpoint
    ):
        """On both endpoints: chat's bodies carry the prompt as the user's message (a number where the prompt is one)."""
        error = openai_target.error_case(*(("not_json", "invalid_body") if case == NOT_JSON else ("invalid_body",)))
        if error is None or not error.status.isdigit():
            pytest.skip(f"{openai_target.family.title}: the contract states no HTTP status for a malformed body")
        body = BAD_BODIES[case]
        if isinstance(body, dict):
            body = {"model": openai_target.model, **body}
            if endpoint == "chat":
                prompt = body.pop("prompt")
                body["messages"] = prompt if not isinstance(prompt, str) else [{"role": "user", "content": prompt}]
        reply = openai_target.endpoint.request("POST", "/chat/completions" if endpoint == "chat" else "/completions", body)
        _answered_as_stated(openai_target, prompts, reply, error, reference_answer)

    def test_a_huge_max_tokens_is_answered_as_the_contract_says_and_the_server_serves_on(
        self, openai_target, prompts, reference_answer
    ):
        """max_tokens far beyond any context window, on a prompt whose greedy answer ends on its own: a family that cuts
        max_tokens to the window answers that same answer; one that refuses it answers the stated 4xx with a message."""
        error = openai_target.error_case("max_tokens_beyond_context")
        if error is None or not error.status.isdigit():
            pytest.skip(f"{openai_target.family.title}: the contract does not say what a max_tokens beyond the context does")
        ended = openai_target.endpoint.complete(openai_target.completion(prompts.completion["fox"], 256))
        assert ended.finish_reason == "stop", f"the greedy answer must end on its own within 256 tokens: {ended.text!r}"
        reply = openai_target.endpoint.request("POST", "/completions", openai_target.completion(prompts.completion["fox"], 10**9))
        _answered_as_stated(openai_target, prompts, reply, error, reference_answer, served=ended.text)

    def test_an_unknown_field_is_answered_as_the_contract_says_and_the_server_serves_on(
        self, openai_target, prompts, reference_answer
    ):
        """A misspelt field (max_token for max_tokens): a family that refuses unknown fields answers the stated 4xx with a
        message, so the typo is seen; one that drops them serves the request as though the field were absent."""
        error = openai_target.error_case("unknown_field")
        if error is None or not error.status.isdigit():
            pytest.skip(f"{openai_target.family.title}: the contract does not say what an unknown request field does")
        body = openai_target.completion(prompts.completion["fox"], 8, max_token=4)
        reply = openai_target.endpoint.request("POST", "/completions", body)
        _answered_as_stated(openai_target, prompts, reply, error, reference_answer, served=reference_answer)

    @pytest.mark.parametrize("mode", ["unary", "streamed", "batched"])
    def test_an_image_part_to_a_text_model_gets_the_contracts_error_and_the_server_serves_on(
        self, openai_target, prompts, reference_answer, mode
    ):
        """A chat message with an image part, to a model that reads no images: a family whose contract states the
        refusal answers its 4xx, with its words; never a 200 that answers as if the image had not been sent
        (ai-dynamo/dynamo#7064). Batched: sent among three plain requests in flight, which answer as alone."""
        error = openai_target.error_case("media_part_to_a_text_model")
        if error is None or not error.status.isdigit():
            pytest.skip(f"{openai_target.family.title}: the contract does not say what an image part to a text model gets")
        takes_images = openai_target.takes_images()
        if takes_images is not False:
            pytest.skip(
                "the served model reads images" if takes_images else "no config.json of the served model (--tokenizer DIR)"
            )
        parts = [{"type": "text", "text": prompts.chat_question}, {"type": "image_url", "image_url": {"url": PNG_1X1}}]
        body = {
            **openai_target.chat(prompts.chat_question, 8),
            "messages": [{"role": "user", "content": parts}],
            "stream": mode == "streamed",
        }
        if mode == "batched":
            plain_body = openai_target.completion(prompts.completion["fox"], 8)
            with ThreadPoolExecutor(4) as pool:
                plain = [pool.submit(openai_target.endpoint.complete, plain_body) for _ in range(3)]
                reply = openai_target.endpoint.request("POST", "/chat/completions", body)
                texts = [each.result().text for each in plain]
            assert texts == [reference_answer] * 3, f"the plain requests beside the image answered {texts}"
        else:
            reply = openai_target.endpoint.request("POST", "/chat/completions", body)
        _answered_as_stated(openai_target, prompts, reply, error, reference_answer)
        assert error.message in _message(reply.body), f"{error.case}: the message must say {error.message!r}: {reply.body!r}"
