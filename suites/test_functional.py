"""Functional conformance of the TensorRT-LLM ensemble: contract and generation semantics.

Every test runs once per selected deployment (`--deployment`). Exact token counts and
token-level checks go through the `tensorrt_llm` model (ids in, ids out, as upstream's
inflight_batcher_llm client does); text tests run once per entry model (`ensemble` and
`tensorrt_llm_bls`, the triton_llm_entry_models marker).
"""

from __future__ import annotations

import pytest

from pytest_triton_llm.triton.client import GenerationError
from pytest_triton_llm.verdicts.equality import compare_texts
from pytest_triton_llm.stack.repository import ENTRY_MODELS, entry_models
from pytest_triton_llm.triton.tensor_contract import NO_END

pytestmark = pytest.mark.functional

MAX_TOKENS = 24
BATCH_TOKENS = 16  # a request mix-up shows at once; the half-precision rule forgives a fork after 8 tokens
SCHEDULED = ("nv_trt_llm_request_metrics", "scheduled")  # requests TensorRT-LLM scheduled in its latest iteration


def _triton_dtype(config_dtype: str) -> str:
    name = config_dtype.removeprefix("TYPE_")
    return "BYTES" if name == "STRING" else name


def _contains(sequence: list[int], word: list[int]) -> bool:
    return any(sequence[i : i + len(word)] == word for i in range(len(sequence) - len(word) + 1))


@pytest.fixture(scope="session")
def baseline(triton_llm, prompts):
    """Greedy ids of the first completion prompt, with nothing to stop them early."""
    ids = triton_llm.encode(prompts.completion["fox"])
    return ids, triton_llm.client.generate_ids(ids, MAX_TOKENS, end_id=NO_END).token_ids


# -- the contract -----------------------------------------------------------------------------
def _skip_unless_served(triton_llm, model: str) -> None:
    if model in ENTRY_MODELS and model not in entry_models(triton_llm.ref):
        pytest.skip(f"{triton_llm.id} does not serve {model} (its repository's `models`)")


@pytest.mark.triton_llm_requires("inflight_batcher_llm")
@pytest.mark.parametrize("model", ["ensemble", "tensorrt_llm", "tensorrt_llm_bls"])
def test_inputs_match_upstream_contract(triton_llm, contract, model):
    _skip_unless_served(triton_llm, model)
    metadata = {t["name"]: t for t in triton_llm.client.model_metadata(model)["inputs"]}
    config = {t["name"]: t for t in triton_llm.client.model_config(model)["input"]}
    expected = contract[model]["inputs"]
    assert sorted(metadata) == sorted(expected)
    for name, spec in expected.items():
        assert metadata[name]["datatype"] == _triton_dtype(spec["dtype"]), name
        assert config[name].get("optional", False) == spec.get("optional", False), name
        assert [int(d) for d in config[name]["dims"]] == spec["dims"], name


@pytest.mark.triton_llm_requires("inflight_batcher_llm")
@pytest.mark.parametrize("model", ["ensemble", "tensorrt_llm", "tensorrt_llm_bls"])
def test_outputs_match_upstream_contract(triton_llm, contract, model):
    _skip_unless_served(triton_llm, model)
    metadata = {t["name"]: t for t in triton_llm.client.model_metadata(model)["outputs"]}
    expected = contract[model]["outputs"]
    assert set(expected) <= set(metadata), f"missing outputs: {sorted(set(expected) - set(metadata))}"
    for name, spec in expected.items():
        assert metadata[name]["datatype"] == _triton_dtype(spec["dtype"]), name
        assert [int(d) for d in metadata[name]["shape"]] == [-1, *spec["dims"]], name


# -- greedy determinism and batching invariance ------------------------------------------------
@pytest.mark.triton_llm_entry_models
def test_greedy_output_is_deterministic(triton_llm, prompts):
    prompt = prompts.completion["village"]
    first = triton_llm.client.generate(prompt, MAX_TOKENS)
    second = triton_llm.client.generate(prompt, MAX_TOKENS)
    assert first.text, "the model generated nothing"
    assert first.text == second.text


