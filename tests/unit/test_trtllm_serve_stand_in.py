"""The trtllm-serve stand-in (stand_ins/trtllm_serve) answers as the trtllm-serve contract of
openai_families.toml states: its request models default every stated field as the contract does and refuse what
upstream's refuse in upstream's words, it marks its answers with the header the harness reads, and it is staged and
started on 127.0.0.1 from the package's files."""

from __future__ import annotations

import ast
import importlib.util
import json
import sys

import pytest
from pydantic import ValidationError

from pytest_triton_llm.openai import trtllm_serve as trtllm_serve_stand_in
from pytest_triton_llm.stack.cache import EngineCache
from pytest_triton_llm.stack.lock import load_lock
from pytest_triton_llm.openai.client import STAND_IN_HEADER
from pytest_triton_llm.openai.contract import load_families

from ..conftest import ROOT

CODE = ROOT / "pytest_triton_llm" / "stand_ins" / "trtllm_serve"
CONTRACT = load_families()["trtllm-serve"]


def _protocol():
    spec = importlib.util.spec_from_file_location("stand_in_protocol", CODE / "protocol.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # pydantic resolves the models' annotations through it
    spec.loader.exec_module(module)
    return module


PROTOCOL = _protocol()


def test_the_stand_ins_answers_carry_the_header_the_harness_reads():
    tree = ast.parse((CODE / "server.py").read_text())
    [value] = [
        node.value.value
        for node in tree.body
        if isinstance(node, ast.Assign) and [t.id for t in node.targets if isinstance(t, ast.Name)] == ["STAND_IN_HEADER"]
    ]
    assert value == STAND_IN_HEADER


def _default(model, name: str):
    if "." in name:  # stream_options.include_usage: the StreamOptions model's field
        model, name = PROTOCOL.StreamOptions, name.split(".", 1)[1]
    return model.model_fields[name].get_default(call_default_factory=True)


@pytest.mark.parametrize("name", [n for n, f in CONTRACT.fields.items() if f.default not in ("required", "absent", "unknown")])
def test_the_request_models_default_each_field_as_the_contract_states(name):
    field = CONTRACT.fields[name]
    chat_only = name == "top_logprobs"
    if not chat_only:
        assert _default(PROTOCOL.CompletionRequest, name) == json.loads(field.default)
    chat_name = "max_completion_tokens" if name == "max_tokens" else name
    if name != "suffix":  # chat has no suffix field; its validator refuses one all the same
        assert _default(PROTOCOL.ChatCompletionRequest, chat_name) == json.loads(field.chat_default or field.default)


def test_every_field_the_contract_says_trtllm_serve_takes_is_a_field_of_the_stand_in():
    taken = {n for n, f in CONTRACT.fields.items() if f.supported in ("yes", "partial") and "." not in n}
    chat_only, completion_only = {"messages", "top_logprobs", "max_completion_tokens", "add_generation_prompt"}, {"prompt"}
    assert taken - chat_only <= set(PROTOCOL.CompletionRequest.model_fields)
    chat = set(PROTOCOL.ChatCompletionRequest.model_fields) | {"max_tokens"}  # max_completion_tokens' alias
    assert taken - completion_only <= chat


@pytest.mark.parametrize(
    "body, words",
    [
        ({"bogus": 1}, "Extra inputs are not permitted"),
        ({"suffix": "x"}, "suffix is not supported"),
        ({"stream_options": {"include_usage": True}}, "Stream options can only be defined when stream is true."),
        ({"max_tokens": "ten"}, "Input should be a valid integer"),
    ],
)
def test_a_completion_request_upstream_refuses_is_refused_in_its_words(body, words):
    with pytest.raises(ValidationError) as refused:
        PROTOCOL.CompletionRequest.model_validate({"model": "m", "prompt": "Hi", **body})
    assert words in str(refused.value)


def test_a_chat_request_takes_max_tokens_for_max_completion_tokens_and_refuses_top_logprobs_without_logprobs():
    chat = {"model": "m", "messages": [{"role": "user", "content": "Hi"}]}
    assert PROTOCOL.ChatCompletionRequest.model_validate({**chat, "max_tokens": 7}).max_completion_tokens == 7
    with pytest.raises(ValidationError) as refused:
        PROTOCOL.ChatCompletionRequest.model_validate({**chat, "top_logprobs": 2})
    assert "logprobs must be true when using top_logprobs" in str(refused.value)


def test_staging_copies_the_stand_in_beside_the_modules_it_imports_and_links_the_model_by_its_served_name(tmp_path):
    checkpoint = tmp_path / "engines" / "smollm2-135m-5152e14e23e0"
    checkpoint.mkdir(parents=True)
    link = trtllm_serve_stand_in.stage(tmp_path / "run", checkpoint, "smollm2-135m")
    staged = {p.name for p in (tmp_path / "run").glob("*.py")}
    assert staged == {name for _, name in trtllm_serve_stand_in.MODULES} | {"hf_tokenizer.py"}
    assert (link.name, link.resolve()) == ("smollm2-135m", checkpoint.resolve())
    # staged twice (a restart in the same directory): the link is replaced, not refused
    assert trtllm_serve_stand_in.stage(tmp_path / "run", checkpoint, "smollm2-135m") == link


def test_the_stand_in_listens_on_loopback_and_marks_its_answers_with_the_projects_version(tmp_path):
    argv = trtllm_serve_stand_in.command(tmp_path, tmp_path / "model" / "m", tmp_path / "tok", 8123, "1.2.3", None)
    assert argv[argv.index("--host") + 1] == "127.0.0.1"
    assert argv[argv.index("--stand-in-mark") + 1] == "1.2.3"
    assert argv[argv.index("--served-name") + 1] == "m"
    assert "--extra_llm_api_options" not in argv


def test_an_engine_the_reference_engine_does_not_build_is_refused_naming_the_ones_it_does(tmp_path):
    lock = load_lock(ROOT / "engines.lock")
    with pytest.raises(trtllm_serve_stand_in.StandInUnavailable) as refused:
        trtllm_serve_stand_in.serve_engine(lock, "no-such-engine", EngineCache(tmp_path), tmp_path)
    assert str(refused.value) == (
        "--engine 'no-such-engine': the stand-in serves an engine of the reference backend "
        f"({', '.join(n for n, e in lock.engines.items() if e.backend == 'reference')})"
    )
