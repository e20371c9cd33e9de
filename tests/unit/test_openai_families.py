"""OpenAI server families (pytest_triton_llm/openai/openai_families.toml): every family states the same endpoints and
request fields with a citation to the upstream source it was read from, the known facts are pinned exactly as those
sources have them, and a malformed file is refused with one line naming the file, the family and the field."""

import re
from pathlib import Path

import pytest

from pytest_triton_llm.openai.contract import (
    FAMILIES_FILE,
    REQUIRED_ENDPOINTS,
    REQUIRED_FIELDS,
    load_families,
)
from pytest_triton_llm.common.schema import SchemaError

FAMILIES = load_families()
PINNED_GITHUB = re.compile(r"https://github\.com/[\w.-]+/[\w.-]+/((blob|tree)/([0-9a-f]{40}|v[\w.-]+)/|(pull|issues)/\d+$)")


def cites(family):
    yield from (e.cite for e in family.endpoints.values())
    for field in family.fields.values():
        yield field.cite
        if field.before is not None:
            yield field.before.cite
    yield from (getattr(family.response, name).cite for name in family.response.__dataclass_fields__)
    yield from (e.cite for e in family.errors)


def support(field: str) -> dict[str, str]:
    return {name: family.fields[field].supported for name, family in FAMILIES.items()}


# -- every family ---------------------------------------------------------------------------------------------


def test_the_file_holds_the_five_server_families_of_issue_28():
    assert set(FAMILIES) == {"trtllm-serve", "dynamo", "triton-openai", "llama-cpp-python", "llama-server"}


@pytest.mark.parametrize("name", sorted(FAMILIES))
def test_every_family_lists_the_shared_endpoints_and_request_fields(name):
    family = FAMILIES[name]
    assert set(REQUIRED_ENDPOINTS) <= set(family.endpoints)
    assert set(REQUIRED_FIELDS) <= set(family.fields)
    assert family.endpoints["/v1/completions"].method == family.endpoints["/v1/chat/completions"].method == "POST"
    assert family.endpoints["/v1/models"].method == "GET"


@pytest.mark.parametrize("name", sorted(FAMILIES))
def test_every_citation_names_a_source_of_its_family_pinned_to_a_commit_or_tag(name):
    family = FAMILIES[name]
    for cite in cites(family):
        for part in cite.split("; "):
            assert part.split(": ", 1)[0] in family.sources, part
    for source in family.sources.values():
        assert source.url.startswith("https://")
        assert "github.com/" not in source.url or PINNED_GITHUB.match(source.url), source.url
        assert source.read


CHAT_TEMPLATE_FLAGS = ("add_generation_prompt", "continue_final_message")


def test_what_the_sources_do_not_say_is_recorded_as_unknown_with_the_reason():
    unknown = {(n, f) for n, family in FAMILIES.items() for f, field in family.fields.items() if field.supported == "unknown"}
    assert unknown == {
        ("dynamo", "seed"),
        ("dynamo", "stop"),
        ("llama-server", "model"),
        ("llama-cpp-python", "presence_penalty"),
        ("llama-cpp-python", "frequency_penalty"),
        ("llama-cpp-python", "echo"),
        ("dynamo", "response_format"),
        ("triton-openai", "response_format"),
        ("llama-server", "response_format"),
        *((family, flag) for family in ("dynamo", "triton-openai", "llama-server") for flag in CHAT_TEMPLATE_FLAGS),
    }
    assert all(FAMILIES[n].fields[f].note for n, f in unknown)
    unknown_responses = {
        (n, r)
        for n, family in FAMILIES.items()
        for r in family.response.__dataclass_fields__
        if getattr(family.response, r).values == ("unknown",)
    }
    assert unknown_responses == {
        ("dynamo", "finish_reasons"),
        ("dynamo", "chat_logprobs"),
        ("dynamo", "max_tokens_finish_reason"),
        ("llama-server", "stream_usage"),
    }


# -- trtllm-serve -----------------------------------------------------------------------------------------------


def test_trtllm_serve_generates_to_eos_and_without_a_minimum_unless_asked():
    fields = FAMILIES["trtllm-serve"].fields
    assert (fields["ignore_eos"].supported, fields["ignore_eos"].default) == ("yes", "false")
    assert (fields["min_tokens"].supported, fields["min_tokens"].default) == ("yes", "0")
    assert (fields["top_k"].default, fields["n"].default, fields["stop"].default) == ("0", "1", "[]")
    assert fields["temperature"].default == fields["top_p"].default == "null"  # sent to SamplingParams as 1.0


