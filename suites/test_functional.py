"""Functional conformance of the TensorRT-LLM ensemble: contract and generation semantics.

Every test runs once per selected deployment (`--deployment`). Exact token counts and
token-level checks go through the `tensorrt_llm` model (ids in, ids out, as upstream's
inflight_batcher_llm client does); text tests run once per entry model (`ensemble` and
`tensorrt_llm_bls`, the triton_llm_entry_models marker).

Over /v1 (class TestOverV1, run with --openai-url):
Functional conformance of an OpenAI-compatible endpoint (--openai-url): the model list, greedy determinism,
max_tokens exact and never exceeded, stop strings, seeds and log probabilities, on /v1/completions and
/v1/chat/completions; the extension fields ignore_eos and min_tokens, and trtllm-serve's /perf_metrics. What the server
family's contract (openai_families.toml) says it does not honour is skipped with the contract's words."""

from __future__ import annotations

import pytest
from pytest_triton_llm.triton.client import GenerationError
from pytest_triton_llm.verdicts.equality import compare_texts
from pytest_triton_llm.stack.repository import ENTRY_MODELS, entry_models
from pytest_triton_llm.triton.tensor_contract import NO_END
import math
from concurrent.futures import ThreadPoolExecutor

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
    seen = []
    for _ in range(3):  # a tiny engine can answer all 8 between two scrapes of the gauge (CI, 2026-12-05: 3 samples)
        with triton_llm.client.watch_trtllm_gauges() as watch:
            together = [g.text for g in triton_llm.client.generate_many(batch, BATCH_TOKENS, concurrency=8)]
        # under the engine's rule: exact on float32; float16 kernels are not batch-invariant
        verdict = compare_texts(alone, together, equality_rule, triton_llm.tokenizer)
        assert verdict.passed, verdict.report(decode=triton_llm.tokenizer.decode)
        seen.append((watch.most(*SCHEDULED) or 0, watch.samples))
        if not triton_llm.ref.serving_layout.trtllm_metrics or seen[-1][0] > 1:
            return
    # the 8 really ran together: TensorRT-LLM's own gauge saw an iteration schedule more than one request (the C++
    # backend's; the llmapi model publishes no metrics: test_llmapi.py checks its batching by its timestamps)
    pytest.fail(f"no iteration scheduled more than one request in 3 tries (most scheduled, samples: {seen})")


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
        # exactly the 8 tokens the model makes, up to the end token where one comes first
        free = triton_llm.client.generate_ids(ids, 8, end_id=NO_END).token_ids
        expected = free[: free.index(triton_llm.end_id)] if triton_llm.end_id in free else free
        assert result.token_ids == expected and result.sequence_length == len(expected), (result.token_ids, free)


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
    prompt_ids, ids = baseline
    tok = triton_llm.tokenizer
    # a two-token stop word from the middle of the output that tokenizes back to itself and ends nowhere earlier: the
    # engine matches stop words against the sequence's tail after each step, the prompt's last token included
    sequence = [*prompt_ids, *ids]

    def ends_first_at(i: int) -> bool:
        return all(sequence[j - 2 : j] != ids[i : i + 2] for j in range(len(prompt_ids) + 1, len(prompt_ids) + i + 2))

    start = next(
        (
            i
            for i in range(4, len(ids) - 4)
            if tok.encode(tok.decode(ids[i : i + 2]), add_special_tokens=False) == ids[i : i + 2] and ends_first_at(i)
        ),
        None,
    )
    if start is None:
        pytest.skip(f"every two-token word of the greedy answer occurs earlier in it: {tok.decode(ids[:12])!r}...")
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


LONG = 48  # tokens of the reference greedy text that the max_tokens and stop checks cut


SEEDS = (1, 2, 3, 4)


ROOM = 256  # tokens the greedy answer of the fox prompt must end within, by itself


PAST_THE_END = 8  # tokens asked for beyond where the greedy answer ends


PERF_METRICS = "/perf_metrics"


TIMES = ("arrival_time", "first_scheduled_time", "first_token_time", "last_token_time")


KEPT_WHEN = (
    "trtllm-serve fills it only when run with return_perf_metrics and perf_metrics_max_requests > 0 (--extra_llm_api_options)"
)


@pytest.fixture(scope="module")
def long_greedy(openai_target, prompts):
    """The greedy completion of the village prompt, LONG tokens: what shorter requests must be prefixes of."""
    answer = openai_target.endpoint.complete(openai_target.completion(prompts.completion["village"], LONG))
    # a precondition, not the check: the model must not have ended before LONG tokens (whether the count and the
    # finish reason are exact is what the tests check)
    assert answer.usage["completion_tokens"] >= LONG, f"the model ended by itself ({answer.usage}): {answer.text!r}"
    return answer


