"""The llmapi model's own contract (TensorRT-LLM's PyTorch path, triton_backend/all_models/llmapi): its inputs and
outputs as the served version declares them, finish and stop reasons, KV-cache block reuse, the four timestamps,
streaming and cancellation. Text-level checks shared with the engine ensemble run from the other suites."""

from __future__ import annotations

import uuid
from concurrent.futures import ThreadPoolExecutor

import pytest

from pytest_triton_llm.properties.kv_blocks import ANSWER_TOKENS, FULL_BLOCKS, fresh_prompt
from pytest_triton_llm.stack.kv_reuse import kv_cache_reuse, tokens_per_block
from pytest_triton_llm.triton.client import GenerationError
from pytest_triton_llm.verdicts.equality import compare_texts
from pytest_triton_llm.common.files import fixtures_dir
from pytest_triton_llm.triton.llmapi_contract import KV_CACHE_OUTPUTS, TIMESTAMP_OUTPUTS, output_number, output_text
from pytest_triton_llm.triton.llmapi_reasons import ended
from pytest_triton_llm.stack.repository.llmapi import llmapi_family
from pytest_triton_llm.common.schema import load_toml

TOKENS = 24


def _ask(served, prompt: str, max_tokens: int = TOKENS, **options):
    return served.client.generate(prompt, max_tokens, return_finish_reason=True, return_stop_reason=True, **options)


@pytest.fixture(scope="session")
def llmapi_contract(triton_llm):
    return load_toml(fixtures_dir() / "contracts" / f"{llmapi_family(triton_llm.server.version)}.toml")


@pytest.mark.functional
@pytest.mark.triton_llm_requires("llmapi")
@pytest.mark.parametrize("side", ["inputs", "outputs"])
def test_tensors_match_the_upstream_llmapi_contract(triton_llm, llmapi_contract, side):
    metadata = {t["name"]: t for t in triton_llm.client.model_metadata("tensorrt_llm")[side]}
    expected = llmapi_contract[side]
    assert sorted(metadata) == sorted(expected)
    for name, spec in expected.items():
        assert metadata[name]["datatype"] == spec["dtype"].removeprefix("TYPE_").replace("STRING", "BYTES"), name
        assert [int(d) for d in metadata[name]["shape"]] == spec["dims"], name


DELIVERIES = ["unary", "streamed", "batched"]
NEIGHBOURS = 3  # a batched request is sent with this many others at once


def _ended(served, prompts, prompt: str, max_tokens: int, delivery: str, **options) -> tuple[str, str | None, str | None]:
    """(text, finish_reason, stop_reason) of one request: unary, streamed, or sent at once with NEIGHBOURS other
    requests (of `prompts`)."""
    if delivery == "streamed" and not served.ref.options.decoupled:
        pytest.skip(f"{served.id} is not decoupled: it does not stream")
    if delivery != "batched":
        return ended(served.client, prompt, max_tokens, streamed=delivery == "streamed", **options)
    with ThreadPoolExecutor(1 + NEIGHBOURS) as pool:
        mine = pool.submit(ended, served.client, prompt, max_tokens, **options)
        others = [pool.submit(served.client.generate, other, max_tokens) for other in prompts.batch(NEIGHBOURS)]
        [other.result() for other in others]
        return mine.result()


@pytest.mark.functional
@pytest.mark.triton_llm_requires("llmapi")
@pytest.mark.parametrize("delivery", DELIVERIES)
def test_finish_reason_is_length_when_max_tokens_ends_it(triton_llm, prompts, delivery):
    # upstream's model.py sends str(output.finish_reason) and str(output.stop_reason) (tensorrtllm_backend v0.19.0
    # all_models/llmapi/tensorrt_llm/1/model.py; TensorRT-LLM triton_backend since): tensorrt_llm/executor/result.py sets
    # "length" for LENGTH, "stop" for END_ID and STOP_WORDS, and the stop reason only for a stop word ("None" else)
    text, finish, stop = _ended(triton_llm, prompts, prompts.completion["village"], 6, delivery)
    assert (finish, stop) == ("length", "None"), (delivery, text)
    assert len(triton_llm.tokenizer.encode(text, add_special_tokens=False)) <= 7  # 6, give or take a merge
    if delivery != "unary":
        assert text == _ended(triton_llm, prompts, prompts.completion["village"], 6, "unary")[0], delivery


