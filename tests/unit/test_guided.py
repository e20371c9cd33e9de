"""Guided decoding: the verdict on a guided answer (verdicts/guided.py), the guides the property matrix asks with
(fixtures/guides.toml), the reference engine's guide on hand-made logits (guided.py in the stand-in), the families'
response_format bodies, and the lock's `templates` and `guided_decoding_backend` fields."""

import json

import pytest

xgrammar = pytest.importorskip("xgrammar", reason="the guided extra is not installed")
torch = pytest.importorskip("torch", reason="the reference backend extra is not installed")

from errors import ExecutorError  # noqa: E402  (model dirs on sys.path: conftest)
from generation import GenerationRequest, ReferenceEngine, Sequence  # noqa: E402
from guided import GuidedDecoder  # noqa: E402
from served_contract import RequestError  # noqa: E402

from pytest_triton_llm.openai.contract import load_families  # noqa: E402
from pytest_triton_llm.properties.guides import load_guides  # noqa: E402
from pytest_triton_llm.stack.lock import Deployment  # noqa: E402
from pytest_triton_llm.verdicts.guided import problems  # noqa: E402

SCHEMA = '{"type": "object", "properties": {"n": {"type": "integer"}}, "required": ["n"], "additionalProperties": false}'
# what each guide of fixtures/guides.toml answered on the embedded default (2026-12-02)
SEEN = {
    "city": '{"city": "Paris", "country": "France"}',
    "yes_or_no": "no, but it is the capital of the n.",
    "days": "A year has 365 days.",
    "any_json": '{"answer": "Paris"}',
}


@pytest.mark.parametrize(
    "kind, guide, text",
    [
        ("json_schema", SCHEMA, '{"n": 3}'),
        ("json_schema", SCHEMA, '{\n  "n": 3\n}'),  # a server may guide with whitespace or without
        ("json", "", "[1, 2]"),
        ("regex", "(yes|no)\\.", "no."),
        ("ebnf_grammar", 'root ::= "A" [0-9]{1,2}', "A42"),
    ],
)
def test_an_answer_the_guide_allows_has_no_problem(kind, guide, text):
    assert problems(kind, guide, text) == []


@pytest.mark.parametrize(
    "kind, guide, text, words",
    [
        ("json_schema", SCHEMA, '{"n": 3, "m": 4}', "refuses character 7"),  # additionalProperties false: no comma
        ("json_schema", SCHEMA, '{"n": "3"}', "refuses character 6"),
        ("json_schema", SCHEMA, '{"n": 3', "stops before"),
        ("regex", "(yes|no)\\.", "maybe.", "refuses character 0"),
        ("ebnf_grammar", 'root ::= "A" [0-9]{1,2}', "A423", "refuses character 3"),
        ("json", "", "Paris", "refuses character 0"),
    ],
)
def test_an_answer_that_leaves_the_guide_is_named_with_where(kind, guide, text, words):
    [problem] = problems(kind, guide, text)
    assert words in problem


def test_a_guide_without_an_end_judges_a_text_cut_short_as_far_as_it_goes():
    assert problems("json", "", '{"a": {"b": ', may_stop_short=True) == []
    assert problems("json", "", '{"a": x', may_stop_short=True) != []
    assert problems("json", "", '{"a": {"b": ') != []


def test_every_guide_of_the_file_accepts_what_the_embedded_default_answered_and_refuses_free_text():
    guides = load_guides()
    assert set(guides.guides) == set(SEEN)
    for name, guide in guides.guides.items():
        assert problems(guide.kind, guide.guide, SEEN[name]) == [], name
        assert problems(guide.kind, guide.guide, "The capital of France is Paris.", not guide.ends) != [], name
    assert guides.unknown.kind not in {g.kind for g in guides.guides.values()}


# -- the reference engine's guide, on hand-made logits ------------------------------------------------------------
VOCAB = ["0", "1", "2", "3", "4", "5", "6", "7", "8", "</s>"]
END = 9


def engine(guided: bool = True) -> ReferenceEngine:
    e = ReferenceEngine.__new__(ReferenceEngine)  # the decoding rules need no weights
    e.vocab_size, e.fault = len(VOCAB), lambda name: False
    e.build_config = {"max_input_len": 8, "max_output_len": 6, "max_seq_len": 14}
    if guided:
        info = xgrammar.TokenizerInfo(VOCAB, stop_token_ids=[END])
        decoder = GuidedDecoder(info, len(VOCAB))
        e.guided_decoder = lambda: decoder
    return e


def test_the_guide_overrules_the_logits_and_ends_the_answer_with_the_end_token():
    e = engine()
    seq = Sequence(GenerationRequest([1], max_new_tokens=6, end_id=END, guide=("regex", "1[23]")))
    favour_5 = torch.tensor([[0.0, 1, 2, 3, 0, 9, 0, 0, 0, 0]])  # 5 first, then 3, 2, 1
    while not seq.finished:
        e.select([seq], favour_5)
    assert (seq.tokens, seq.finish_reason) == ([1, 3], "end_id")


def test_an_unguided_request_in_the_same_batch_keeps_its_greedy_tokens():
    e = engine()
    guided = Sequence(GenerationRequest([1], 4, END, guide=("regex", "7+")))
    free = Sequence(GenerationRequest([1], 4, END))
    logits = torch.tensor([[0.0, 1, 2, 3, 0, 9, 0, 0, 0, 0]] * 2)
    for _ in range(4):
        e.select([guided, free], logits)
    assert (guided.tokens, free.tokens) == ([7, 7, 7, 7], [5, 5, 5, 5])


def test_a_guided_request_without_a_guided_backend_is_refused_with_the_executors_words():
    with pytest.raises(ExecutorError, match="GuidedDecoder is not setup"):
        engine(guided=False).validate(GenerationRequest([1], 2, END, guide=("json", "")))


def test_a_guide_that_does_not_compile_is_refused_before_the_request_runs():
    with pytest.raises(RequestError, match="does not compile"):
        engine().validate(GenerationRequest([1], 2, END, guide=("json_schema", "{not json")))


# -- the families' response_format, the lock's fields ---------------------------------------------------------------
def test_each_family_asks_for_a_schema_in_its_own_form():
    families = load_families()
    trtllm, llama = families["trtllm-serve"].guides, families["llama-cpp-python"].guides
    assert trtllm.body("json_schema", SCHEMA) == {
        "type": "json_schema",
        "json_schema": {"name": "answer", "schema": json.loads(SCHEMA)},
    }
    assert trtllm.body("regex", "a\\.b") == {"type": "regex", "regex": "a\\.b"}
    assert llama.body("json_schema", SCHEMA) == {"type": "json_object", "schema": json.loads(SCHEMA)}
    assert "regex" not in llama.bodies and llama.endpoints == ("/v1/chat/completions",)


@pytest.mark.parametrize(
    "fields, message",
    [
        ({"templates": "trtllm-9"}, "no engine ensemble family"),
        ({"templates": "trtllm-1.1", "repository": "x"}, "give one or the other"),
    ],
)
def test_a_deployment_names_a_template_family_of_the_engine_ensemble_only(fields, message):
    with pytest.raises(ValueError, match=message):
        Deployment(batching="inflight", **fields)