@pytest.fixture(scope="module")
def ended_greedy(openai_target, prompts):
    """The greedy completion of the fox prompt, which ends by itself (its finish_reason "stop") within ROOM tokens."""
    answer = openai_target.endpoint.complete(openai_target.completion(prompts.completion["fox"], ROOM))
    # a precondition, not the check: the ignore_eos and min_tokens checks need an answer that ends by itself
    assert answer.finish_reason == "stop", f"the greedy answer must end on its own within {ROOM} tokens: {answer.text!r}"
    return answer


def _log_prob_positions(openai_target, prompts, endpoint: str, top_p: float | None) -> list[tuple[str, float, dict]]:
    """(token, its log prob, {alternative: log prob}) per position of a greedy answer with 2 alternatives listed."""
    extra = {} if top_p is None else {"top_p": top_p}
    if endpoint == "chat":
        body = openai_target.chat(prompts.chat_question, 12, logprobs=True, top_logprobs=2, **extra)
        content = (openai_target.endpoint.chat(body).logprobs or {}).get("content") or []
        return [(p["token"], p["logprob"], {t["token"]: t["logprob"] for t in p["top_logprobs"]}) for p in content]
    body = openai_target.completion(prompts.completion["fox"], 12, logprobs=2, **extra)
    logprobs = openai_target.endpoint.complete(body).logprobs
    assert logprobs is not None, "logprobs=2 answered no logprobs"
    return list(zip(logprobs["tokens"], logprobs["token_logprobs"], logprobs["top_logprobs"], strict=True))