@pytest.mark.triton_llm_entry_models
def test_same_text_alone_and_in_8_concurrent_requests(triton_llm, prompts, equality_rule):
    batch = prompts.batch(8)
    alone = [triton_llm.client.generate(p, BATCH_TOKENS).text for p in batch]
    with triton_llm.client.watch_trtllm_gauges() as watch:
        together = [g.text for g in triton_llm.client.generate_many(batch, BATCH_TOKENS, concurrency=8)]
    # under the engine's rule: exact on float32; float16 kernels are not batch-invariant
    verdict = compare_texts(alone, together, equality_rule, triton_llm.tokenizer)
    assert verdict.passed, verdict.report(decode=triton_llm.tokenizer.decode)
    # the 8 really ran together: TensorRT-LLM's own gauge saw an iteration schedule more than one request (the C++
    # backend's; the llmapi model publishes no metrics: test_llmapi.py checks its batching by its timestamps)
    if triton_llm.ref.serving_layout.trtllm_metrics:
        assert (watch.most(*SCHEDULED) or 0) > 1, f"no iteration scheduled more than one request ({watch.samples} samples)"


# -- length control ------------------------------------------------------------------------
@pytest.mark.triton_llm_requires("inflight_batcher_llm")
@pytest.mark.parametrize("max_tokens", [1, 17])
def test_max_tokens_is_exact_when_nothing_stops_early(triton_llm, prompts, max_tokens):
    ids = triton_llm.encode(prompts.completion["columbus"])
    result = triton_llm.client.generate_ids(ids, max_tokens, end_id=NO_END)
    assert len(result.token_ids) == max_tokens
    assert result.sequence_length == max_tokens


@pytest.mark.triton_llm_requires("inflight_batcher_llm")
def test_max_tokens_is_never_exceeded(triton_llm, prompts):
    for prompt in prompts.batch(3):
        ids = triton_llm.encode(prompt)
        result = triton_llm.client.generate_ids(ids, 8, end_id=triton_llm.end_id)
        assert 0 < len(result.token_ids) <= 8


@pytest.mark.triton_llm_requires("inflight_batcher_llm")
@pytest.mark.triton_llm_entry_models
def test_ensemble_text_is_the_detokenized_core_output(triton_llm, prompts, baseline):
    _, ids = baseline
    text = triton_llm.client.generate(prompts.completion["fox"], MAX_TOKENS, end_id=NO_END).text
    assert text == triton_llm.tokenizer.decode(ids, skip_special_tokens=True)


@pytest.mark.triton_llm_requires("inflight_batcher_llm")
def test_end_id_stops_generation_before_that_token(triton_llm, baseline):
    prompt_ids, ids = baseline
    stop_token = ids[5]
    first = ids.index(stop_token)
    result = triton_llm.client.generate_ids(prompt_ids, MAX_TOKENS, end_id=stop_token)
    assert result.token_ids == ids[:first], "generation must end at end_id, without it"


@pytest.mark.triton_llm_requires("inflight_batcher_llm")
@pytest.mark.triton_llm_entry_models
def test_stop_words_truncate_after_the_stop_word(triton_llm, prompts, baseline):
    _, ids = baseline
    tok = triton_llm.tokenizer
    # a two-token stop word from the middle of the output that tokenizes back to itself
    start = next(
        i for i in range(4, len(ids) - 4) if tok.encode(tok.decode(ids[i : i + 2]), add_special_tokens=False) == ids[i : i + 2]
    )
    word = ids[start : start + 2]
    expected = tok.decode(ids[: start + 2], skip_special_tokens=True)
    text = triton_llm.client.generate(prompts.completion["fox"], MAX_TOKENS, end_id=NO_END, stop_words=[tok.decode(word)]).text
    assert text == expected
    assert len(text) < len(tok.decode(ids, skip_special_tokens=True))


@pytest.mark.triton_llm_requires("inflight_batcher_llm")
@pytest.mark.triton_llm_entry_models
def test_bad_words_never_appear(triton_llm, prompts, baseline):
    prompt_ids, ids = baseline
    tok = triton_llm.tokenizer
    word_text = tok.decode(ids[2:3])
    word = tok.encode(word_text, add_special_tokens=False)
    core = triton_llm.client.generate_ids(prompt_ids, MAX_TOKENS, end_id=NO_END, bad_words_ids=[word])
    assert not _contains(core.token_ids, word)
    assert core.token_ids != ids, "banning a word of the greedy output must change it"
    text = triton_llm.client.generate(prompts.completion["fox"], MAX_TOKENS, end_id=NO_END, bad_words=[word_text]).text
    assert text == tok.decode(core.token_ids, skip_special_tokens=True)