def test_trtllm_serve_serves_perf_metrics_beside_json_iteration_metrics_and_prometheus_text():
    endpoints = FAMILIES["trtllm-serve"].endpoints
    assert {"/perf_metrics", "/metrics", "/prometheus/metrics", "/health", "/version"} <= set(endpoints)
    assert all(endpoints[e].method == "GET" for e in ("/perf_metrics", "/metrics", "/prometheus/metrics"))
    assert "return_perf_metrics" in endpoints["/perf_metrics"].note
    assert "not Prometheus" in endpoints["/metrics"].note


def test_return_perf_metrics_is_a_server_argument_that_a_request_body_may_not_carry():
    field = FAMILIES["trtllm-serve"].fields["return_perf_metrics"]
    assert (field.supported, field.default) == ("refused", "absent")
    assert "extra='forbid'" in field.note


def test_trtllm_serve_refused_completion_logprobs_before_pr_10809_and_limits_them_now():
    family = FAMILIES["trtllm-serve"]
    logprobs = family.fields["logprobs"]
    assert (logprobs.supported, logprobs.default, logprobs.chat_default) == ("partial", "null", "false")
    assert logprobs.before is not None and logprobs.before.supported == "refused"
    assert family.sources["pr10809"].url == "https://github.com/NVIDIA/TensorRT-LLM/pull/10809"
    usage = family.fields["stream_options.continuous_usage_stats"]
    assert (usage.default, usage.before and usage.before.default) == ("false", "true")
    assert "376f7e1b" in family.version  # v1.2.1 itself was not readable: the entry says so


def test_trtllm_serve_reports_the_llm_api_finish_reasons_and_a_400_for_a_bad_body():
    family = FAMILIES["trtllm-serve"]
    assert family.response.finish_reasons.values == ("stop", "length", "timeout", "cancelled", "tool_calls")
    assert [(e.kind, e.status, e.body.split(":")[0]) for e in family.errors] == [
        ("invalid_body", "400", '{"error"'),
        ("unknown_field", "400", '{"error"'),
        ("max_tokens_beyond_context", "200", "a completion"),
        ("media_part_to_a_text_model", "400", '{"object"'),
        ("", "400", '{"object"'),
    ]
    assert [e.message for e in family.errors if e.kind == "media_part_to_a_text_model"] == ["Unknown modality: image"]


# -- across families ----------------------------------------------------------------------------------------------


def test_which_families_send_usage_at_the_end_of_a_stream():
    assert support("stream_options.include_usage") == {
        "trtllm-serve": "yes",
        "dynamo": "yes",
        "triton-openai": "yes",
        "llama-cpp-python": "ignored",
        "llama-server": "yes",
    }
    assert FAMILIES["llama-cpp-python"].response.stream_usage.values == ("none",)
    assert FAMILIES["trtllm-serve"].fields["stream_options.include_usage"].default == "true"  # once stream_options is sent
    assert FAMILIES["triton-openai"].fields["stream_options.include_usage"].default == "false"


def test_which_families_honour_min_tokens_and_ignore_eos():
    assert support("min_tokens") == {
        "trtllm-serve": "yes",
        "dynamo": "yes",
        "triton-openai": "partial",  # vLLM backend only: the TensorRT-LLM converter drops it
        "llama-cpp-python": "yes",
        "llama-server": "ignored",
    }
    assert support("ignore_eos") == {
        "trtllm-serve": "yes",
        "dynamo": "yes",
        "triton-openai": "partial",
        "llama-cpp-python": "ignored",
        "llama-server": "yes",
    }


def test_which_families_take_logprobs_and_in_which_shape():
    assert support("logprobs") == {
        "trtllm-serve": "partial",
        "dynamo": "partial",
        "triton-openai": "partial",  # vLLM backend only
        "llama-cpp-python": "yes",
        "llama-server": "partial",
    }
    openai_shape = ("text_offset", "token_logprobs", "tokens", "top_logprobs")
    shapes = {n: f.response.completion_logprobs.values for n, f in FAMILIES.items()}
    assert [n for n, shape in shapes.items() if shape == openai_shape] == ["trtllm-serve", "triton-openai", "llama-cpp-python"]
    assert shapes["llama-server"][0] == "content[].id"  # llama.cpp's own shape on /v1/completions


def test_which_families_refuse_top_k_or_more_than_one_choice():
    assert support("top_k") == {
        "trtllm-serve": "yes",
        "dynamo": "yes",
        "triton-openai": "refused",
        "llama-cpp-python": "yes",
        "llama-server": "yes",
    }
    assert support("n") == {
        "trtllm-serve": "yes",
        "dynamo": "yes",
        "triton-openai": "partial",
        "llama-cpp-python": "ignored",
        "llama-server": "refused",
    }