class TestOverV1:
    """The same capability over an OpenAI endpoint: run with --openai-url, deselected without it."""

    def test_v1_models_lists_the_served_model(self, openai_target, prompts):
        """Listed once, and named by the answers to requests for it (a client that routes or bills by the answer's
        `model` must find the listed id there)."""
        listed = openai_target.endpoint.models()
        assert [m["id"] for m in listed].count(openai_target.model) == 1
        assert all(m["object"] == "model" for m in listed)
        completion = openai_target.endpoint.complete(openai_target.completion(prompts.completion["fox"], 2))
        chat = openai_target.endpoint.chat(openai_target.chat(prompts.chat_question, 2))
        assert (completion.body["model"], chat.body["model"]) == (openai_target.model, openai_target.model)

    @pytest.mark.parametrize("endpoint", ["completions", "chat"])
    def test_greedy_answer_is_deterministic(self, openai_target, prompts, endpoint):
        if endpoint == "chat":
            body = openai_target.chat(prompts.chat_question, 24)
            first, second = openai_target.endpoint.chat(body), openai_target.endpoint.chat(body)
        else:
            body = openai_target.completion(prompts.completion["fox"], 24)
            first, second = openai_target.endpoint.complete(body), openai_target.endpoint.complete(body)
        assert first.text, "the model generated nothing"
        assert (second.text, second.usage["completion_tokens"]) == (first.text, first.usage["completion_tokens"])

    @pytest.mark.parametrize("max_tokens", [1, 5, 16])
    def test_max_tokens_cuts_the_greedy_text_at_exactly_that_many_tokens(self, openai_target, prompts, long_greedy, max_tokens):
        expected_reason = openai_target.max_tokens_finish_reason
        if expected_reason is None:
            pytest.skip(f"{openai_target.family.title}: the finish_reason of a completion cut by max_tokens is unknown")
        answer = openai_target.endpoint.complete(openai_target.completion(prompts.completion["village"], max_tokens))
        assert answer.usage["completion_tokens"] == max_tokens
        assert answer.finish_reason == expected_reason
        assert long_greedy.text.startswith(answer.text), (answer.text, long_greedy.text)

    def test_a_stop_string_ends_the_text_before_it(self, openai_target, prompts, long_greedy):
        if why := openai_target.lacks("stop"):
            pytest.skip(why)
        words = long_greedy.text.split()
        stop = next(w for w in words[3:] if long_greedy.text.index(w) > 8 and w.isalpha())  # a word well inside the text
        answer = openai_target.endpoint.complete(openai_target.completion(prompts.completion["village"], LONG, stop=[stop]))
        assert answer.text == long_greedy.text[: long_greedy.text.index(stop)]
        assert answer.finish_reason == "stop"
        assert answer.usage["completion_tokens"] < LONG

    def test_the_same_seed_samples_the_same_text_and_other_seeds_other_texts(self, openai_target, prompts):
        if why := openai_target.lacks("seed"):
            pytest.skip(why)
        sampled = {}
        for seed in SEEDS:
            body = openai_target.completion(prompts.completion["haiku"], 24, temperature=1.0, seed=seed)
            first, second = openai_target.endpoint.complete(body), openai_target.endpoint.complete(body)
            assert second.text == first.text, f"seed {seed} sampled two texts"
            sampled[seed] = first.text
        assert len(set(sampled.values())) > 1, f"{len(SEEDS)} seeds at temperature 1 sampled one text: {sampled}"

    def test_log_probs_describe_the_greedy_tokens(self, openai_target, prompts):
        if why := openai_target.lacks("logprobs"):
            pytest.skip(why)
        answer = openai_target.endpoint.complete(openai_target.completion(prompts.completion["fox"], 12, logprobs=2))
        logprobs = answer.logprobs
        assert logprobs is not None, "logprobs=2 answered no logprobs"
        assert len(logprobs["tokens"]) == len(logprobs["token_logprobs"]) == answer.usage["completion_tokens"]
        assert "".join(logprobs["tokens"]) == answer.text
        for token, logprob, top in zip(logprobs["tokens"], logprobs["token_logprobs"], logprobs["top_logprobs"], strict=True):
            assert logprob <= 0.0 and math.isfinite(logprob)
            assert len(top) == 2
            # greedy: the chosen token is the likeliest (ties aside)
            assert logprob >= max(top.values()) - 1e-4, (token, logprob, top)

    def test_chat_log_probs_describe_each_greedy_token_at_its_own_position(self, openai_target, prompts):
        """Each position's top_logprobs lists its own chosen token first, at the chosen log prob (greedy: the likeliest),
        not another position's (sglang#2088)."""
        field = openai_target.family.fields.get("top_logprobs")
        if field is None or field.supported not in ("yes", "partial"):  # partial: chat only, with logprobs true, as here
            pytest.skip(openai_target.family.why_not("top_logprobs") if field else "no top_logprobs field")
        answer = openai_target.endpoint.chat(openai_target.chat(prompts.chat_question, 12, logprobs=True, top_logprobs=2))
        content = (answer.logprobs or {}).get("content")
        assert content, "logprobs true with top_logprobs 2 answered no logprobs content"
        for position in content:
            listed = {t["token"]: t["logprob"] for t in position["top_logprobs"]}
            assert len(position["top_logprobs"]) == 2, f"top_logprobs 2 listed {listed} at {position['token']!r}"
            assert position["token"] in listed, f"the chosen {position['token']!r} is not among its alternatives {listed}"
            assert abs(listed[position["token"]] - position["logprob"]) <= 1e-4, (position, listed)
            assert position["logprob"] >= max(listed.values()) - 1e-4, (position, listed)  # greedy: the likeliest

    @pytest.mark.parametrize("endpoint", ["completions", "chat"])
    def test_top_p_leaves_the_greedy_log_probs_as_they_are(self, openai_target, prompts, endpoint):
        """At temperature 0 the answer is greedy and top_p has nothing to cut, so the log probs and their alternatives
        are the model's, with or without it: TensorRT-LLM's sampler resolves temperature 0 to its greedy strategy
        whatever top_p (sampling_utils.resolve_sampling_strategy), vLLM resets top_p for greedy requests, llama.cpp's
        come from the raw logits. A server that renormalises them over the nucleus lists fewer alternatives and puts
        the chosen token near 0 (text-generation-inference#2108)."""
        if why := openai_target.lacks("top_p") or (openai_target.lacks("logprobs") if endpoint == "completions" else None):
            pytest.skip(why)
        field = openai_target.family.fields.get("top_logprobs")
        if endpoint == "chat" and (field is None or field.supported not in ("yes", "partial")):  # partial: chat, as here
            pytest.skip(openai_target.family.why_not("top_logprobs") if field else "no top_logprobs field")
        by_top_p = {top_p: _log_prob_positions(openai_target, prompts, endpoint, top_p) for top_p in (None, 0.5)}
        plain, cut = by_top_p[None], by_top_p[0.5]
        assert [p[0] for p in cut] == [p[0] for p in plain], "top_p 0.5 changed the greedy tokens"
        for (token, chosen, listed), (_, chosen_cut, listed_cut) in zip(plain, cut, strict=True):
            assert len(listed_cut) == len(listed) == 2, f"{token!r}: alternatives {listed} without top_p, {listed_cut} with 0.5"
            assert abs(chosen_cut - chosen) <= 1e-3, f"{token!r}: log prob {chosen} without top_p, {chosen_cut} with top_p 0.5"
            for alternative, value in listed.items():
                assert abs(listed_cut.get(alternative, 0.0) - value) <= 1e-3, (token, listed, listed_cut)

    @pytest.mark.parametrize("delivery", ["unary", "streamed"])
    @pytest.mark.parametrize("endpoint", ["completions", "chat"])
    def test_ignore_eos_runs_past_the_end_to_exactly_max_tokens(self, openai_target, prompts, endpoint, delivery):
        """A benchmark's fixed output lengths rest on it: the answer goes on past where the model would end, to exactly
        max_tokens (streamed: counted by its usage chunk), its text beginning with the answer that ended."""
        if why := openai_target.lacks("ignore_eos") or (
            openai_target.lacks("stream_options.include_usage") if delivery == "streamed" else None
        ):
            pytest.skip(why)
        ask = openai_target.endpoint.chat if endpoint == "chat" else openai_target.endpoint.complete
        body = openai_target.chat if endpoint == "chat" else openai_target.completion
        asked = prompts.chat_short if endpoint == "chat" else prompts.completion["fox"]
        ended = ask(body(asked, ROOM))
        # a precondition, not the check: an answer that ends by itself
        assert ended.finish_reason == "stop", f"the greedy answer must end on its own within {ROOM} tokens: {ended.text!r}"
        wanted = ended.usage["completion_tokens"] + PAST_THE_END
        request = body(asked, wanted, ignore_eos=True)
        if delivery == "streamed":
            path = "/chat/completions" if endpoint == "chat" else "/completions"
            answer = openai_target.endpoint.stream(path, {**request, "stream_options": {"include_usage": True}})
        else:
            answer = ask(request)
        assert answer.usage["completion_tokens"] == wanted, (answer.finish_reason, answer.text)
        if openai_target.max_tokens_finish_reason is not None:
            assert answer.finish_reason == openai_target.max_tokens_finish_reason
        assert answer.text.startswith(ended.text), (answer.text, ended.text)

    def test_min_tokens_holds_the_end_back(self, openai_target, prompts, ended_greedy):
        """At least min_tokens tokens, the greedy answer unchanged up to where it ended. max_tokens leaves PAST_THE_END
        more: an answer that ends early shows as well, and a model that goes on past min_tokens stops soon."""
        if why := openai_target.lacks("min_tokens"):
            pytest.skip(why)
        least = ended_greedy.usage["completion_tokens"] + PAST_THE_END
        body = openai_target.completion(prompts.completion["fox"], least + PAST_THE_END, min_tokens=least)
        answer = openai_target.endpoint.complete(body)
        assert answer.usage["completion_tokens"] >= least, (answer.finish_reason, answer.text)
        assert answer.text.startswith(ended_greedy.text), (answer.text, ended_greedy.text)

    def test_perf_metrics_time_each_request_in_order(self, openai_target, prompts):
        """trtllm-serve's /perf_metrics: an entry per finished request, its executor timestamps in the order of a request's
        life, each entry handed out once (a read drains them). Skipped where the server keeps none (KEPT_WHEN)."""
        if PERF_METRICS not in openai_target.family.endpoints:
            pytest.skip(f"{openai_target.family.title}: no {PERF_METRICS} endpoint")
        openai_target.endpoint.request("GET", PERF_METRICS, under_v1=False)  # what earlier requests left
        for prompt in prompts.batch(2):
            openai_target.endpoint.complete(openai_target.completion(prompt, 8))
        first = openai_target.endpoint.request("GET", PERF_METRICS, under_v1=False)
        assert first.status == 200, first.body
        if first.body == []:
            pytest.skip(f"the server keeps no perf metrics ({PERF_METRICS} answered []): {KEPT_WHEN}")
        second = openai_target.endpoint.request("GET", PERF_METRICS, under_v1=False)
        ids = [entry["request_id"] for entry in first.body]
        assert len(ids) >= 2 and len(set(ids)) == len(ids), ids  # the two requests (and any other client's), each once
        assert not {entry["request_id"] for entry in second.body} & set(ids), "a read handed out entries a read before had"
        for entry in first.body:
            timing = entry["perf_metrics"]["timing_metrics"]
            times = [timing[name] for name in TIMES]
            assert times == sorted(times), dict(zip(TIMES, times, strict=True))

    @pytest.mark.speculative
    @pytest.mark.parametrize("delivery", ["unary", "streamed", "batched"])
    @pytest.mark.parametrize("endpoint", ["completions", "chat"])
    def test_a_copying_answer_ends_at_its_stop_word_and_at_max_tokens(self, openai_target, prompts, endpoint, delivery):
        """On a prompt whose answer copies it, where a speculating server keeps several draft tokens a step (and one that
        does not answers alike): max_tokens 5 and 7 give the longer answer's first 5 and 7 tokens, and a stop word from
        the middle of the copy ends the answer just before it. A step must not carry the answer past either
        (vLLM#47616 kept the tokens after a stop string, SGLang#31599 those after max_new_tokens). Streamed, and the three
        requests at once, each answer and finish_reason must be the unary one."""
        path = "/chat/completions" if endpoint == "chat" else "/completions"
        ask = openai_target.endpoint.chat if endpoint == "chat" else openai_target.endpoint.complete
        body = openai_target.chat if endpoint == "chat" else openai_target.completion
        prompt = prompts.copying["fox"]
        long = ask(body(prompt, 24))
        words = [w for w in long.text.split() if w.isalpha() and len(w) > 3 and long.text.index(w) > len(long.text) // 4]
        if not words:
            pytest.fail(f"the copying answer has no word to stop at: {long.text!r}")
        bodies = [body(prompt, 5), body(prompt, 7), body(prompt, 24, stop=[words[0]])]
        unary = [ask(b) for b in bodies]
        cut_reason = openai_target.max_tokens_finish_reason
        for n, short in zip((5, 7), unary, strict=False):
            assert long.text.startswith(short.text) and short.usage["completion_tokens"] == n, (n, short.text, long.text)
            assert cut_reason is None or short.finish_reason == cut_reason, (n, short.finish_reason)
        expected = long.text[: long.text.index(words[0])]
        assert unary[2].text.rstrip() == expected.rstrip(), f"stop {words[0]!r}: {unary[2].text!r}, expected {expected!r}"
        assert unary[2].finish_reason == "stop", (words[0], unary[2].finish_reason)
        if delivery == "streamed":
            got = [openai_target.endpoint.stream(path, b) for b in bodies]
        elif delivery == "batched":
            with ThreadPoolExecutor(len(bodies)) as pool:
                got = list(pool.map(ask, bodies))
        for b, one, other in zip(bodies, unary, got if delivery != "unary" else unary, strict=True):
            what = f"{delivery}, max_tokens {b['max_tokens']}, stop {b.get('stop')}"
            assert (other.text, other.finish_reason) == (one.text, one.finish_reason), (what, other.text, one.text)

    @pytest.mark.speculative
    @pytest.mark.parametrize("endpoint", ["completions", "chat"])
    def test_draft_counts_add_up_where_the_server_speculates(self, openai_target, prompts, endpoint):
        """trtllm-serve's /perf_metrics: the entry of a request that drafted carries speculative_decoding (get_perf_metrics
        adds it when total_draft_tokens > 0): the rate is accepted / drafted and accepted <= min(drafted, completion
        tokens - 1), the first token being the context phase's; on a completion that copies its prompt at least one draft
        token is kept. Skipped where the server keeps no perf metrics, or drafts nothing (no speculative_config)."""
        if PERF_METRICS not in openai_target.family.endpoints:
            pytest.skip(f"{openai_target.family.title}: no {PERF_METRICS} endpoint")
        openai_target.endpoint.request("GET", PERF_METRICS, under_v1=False)  # what earlier requests left
        prompt = prompts.copying["fox"]
        if endpoint == "chat":
            answer = openai_target.endpoint.chat(openai_target.chat(prompt, 24))
        else:
            answer = openai_target.endpoint.complete(openai_target.completion(prompt, 24))
        entries = openai_target.endpoint.request("GET", PERF_METRICS, under_v1=False).body
        if entries == []:
            pytest.skip(f"the server keeps no perf metrics ({PERF_METRICS} answered []): {KEPT_WHEN}")
        drafts = [e["perf_metrics"]["speculative_decoding"] for e in entries if "speculative_decoding" in e["perf_metrics"]]
        if not drafts:
            pytest.skip("no request drafted: the server does not speculate (no speculative_config in its LLM API options)")
        for counts in drafts:
            accepted, drafted = counts["total_accepted_draft_tokens"], counts["total_draft_tokens"]
            assert 0 <= accepted <= drafted and counts["acceptance_rate"] == pytest.approx(accepted / drafted), counts
        if len(entries) == 1:  # ours alone (another client's request would leave an entry too)
            [counts] = drafts
            assert counts["total_accepted_draft_tokens"] <= answer.usage["completion_tokens"] - 1, (counts, answer.usage)
            if endpoint == "completions":
                assert counts["total_accepted_draft_tokens"] >= 1, (counts, answer.text)
