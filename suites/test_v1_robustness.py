"""Robustness of an OpenAI endpoint: hostile or malformed bodies are answered with the status the family's contract
states and a message, never a dropped connection, and the server goes on answering as before."""

from __future__ import annotations

import json

import pytest

pytestmark = pytest.mark.robustness

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


@pytest.fixture(scope="module")
def reference_answer(openai_target, prompts):
    return openai_target.endpoint.complete(openai_target.completion(prompts.completion["fox"], 8)).text


@pytest.mark.parametrize("case", list(BAD_BODIES))
def test_a_malformed_body_gets_the_contracts_error_and_the_server_serves_on(openai_target, prompts, reference_answer, case):
    error = openai_target.error_case(*(("not_json", "invalid_body") if case == NOT_JSON else ("invalid_body",)))
    if error is None or not error.status.isdigit():
        pytest.skip(f"{openai_target.family.title}: the contract states no HTTP status for a malformed body")
    body = BAD_BODIES[case]
    if isinstance(body, dict):
        body = {"model": openai_target.model, **body}
    reply = openai_target.endpoint.request("POST", "/completions", body)
    assert reply.status == int(error.status), f"{error.case}: expected HTTP {error.status}, got {reply.status}: {reply.body!r}"
    if error.text:  # the family answers this case in plain text
        assert reply.body == error.text
    else:
        assert _message(reply.body), f"HTTP {reply.status} without an error message: {reply.body!r}"
    again = openai_target.endpoint.complete(openai_target.completion(prompts.completion["fox"], 8))
    assert again.text == reference_answer


def test_a_huge_max_tokens_is_answered_as_the_contract_says_and_the_server_serves_on(openai_target, prompts, reference_answer):
    """max_tokens far beyond any context window, on a prompt whose greedy answer ends on its own: a family that cuts
    max_tokens to the window answers that same answer; one that refuses it answers the stated 4xx with a message."""
    error = openai_target.error_case("max_tokens_beyond_context")
    if error is None or not error.status.isdigit():
        pytest.skip(f"{openai_target.family.title}: the contract does not say what a max_tokens beyond the context does")
    ended = openai_target.endpoint.complete(openai_target.completion(prompts.completion["fox"], 256))
    assert ended.finish_reason == "stop", f"the greedy answer must end on its own within 256 tokens: {ended.text!r}"
    reply = openai_target.endpoint.request("POST", "/completions", openai_target.completion(prompts.completion["fox"], 10**9))
    assert reply.status == int(error.status), f"{error.case}: expected HTTP {error.status}, got {reply.status}: {reply.body!r}"
    if reply.status == 200:
        assert reply.body["choices"][0]["text"] == ended.text
    else:
        assert _message(reply.body), f"HTTP {reply.status} without an error message: {reply.body!r}"
    again = openai_target.endpoint.complete(openai_target.completion(prompts.completion["fox"], 8))
    assert again.text == reference_answer


def test_an_unknown_field_is_answered_as_the_contract_says_and_the_server_serves_on(openai_target, prompts, reference_answer):
    """A misspelt field (max_token for max_tokens): a family that refuses unknown fields answers the stated 4xx with a
    message, so the typo is seen; one that drops them serves the request as though the field were absent."""
    error = openai_target.error_case("unknown_field")
    if error is None or not error.status.isdigit():
        pytest.skip(f"{openai_target.family.title}: the contract does not say what an unknown request field does")
    body = openai_target.completion(prompts.completion["fox"], 8, max_token=4)
    reply = openai_target.endpoint.request("POST", "/completions", body)
    assert reply.status == int(error.status), f"{error.case}: expected HTTP {error.status}, got {reply.status}: {reply.body!r}"
    if reply.status == 200:
        assert reply.body["choices"][0]["text"] == reference_answer
    else:
        assert _message(reply.body), f"HTTP {reply.status} without an error message: {reply.body!r}"
    again = openai_target.endpoint.complete(openai_target.completion(prompts.completion["fox"], 8))
    assert again.text == reference_answer