def test_triton_openai_answers_stop_even_when_max_tokens_cut_the_text():
    family = FAMILIES["triton-openai"]
    assert family.response.finish_reasons.values == ("stop", "tool_calls", "length")
    assert "completions always answer 'stop'" in family.response.finish_reasons.note
    assert (family.fields["temperature"].default, family.fields["temperature"].chat_default) == ("1", "0.7")
    assert [(e.status, e.body[:10]) for e in family.errors] == [("422", '{"detail":'), ("400", '{"detail":')]


def test_llama_cpp_python_samples_with_llama_cpp_defaults_unless_a_request_overrides_them():
    fields = FAMILIES["llama-cpp-python"].fields
    defaults = {name: fields[name].default for name in ("temperature", "top_p", "top_k", "min_p", "repeat_penalty")}
    assert defaults == {"temperature": "0.8", "top_p": "0.95", "top_k": "40", "min_p": "0.05", "repeat_penalty": "1.1"}
    assert (fields["max_tokens"].default, fields["max_tokens"].chat_default) == ("16", "null")
    errors = {e.kind or e.case: (e.status, e.text) for e in FAMILIES["llama-cpp-python"].errors}
    assert errors["invalid_body"] == ("500", "")  # a bad body is a 500 there, in its JSON error shape
    assert errors["not_json"] == ("500", "Internal Server Error")  # a body that is not JSON: plain text
    assert errors["max_tokens_beyond_context"] == ("200", "")  # cut to the context window, not refused


def test_a_completion_cut_by_max_tokens_says_length_except_on_tritons_frontend_which_always_says_stop():
    reasons = {name: family.response.max_tokens_finish_reason.values for name, family in FAMILIES.items()}
    assert reasons == {
        "trtllm-serve": ("length",),
        "dynamo": ("unknown",),
        "triton-openai": ("stop",),
        "llama-cpp-python": ("length",),
        "llama-server": ("length",),
    }


def test_families_are_told_apart_by_the_owned_by_their_model_list_states():
    owners = {name: family.owned_by.values for name, family in FAMILIES.items() if family.owned_by is not None}
    assert owners == {
        "trtllm-serve": ("tensorrt_llm",),
        "triton-openai": ("Triton Inference Server",),
        "llama-cpp-python": ("me",),
    }


def test_only_llama_cpp_python_needs_more_than_temperature_zero_for_greedy_its_repeat_penalty():
    greedy = {name: family.greedy.fields for name, family in FAMILIES.items() if family.greedy is not None}
    assert greedy == {"llama-cpp-python": {"repeat_penalty": 1.0}}
    assert FAMILIES["llama-cpp-python"].fields["repeat_penalty"].default == "1.1"


def test_every_family_reports_the_three_openai_usage_counts():
    for family in FAMILIES.values():
        assert {"prompt_tokens", "completion_tokens", "total_tokens"} <= set(family.response.usage.values)


# -- a malformed file ----------------------------------------------------------------------------------------------

_FIELD_LINES = "\n".join(f'"{name}" = {{ supported = "yes", default = "null", cite = "src: X" }}' for name in REQUIRED_FIELDS)
_FACTS = "\n".join(
    f'{name} = {{ values = ["v"], cite = "src: {name}" }}'
    for name in (
        "text",
        "finish_reasons",
        "usage",
        "stream_usage",
        "completion_logprobs",
        "chat_logprobs",
        "max_tokens_finish_reason",
    )
)
MINIMAL = f"""
[families.tiny]
title = "t"
version = "v1.0"

[families.tiny.sources]
src = {{ url = "https://github.com/o/r/blob/v1.0/x.py", read = "x" }}

[families.tiny.endpoints]
"/v1/completions" = {{ method = "POST", cite = "src: a" }}
"/v1/chat/completions" = {{ method = "POST", cite = "src: b" }}
"/v1/models" = {{ method = "GET", cite = "src: c" }}

[families.tiny.fields]
{_FIELD_LINES}

[families.tiny.response]
{_FACTS}

[[families.tiny.errors]]
case = "c"
status = "400"
body = "{{}}"
cite = "src: e"
"""


def refused(tmp_path: Path, old: str, new: str) -> str:
    assert old in MINIMAL
    path = tmp_path / "families.toml"
    path.write_text(MINIMAL.replace(old, new, 1))
    with pytest.raises(SchemaError) as excinfo:
        load_families(path)
    message = str(excinfo.value)
    assert "\n" not in message
    return message.replace(str(path), "F")