@pytest.mark.functional
@pytest.mark.triton_llm_requires("llmapi")
@pytest.mark.parametrize("delivery", DELIVERIES)
def test_a_stop_string_ends_the_text_and_is_the_stop_reason(triton_llm, prompts, delivery):
    prompt = prompts.completion["fox"]
    full = _ask(triton_llm, prompt).text
    words = full.split()
    assert len(words) >= 4, full
    stop = words[2]
    text, finish, reason = _ended(triton_llm, prompts, prompt, TOKENS, delivery, stop_words=[stop])
    assert (finish, reason) == ("stop", stop), (delivery, text)
    # the answer is the full one up to the stop string, which is cut off: what follows it there is the stop string
    assert full.startswith(text) and full[len(text) :].lstrip().startswith(stop), (delivery, text, full)


@pytest.mark.functional
@pytest.mark.triton_llm_requires("llmapi")
@pytest.mark.parametrize("delivery", DELIVERIES)
def test_the_end_token_is_a_stop_with_no_stop_reason(triton_llm, prompts, delivery):
    prompt = triton_llm.chat_prompt(prompts.chat_question)
    text, finish, stop = _ended(triton_llm, prompts, prompt, 200, delivery)
    assert (finish, stop) == ("stop", "None"), (delivery, text)
    if delivery != "unary":
        assert text == _ended(triton_llm, prompts, prompt, 200, "unary")[0], delivery


@pytest.mark.functional
@pytest.mark.triton_llm_requires("llmapi", "llmapi_perf_metrics")
def test_optional_outputs_come_only_when_requested(triton_llm, prompts):
    # upstream's _create_response always sends text_output, the others only when their return_* input (or
    # sampling_param_return_perf_metrics) asks for them (model.py v0.19.0 on; helpers.get_output_config_from_request)
    plain = triton_llm.client.generate(prompts.completion["fox"], 4).raw
    assert set(plain) == {"text_output"}
    asked = triton_llm.client.generate(prompts.completion["fox"], 4, return_log_probs=True, return_perf_metrics=True).raw
    assert {"cumulative_logprob", *KV_CACHE_OUTPUTS, *TIMESTAMP_OUTPUTS} <= set(asked)
    assert float(output_text(asked, "cumulative_logprob")) < 0.0


@pytest.mark.functional
@pytest.mark.triton_llm_requires("llmapi")
def test_the_prompt_is_returned_unless_excluded(triton_llm, prompts):
    prompt = prompts.completion["fox"]
    echoed = triton_llm.client.generate(prompt, 8, exclude_input_in_output=False).text
    excluded = triton_llm.client.generate(prompt, 8, exclude_input_in_output=True).text
    assert echoed.startswith(prompt.strip()) and echoed.endswith(excluded)
    assert not excluded.startswith(prompt.strip()) and len(excluded) < len(echoed), (echoed, excluded)


@pytest.mark.functional
@pytest.mark.triton_llm_requires("llmapi", "llmapi_perf_metrics")
def test_a_repeated_prompt_reuses_its_kv_cache_blocks(triton_llm, prompts, equality_rule):
    """A fresh prompt of 2 blocks and a token, sent twice: the repeat finds the 2 whole blocks (the last token is always
    computed) and allocates 1 (properties/kv_blocks.py says why these lengths make the counts exact)."""
    size, size_from = tokens_per_block(triton_llm)
    reuse, reuse_from = kv_cache_reuse(triton_llm)
    if not reuse:
        pytest.skip(f"KV-cache block reuse is off here ({reuse_from})")
    prompt = fresh_prompt(triton_llm.tokenizer, FULL_BLOCKS * size + 1)
    first = triton_llm.client.generate(prompt, ANSWER_TOKENS, return_perf_metrics=True).raw
    second = triton_llm.client.generate(prompt, ANSWER_TOKENS, return_perf_metrics=True).raw
    figures = {name: (output_number(first, name), output_number(second, name)) for name in KV_CACHE_OUTPUTS}
    counted = {n: figures[n] for n in ("kv_cache_alloc_new_blocks", "kv_cache_reused_block", "kv_cache_alloc_total_blocks")}
    blocks = FULL_BLOCKS + 1
    assert counted == {
        "kv_cache_alloc_new_blocks": (blocks, 1),
        "kv_cache_reused_block": (0, FULL_BLOCKS),
        "kv_cache_alloc_total_blocks": (blocks, blocks),
    }, f"(first, repeat) of a prompt of {FULL_BLOCKS * size + 1} tokens in blocks of {size} ({size_from}): {figures}"
    for sent in (0, 1):  # hit rate = reused / (reused + missed), as the executor defines it
        reused, missed = figures["kv_cache_reused_block"][sent], figures["kv_cache_missed_block"][sent]
        assert abs(figures["kv_cache_hit_rate"][sent] - (reused / (reused + missed) if reused + missed else 0.0)) < 1e-6, figures
    # reused blocks give the same answer (within the engine's rule: a context computed in pieces may round differently)
    texts = [output_text(r, "text_output") for r in (first, second)]
    verdict = compare_texts(texts[:1], texts[1:], equality_rule, triton_llm.tokenizer)
    assert verdict.passed, verdict.report(labels=["the repeated prompt"])