# -- outputs -------------------------------------------------------------------------------
@pytest.mark.triton_llm_requires("inflight_batcher_llm", "return_log_probs")
def test_optional_outputs_come_only_when_requested(triton_llm, baseline):
    prompt_ids, _ = baseline
    plain = triton_llm.client.generate_ids(prompt_ids, 4, end_id=NO_END).raw
    assert {"output_ids", "sequence_length"} <= set(plain)
    assert not {"cum_log_probs", "output_log_probs", "context_logits", "generation_logits", "batch_index"} & set(plain)
    asked = triton_llm.client.generate_ids(prompt_ids, 4, end_id=NO_END, return_log_probs=True).raw
    assert {"cum_log_probs", "output_log_probs"} <= set(asked)
    assert asked["output_ids"].shape[:2] == (1, 1) and asked["sequence_length"].shape == (1, 1)  # [batch, beam, ...]


@pytest.mark.triton_llm_entry_models
def test_the_ensemble_answers_one_text_per_request(triton_llm, prompts):
    outputs = triton_llm.client.generate(prompts.completion["fox"], 4).raw
    assert outputs["text_output"].shape == (1,), "postprocessing returns one string per request and beam"
    assert "cum_log_probs" not in outputs


@pytest.mark.triton_llm_requires("inflight_batcher_llm", "exclude_input_in_output")
def test_exclude_input_in_output(triton_llm, baseline):
    prompt_ids, ids = baseline
    with_input = triton_llm.client.generate_ids(prompt_ids, MAX_TOKENS, end_id=NO_END, exclude_input_in_output=False)
    without = triton_llm.client.generate_ids(prompt_ids, MAX_TOKENS, end_id=NO_END, exclude_input_in_output=True)
    assert with_input.token_ids == prompt_ids + ids
    assert with_input.sequence_length == len(prompt_ids) + len(ids)
    assert without.token_ids == ids


@pytest.mark.triton_llm_entry_models
def test_ensemble_excludes_the_prompt_as_deployed(triton_llm, prompts):
    prompt = prompts.completion["fox"]
    text = triton_llm.client.generate(prompt, MAX_TOKENS).text
    assert triton_llm.ref.options.exclude_input_in_output == (not text.startswith(prompt))


@pytest.mark.triton_llm_requires("inflight_batcher_llm", "return_log_probs")
def test_log_probs_are_returned_per_token(triton_llm, baseline):
    prompt_ids, _ = baseline
    result = triton_llm.client.generate_ids(prompt_ids, 12, end_id=NO_END, return_log_probs=True)
    log_probs = result.output_log_probs[: len(result.token_ids)]
    assert len(log_probs) == 12
    assert all(lp <= 0.0 for lp in log_probs)
    assert result.cum_log_prob == pytest.approx(sum(log_probs), abs=1e-3)
    assert result.cum_log_prob < 0.0


# -- protocols and the end-to-end answer -------------------------------------------------------
@pytest.mark.triton_llm_entry_models
@pytest.mark.triton_llm_requires("generate_endpoint")
def test_http_generate_and_grpc_infer_agree(triton_llm, prompts):
    prompt = prompts.completion["machine_learning"]
    protocols = triton_llm.client.protocols  # a decoupled ensemble takes no unary HTTP infer
    texts = {p: triton_llm.client.generate(prompt, MAX_TOKENS, protocol=p).text for p in protocols}
    assert texts["grpc"] and {"grpc", "generate"} <= set(texts)
    assert set(texts.values()) == {texts["grpc"]}, texts


@pytest.mark.triton_llm_entry_models
@pytest.mark.triton_llm_trained_weights("the known answer needs trained weights")
def test_chat_answer_contains_paris(triton_llm, prompts):
    answer = triton_llm.client.generate(triton_llm.chat_prompt(prompts.chat_question), 32).text
    assert prompts.chat_expected in answer, answer


@pytest.mark.triton_llm_requires("inflight_batcher_llm")
def test_prompt_over_max_input_len_is_refused_and_server_keeps_serving(triton_llm, prompts):
    limit = triton_llm.ref.engine.max_input_len
    with pytest.raises(GenerationError, match=r"exceeds maximum input length"):
        triton_llm.client.generate_ids([42] * (limit + 1), 4)
    assert triton_llm.server.ready()
    assert triton_llm.client.generate(prompts.completion["fox"], 4).text