def test_the_minimal_family_of_these_tests_loads(tmp_path):
    path = tmp_path / "families.toml"
    path.write_text(MINIMAL)
    assert list(load_families(path)) == ["tiny"]
    assert FAMILIES_FILE.name == "openai_families.toml"


def test_a_support_level_outside_the_vocabulary_is_refused_naming_family_and_field(tmp_path):
    message = refused(tmp_path, '"ignore_eos" = { supported = "yes"', '"ignore_eos" = { supported = "maybe"')
    assert message == (
        "F: family 'tiny': field 'fields.ignore_eos.supported': "
        "expected one of 'yes', 'partial', 'ignored', 'refused', 'unknown', got string 'maybe'"
    )


def test_a_family_without_one_of_the_shared_fields_is_refused(tmp_path):
    message = refused(tmp_path, '"min_tokens" = { supported = "yes", default = "null", cite = "src: X" }', "")
    assert message == f"F: family 'tiny': lists no field 'min_tokens' (every family lists {', '.join(REQUIRED_FIELDS)})"


def test_a_citation_of_a_source_the_family_does_not_list_is_refused(tmp_path):
    message = refused(
        tmp_path,
        '"top_k" = { supported = "yes", default = "null", cite = "src: X" }',
        '"top_k" = { supported = "yes", default = "null", cite = "nosuch: X" }',
    )
    assert message == "F: family 'tiny': field 'top_k': cite names no source 'nosuch' (sources: src)"


def test_an_unknown_without_the_reason_is_refused(tmp_path):
    message = refused(tmp_path, '"seed" = { supported = "yes"', '"seed" = { supported = "unknown"')
    assert message == "F: family 'tiny': field 'seed': supported 'unknown' needs a note saying how"


def test_a_default_that_is_neither_json_nor_a_known_word_is_refused(tmp_path):
    message = refused(
        tmp_path, '"stop" = { supported = "yes", default = "null"', '"stop" = { supported = "yes", default = "none"'
    )
    assert message == (
        "F: family 'tiny': field 'stop': default 'none' is neither a JSON literal nor one of required, absent, unknown"
    )


def test_a_github_source_not_pinned_to_a_commit_or_tag_is_refused(tmp_path):
    message = refused(tmp_path, "blob/v1.0/x.py", "blob/main/x.py")
    assert message == (
        "F: family 'tiny': source 'src': url 'https://github.com/o/r/blob/main/x.py' "
        "is not an https address pinned to a commit or tag"
    )


def test_a_misspelt_key_is_refused_with_the_allowed_ones(tmp_path):
    message = refused(tmp_path, '"n" = { supported = "yes", default = "null"', '"n" = { supported = "yes", defualt = "null"')
    assert message == (
        "F: family 'tiny': unknown field 'fields.n.defualt' "
        "(allowed: before, chat_default, cite, default, note, supported, when_omitted)"
    )


def test_an_older_version_of_a_field_needs_the_family_to_name_that_version(tmp_path):
    before = 'before = { supported = "refused", default = "1", cite = "src: Y" }'
    field = '"n" = { supported = "yes", default = "null", cite = "src: X"'
    message = refused(tmp_path, field + " }", f"{field}, {before} }}")
    assert message == "F: family 'tiny': field 'n': a 'before' table needs the family's before_version"


def test_a_file_without_families_is_refused(tmp_path):
    path = tmp_path / "families.toml"
    path.write_text('[family.tiny]\ntitle = "t"\n')
    with pytest.raises(SchemaError) as excinfo:
        load_families(path)
    assert str(excinfo.value) == f"{path}: no [families.<name>] table"


# -- the user manual ---------------------------------------------------------------------------------------------

DOCS_PAGE = Path(__file__).resolve().parents[2] / "docs" / "openai-targets.md"


def test_the_manuals_field_table_is_the_data_file_s():
    def cell(field) -> str:
        default = f"{field.default} / {field.chat_default}" if field.chat_default else field.default
        return f"{field.supported}, `{default}`"

    names = list(FAMILIES)
    rows = ["| field | " + " | ".join(names) + " |", "| --- |" + " --- |" * len(names)]
    rows += [f"| `{f}` | " + " | ".join(cell(FAMILIES[n].fields[f]) for n in names) + " |" for f in REQUIRED_FIELDS]
    page = DOCS_PAGE.read_text()
    table = page.split("<!-- fields-table:", 1)[1].split("-->", 1)[1].split("<!-- /fields-table -->", 1)[0]
    assert table.strip().splitlines() == rows