@pytest.mark.functional
@pytest.mark.triton_llm_requires("llmapi", "llmapi_perf_metrics")
def test_timestamps_are_ordered_arrival_scheduled_first_token_last_token(triton_llm, prompts):
    raw = triton_llm.client.generate(prompts.completion["columbus"], 12, return_perf_metrics=True).raw
    arrival, scheduled, first, last = (output_number(raw, name) for name in TIMESTAMP_OUTPUTS)
    assert 0 < arrival <= scheduled <= first <= last, (arrival, scheduled, first, last)


@pytest.mark.functional
@pytest.mark.triton_llm_requires("llmapi")
def test_a_prompt_that_leaves_no_room_under_max_seq_len_is_refused_and_the_server_keeps_serving(triton_llm, prompts):
    # the PyTorch path checks no max_input_len; TensorRT-LLM 1.x's worker refuses a prompt whose deduced
    # default_max_tokens (max_seq_len - prompt length) is not positive, and model.py wraps it: "Error generating request"
    engine = triton_llm.ref.engine
    with pytest.raises(GenerationError, match="Error generating request"):
        triton_llm.client.generate("word " * (engine.max_input_len + engine.max_output_len + 10), 4)
    assert triton_llm.client.generate(prompts.completion["fox"], 4).text


@pytest.mark.streaming
@pytest.mark.triton_llm_requires("llmapi", "streaming")
def test_each_streamed_response_carries_the_text_so_far(triton_llm, prompts):
    result = triton_llm.client.stream(prompts.completion["village"], TOKENS, return_finish_reason=True)
    texts = [e.text() for e in result.content_events]
    assert len(texts) > 4
    assert all(later.startswith(earlier) for earlier, later in zip(texts, texts[1:], strict=False)), texts
    unary = triton_llm.client.generate(prompts.completion["village"], TOKENS, return_finish_reason=True)
    finish = output_text(result.content_events[-1].outputs, "finish_reason")
    assert finish == output_text(unary.raw, "finish_reason") in ("length", "stop"), (finish, texts[-1], unary.text)


@pytest.mark.streaming
@pytest.mark.triton_llm_requires("llmapi", "streaming")
def test_the_first_streamed_text_arrives_well_before_the_last(triton_llm, prompts):
    events = triton_llm.client.stream(prompts.completion["village"], 48).content_events
    assert len(events) > 8
    assert events[0].t_s < events[-1].t_s / 4, [e.t_s for e in events]


@pytest.mark.streaming
@pytest.mark.triton_llm_requires("llmapi")
def test_streaming_on_a_model_that_is_not_decoupled_is_refused(triton_llm, prompts):
    # upstream: `if streaming and not self.decoupled: raise pb_utils.TritonModelException("Streaming is only supported in
    # decoupled mode.")` (model.py v0.19.0; TensorRT-LLM triton_backend the same), wrapped as "Error generating request"
    if triton_llm.ref.options.decoupled:
        pytest.skip(f"{triton_llm.id} is decoupled: it streams")
    with pytest.raises(GenerationError, match="Streaming is only supported in decoupled mode"):
        triton_llm.client.stream(prompts.completion["fox"], 8)


@pytest.mark.early_stop
@pytest.mark.triton_llm_requires("llmapi", "cancellation")
def test_a_cancelled_stream_frees_its_slot(triton_llm, prompts, equality_rule):
    prompt = prompts.completion["columbus"]
    expected = triton_llm.client.generate(prompt, 12).text
    with ThreadPoolExecutor(4) as pool:
        cancelled = list(pool.map(lambda _: triton_llm.client.stream(prompt, 200, cancel_after_s=1.0), range(4)))
    assert all(r.cancelled for r in cancelled)
    with ThreadPoolExecutor(4) as pool:
        later = list(pool.map(lambda _: triton_llm.client.generate(prompt, 12).text, range(4)))
    verdict = compare_texts([expected] * 4, later, equality_rule, triton_llm.tokenizer)  # 4 at once: not batch-invariant
    assert verdict.passed, verdict.report(labels=[f"request {i}" for i in range(4)])


# -- LoRA by lora_path (upstream 2026 main: lora_id, lora_name, lora_path; the adapter is cached under lora_id) --------
@pytest.fixture(scope="session")
def lora_requests(triton_llm, lora_adapters):
    """name -> the (lora_id, lora_name, lora_path) of each of the engine's peft adapters, on the server's filesystem."""
    if triton_llm.remote:
        pytest.skip(f"{triton_llm.id}: lora_path names a directory on the server, which a remote server does not share")
    if "lora_path" not in triton_llm.client.declared_inputs("tensorrt_llm"):
        pytest.skip(f"the llmapi model of Triton {triton_llm.server.version} has no LoRA inputs (2026 main added them)")
    return {name: (2000 + i, name, str(adapter.path)) for i, (name, adapter) in enumerate(sorted(lora_adapters.items()))}


def _greedy(served, prompt: str, lora=None) -> str:
    return served.client.generate(prompt, 16, lora=lora).text


@pytest.mark.lora
@pytest.mark.triton_llm_requires("llmapi", "lora_path")
def test_an_adapter_named_by_lora_path_changes_the_output_and_its_lora_id_gives_it_again(
    triton_llm, lora_requests, prompts, equality_rule
):
    prompt = prompts.completion["fox"]
    outputs = {"base": _greedy(triton_llm, prompt)}
    for name, lora in lora_requests.items():
        outputs[name] = _greedy(triton_llm, prompt, lora)
        again = compare_texts([outputs[name]], [_greedy(triton_llm, prompt, lora)], equality_rule, triton_llm.tokenizer)
        assert again.passed, f"{name}: the cached adapter answered differently: {again.report(labels=[name])}"
    assert len(set(outputs.values())) == len(outputs), outputs


@pytest.mark.lora
@pytest.mark.triton_llm_requires("llmapi", "lora_path")
def test_adapters_and_the_base_model_in_one_batch_equal_their_solo_outputs(triton_llm, lora_requests, prompts, equality_rule):
    loras = [None, *lora_requests.values()]
    jobs = [(p, lora) for p in prompts.batch(4) for lora in loras]
    solo = [_greedy(triton_llm, p, lora) for p, lora in jobs]
    with ThreadPoolExecutor(len(jobs)) as pool:
        together = list(pool.map(lambda job: _greedy(triton_llm, *job), jobs))
    verdict = compare_texts(solo, together, equality_rule, triton_llm.tokenizer)  # float16 kernels: not batch-invariant
    names = ["the base model", *lora_requests]
    assert verdict.passed, verdict.report(
        labels=[f"prompt {i // len(names)} with {names[i % len(names)]}" for i in range(len(jobs))]
    )


@pytest.mark.lora
@pytest.mark.triton_llm_requires("llmapi", "lora_path")
def test_lora_inputs_come_together_and_lora_path_must_exist_on_the_server(triton_llm, lora_requests, prompts):
    # both texts are upstream's (helpers.get_lora_request_from_request), wrapped as model.py wraps every failure
    lora_id, name, _ = next(iter(lora_requests.values()))
    inputs = triton_llm.client.ensemble_inputs(prompts.completion["fox"], 4, lora=(lora_id, name, "/unused"))
    partial = {k: v for k, v in inputs.items() if k != "lora_path"}
    with pytest.raises(GenerationError, match="lora_id, lora_name, and lora_path must all be provided together"):
        triton_llm.client.request("tensorrt_llm", partial)
    missing = f"/nonexistent/{uuid.uuid4().hex}"
    with pytest.raises(GenerationError, match=f"lora_path does not exist on the Triton server's filesystem: {missing}"):
        triton_llm.client.generate(prompts.completion["fox"], 4, lora=(lora_id + 100, name, missing))
    assert triton_llm.client.generate(prompts.completion["fox"], 4).text
