"""Named checks for known upstream bugs, each guarding a class of bug that no other suite catches.

Every test's docstring names the upstream issue(s) whose observable symptom it would see, as `owner/repo#number:
title`. Each runs on every selected deployment it applies to (skipped with the reason elsewhere) and asserts what real
TensorRT-LLM of the served family does; where only the stand-in can satisfy a check, it says so.
"""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np
import pytest
from tritonclient.utils import np_to_triton_dtype

from pytest_triton_llm.triton.client import GenerationError, Sampling
from pytest_triton_llm.verdicts.equality import compare_texts
from pytest_triton_llm.common.files import fixtures_dir
from pytest_triton_llm.triton.llmapi_contract import SAMPLING as LLMAPI_SAMPLING
from pytest_triton_llm.triton.llmapi_contract import output_text
from pytest_triton_llm.stack.repository import entry_models
from pytest_triton_llm.common.schema import load_toml
from pytest_triton_llm.triton.server_metrics import trtllm_gauges
from pytest_triton_llm.triton.tensor_contract import NO_END, SAMPLING_INPUTS, Unbatched, config_parameters, returned_ids

pytestmark = pytest.mark.regressions

TOKENS = 12
SCHEDULED = ("nv_trt_llm_request_metrics", "scheduled")


def _triton_dtype(config_dtype: str) -> str:
    name = config_dtype.removeprefix("TYPE_")
    return "BYTES" if name == "STRING" else name


# -- 1. a seed samples the same text in any batch slot --------------------------------------------------------------------
SEEDS = (30, 31, 32, 33, 34, 35, 36, 37)  # the PR's reproduction sent seeds 30 and 31 side by side
SEED_TOKENS = 8  # 16 sampled requests: short ones, and enough to tell 8 seeds apart


@pytest.mark.triton_llm_entry_models
def test_a_seed_samples_the_same_text_alone_and_among_8_concurrent_requests(triton_llm, prompts, equality_rule):
    """NVIDIA/TensorRT-LLM#1742: Reference input randomSeeds by idx rather than batchSlot;
    triton-inference-server/tensorrtllm_backend#468: `random_seed` seems to be ignored (or at least inconsistent) for
    inflight_batcher_llm."""
    client, prompt = triton_llm.client, prompts.completion["village"]

    def sample(seed: int) -> str:
        return client.generate(prompt, SEED_TOKENS, sampling=Sampling(top_k=50, temperature=1.0, random_seed=seed)).text

    alone = [sample(seed) for seed in SEEDS]  # each alone: always the first batch slot
    assert len(set(alone)) == len(SEEDS), "seeds that sample the same text could not show a mix-up of seeds"
    with client.watch_trtllm_gauges() as watch, ThreadPoolExecutor(len(SEEDS)) as pool:
        together = list(pool.map(sample, SEEDS))  # in whatever slots the scheduler gives them
    # under the engine's rule: exact on float32; another batch composition may round a near-tie otherwise
    verdict = compare_texts(alone, together, equality_rule, triton_llm.tokenizer)
    assert verdict.passed, verdict.report(decode=triton_llm.tokenizer.decode, labels=[f"seed {s}" for s in SEEDS])
    # they really shared iterations: TensorRT-LLM's gauge (the C++ backend's; the llmapi model publishes no metrics)
    if triton_llm.ref.serving_layout.trtllm_metrics:
        assert (watch.most(*SCHEDULED) or 0) > 1, f"no iteration scheduled more than one request ({watch.samples} samples)"


# -- 2. penalties change a repetitive answer ------------------------------------------------------------------------------
PENALTIES = {"repetition_penalty": 2.0, "presence_penalty": 2.0, "frequency_penalty": 2.0}  # TL#9442's values


@pytest.fixture(scope="session")
def repetitive(triton_llm) -> tuple[str, str]:
    """(a prompt whose greedy answer repeats a few words, fixtures/prompts.toml [repetition]; that greedy answer)."""
    prompt = load_toml(fixtures_dir() / "prompts.toml")["repetition"]["counting"]
    return prompt, triton_llm.client.generate(prompt, TOKENS).text


def _penalty_changes_the_answer(served, repetitive: tuple[str, str], penalty: str) -> None:
    client, (prompt, greedy) = served.client, repetitive
    name = LLMAPI_SAMPLING[penalty][0] if client.speaks_llmapi else SAMPLING_INPUTS[penalty][0]
    if name not in client.declared_inputs(client.ensemble):
        pytest.skip(f"{client.ensemble} of {served.id} declares no input {name} (its template family has none)")
    ids = served.tokenizer.encode(greedy, add_special_tokens=False)
    assert len(set(ids)) <= len(ids) // 2, f"the greedy answer does not repeat itself: {greedy!r}"
    penalized = client.generate(prompt, TOKENS, sampling=Sampling(**{penalty: PENALTIES[penalty]})).text
    assert penalized != greedy, f"{penalty} {PENALTIES[penalty]} left the repetitive greedy answer as it was"


@pytest.mark.triton_llm_entry_models
@pytest.mark.triton_llm_requires("inflight_batcher_llm", "penalties")
@pytest.mark.parametrize("penalty", sorted(PENALTIES))
def test_a_penalty_changes_a_repetitive_greedy_answer(triton_llm, repetitive, penalty):
    """NVIDIA/TensorRT-LLM#9442: [Bug]: Repetition, Frequency, and Presence Penalty Not Applied in TensorRT-LLM
    Completions API (here through the ensemble and the BLS, which must pass each penalty on)."""
    _penalty_changes_the_answer(triton_llm, repetitive, penalty)


@pytest.mark.triton_llm_requires("llmapi")
@pytest.mark.parametrize("penalty", sorted(PENALTIES))
def test_a_penalty_changes_a_repetitive_greedy_llmapi_answer(triton_llm, repetitive, penalty):
    """NVIDIA/TensorRT-LLM#9442: [Bug]: Repetition, Frequency, and Presence Penalty Not Applied in TensorRT-LLM
    Completions API (the PyTorch path's TorchSampler took the penalties and ignored them)."""
    _penalty_changes_the_answer(triton_llm, repetitive, penalty)


# -- 3. temperature 0 is greedy -------------------------------------------------------------------------------------------
@pytest.mark.triton_llm_entry_models
def test_temperature_0_samples_the_greedy_answer(triton_llm, prompts, equality_rule):
    """NVIDIA/TensorRT-LLM#8103: [TRTLLM-8269][fix] Revert "do not explicitly pass temperature=0 to select greedy
    sampling"; NVIDIA/TensorRT-LLM#2640: greedy search results vary with each inference.

    The PyTorch path (llmapi) selects greedy decoding for temperature 0. The engine's sampling layers divide the
    logits by temperature + 1e-6 (penaltyKernels.cu), so at temperature 0 every token but the argmax has a probability
    below e^-(1e6 * its logit gap): top-k sampling picks the greedy token, bar exact ties, which the rule allows."""
    client = triton_llm.client
    batch = [prompts.completion[name] for name in ("fox", "colors")]
    greedy = [client.generate(p, TOKENS).text for p in batch]
    sampled = [client.generate(p, TOKENS, sampling=Sampling(top_k=50, temperature=1.0, random_seed=5)).text for p in batch]
    assert sampled != greedy, "top_k 50 at temperature 1 sampled the greedy answers: sampling is not on at all"
    cold = [client.generate(p, TOKENS, sampling=Sampling(top_k=50, temperature=0.0, random_seed=5)).text for p in batch]
    verdict = compare_texts(greedy, cold, equality_rule, triton_llm.tokenizer)
    assert verdict.passed, verdict.report(decode=triton_llm.tokenizer.decode, labels=batch)


# -- 4. the BLS samples as the ensemble does ------------------------------------------------------------------------------
BASE_SAMPLING = Sampling(top_k=40, temperature=0.8, random_seed=7)
VARIANTS = {  # each changes one parameter, so a BLS that dropped it would answer as the base does
    "top_k": Sampling(top_k=2, temperature=0.8, random_seed=7),
    "temperature": Sampling(top_k=40, temperature=1.6, random_seed=7),
    "random_seed": Sampling(top_k=40, temperature=0.8, random_seed=8),
}


@pytest.mark.triton_llm_requires("inflight_batcher_llm")
def test_the_bls_samples_the_same_text_as_the_ensemble(triton_llm, prompts):
    """triton-inference-server/tensorrtllm_backend#472: tensorrt_llm_bls disregards top_k / temperature setting;
    triton-inference-server/tensorrtllm_backend#520: Ensemble and tensorrt_llm_bls have different results when using
    accumulate_tokens; triton-inference-server/tensorrtllm_backend#523: fix inference quality caused by temperature
    parameter in bls."""
    if "tensorrt_llm_bls" not in entry_models(triton_llm.ref):
        pytest.skip(f"{triton_llm.id} does not serve tensorrt_llm_bls (its repository's `models`)")
    prompt = prompts.completion["machine_learning"]
    bls = triton_llm.at_entry("tensorrt_llm_bls")

    def both(sampling: Sampling) -> tuple[str, str]:
        # exact on every engine: each request runs alone, as the other did (same batch, same kernels)
        return tuple(c.generate(prompt, TOKENS, sampling=sampling).text for c in (triton_llm.client, bls.client))

    try:
        base, base_bls = both(BASE_SAMPLING)
        assert base_bls == base, f"the BLS and the ensemble answer otherwise under {BASE_SAMPLING}"
        for name, sampling in VARIANTS.items():
            via_ensemble, via_bls = both(sampling)
            assert via_bls == via_ensemble, f"the BLS and the ensemble answer otherwise under {sampling}"
            # the parameter matters here, so a BLS that dropped it could not have agreed
            assert via_ensemble != base, f"changing {name} alone did not change the sampled text"
    finally:
        bls.client.close()


# -- 5. LoRA through the entry models, and after eviction -----------------------------------------------------------------
LORA_TOKENS = 12


@pytest.mark.triton_llm_entry_models
@pytest.mark.triton_llm_requires("lora", "text_lora", "inflight_batcher_llm")
def test_lora_through_the_entry_model_answers_as_through_tensorrt_llm(triton_llm, lora_adapters, prompts):
    """triton-inference-server/tensorrtllm_backend#406: lora_task_id, lora_weights, lora_config not found in
    all_models/inflight_batcher_llm/tensorrt_llm_bls/1/lib/decode.py (the BLS dropped them: the base model answered)."""
    client, prompt = triton_llm.client, prompts.completion["fox"]
    ids = triton_llm.encode(prompt)
    base = client.generate(prompt, LORA_TOKENS, end_id=NO_END).text
    for i, name in enumerate(sorted(lora_adapters)):
        adapter = lora_adapters[name]
        weights = {"lora_weights": adapter.lora_weights, "lora_config": adapter.lora_config}
        core = client.generate_ids(ids, LORA_TOKENS, end_id=NO_END, lora_task_id=6100 + i, **weights).token_ids
        expected = triton_llm.tokenizer.decode(core, skip_special_tokens=True)
        assert expected != base, f"{name} does not change the answer"
        tensors = {
            "lora_weights": (np.asarray(adapter.lora_weights, dtype=np.float16), "FP16"),
            "lora_config": (np.asarray(adapter.lora_config, dtype=np.int32), "INT32"),
        }
        # exact on every engine: each request runs alone. First registered through the entry model (a fresh task id,
        # so an entry model that dropped the weights gets an unknown task), then by the task id alone.
        for sent in (tensors, {}):
            inputs = {**client.ensemble_inputs(prompt, LORA_TOKENS, end_id=NO_END), "lora_task_id": (6000 + i, "UINT64"), **sent}
            how = "its weights" if sent else "its task id alone"
            assert output_text(client.request(client.ensemble, inputs), "text_output") == expected, f"{name} by {how}"
        _lora_streamed_and_beside_the_base(triton_llm, prompt, 6000 + i, (name, expected), base)


def _lora_streamed_and_beside_the_base(triton_llm, prompt: str, task_id: int, adapter: tuple[str, str], base: str) -> None:
    """The registered adapter by its task id: streamed (where the deployment streams), its pieces add up to its unary
    answer; sent at once with a request of the base model, each answers as alone (NVIDIA/TensorRT-LLM#2096: the
    adapter leaked into the base model's rows of a mixed batch)."""
    client, (name, expected) = triton_llm.client, adapter
    task = {"lora_task_id": (task_id, "UINT64")}
    inputs = {**client.ensemble_inputs(prompt, LORA_TOKENS, end_id=NO_END), **task}
    if "streaming" in triton_llm.ref.capabilities:
        streamed = {**client.ensemble_inputs(prompt, LORA_TOKENS, end_id=NO_END, stream=True), **task}
        assert client.stream_inputs(client.ensemble, streamed).text == expected, f"{name}, streamed"
    with ThreadPoolExecutor(2) as pool:
        adapted = pool.submit(client.request, client.ensemble, inputs)
        plain = pool.submit(client.generate, prompt, LORA_TOKENS, end_id=NO_END)
        together = (output_text(adapted.result(), "text_output"), plain.result().text)
    assert together == (expected, base), f"{name} beside the base model: {together}, alone {(expected, base)}"


@pytest.mark.triton_llm_load  # overflows the LoRA cache: every adapter cached before is evicted
@pytest.mark.triton_llm_requires("lora", "inflight_batcher_llm")
def test_an_evicted_lora_task_is_an_error_until_registered_again(triton_llm, lora_adapters, prompts):
    """NVIDIA/TensorRT-LLM#1552: Cannot process new request: [TensorRT-LLM][ERROR] Assertion failed: LoRA task 0 not
    found in cache. Please send LoRA weights with request; NVIDIA/TensorRT-LLM#2096: Random generation when inferring
    llama 2 with and without LoRA in the same batch."""
    client = triton_llm.client
    capacity = config_parameters(client.model_config("tensorrt_llm")).get("lora_cache_host_memory_bytes")
    if capacity is None:
        pytest.skip(
            f"{triton_llm.id} sets no lora_cache_host_memory_bytes (engines.lock [engines.<name>.lora] "
            "cache_host_memory_bytes): TensorRT-LLM's default 1 GB host cache needs hundreds of adapters to "
            "overflow"
        )
    ids = triton_llm.encode(prompts.completion["fox"])
    recipes = [lora_adapters[name] for name in sorted(lora_adapters)]

    def generate(task_id: int, adapter=None) -> list[int]:
        weights = {} if adapter is None else {"lora_weights": adapter.lora_weights, "lora_config": adapter.lora_config}
        return client.generate_ids(ids, LORA_TOKENS, end_id=NO_END, lora_task_id=task_id, **weights).token_ids

    # register the fixture's adapters in turn under fresh task ids until they hold more bytes than the cache: it keeps
    # at least each adapter's non-zero values (rows are zero-padded) in the engine's dtype, so the first must be gone
    itemsize = 4 if triton_llm.ref.engine.dtype == "float32" else 2
    registered: dict[int, tuple[object, list[int]]] = {}
    held = 0
    while held <= int(capacity):
        adapter = recipes[len(registered) % len(recipes)]
        task_id = 5000 + len(registered)
        registered[task_id] = (adapter, generate(task_id, adapter))
        held += np.count_nonzero(adapter.lora_weights) * itemsize
    first, last = min(registered), max(registered)
    outputs = {task_id: out for task_id, (_, out) in registered.items()}
    assert len({tuple(out) for out in outputs.values()}) == len(recipes), "each adapter must answer its own way"
    assert generate(last) == outputs[last], "the adapter registered last must still answer by its task id alone"
    with pytest.raises(GenerationError, match=f"LoRA task {first} not found in cache. Please send LoRA weights with request"):
        generate(first)
    assert generate(first, registered[first][0]) == outputs[first], "registered again, it must answer as it did first"
    assert generate(first) == outputs[first]


# -- 6. a request of the required inputs only ---------------------------------------------------------------------------
REQUIRED = {  # the inputs of a minimal request per model; every input its config requires must be among them
    "tensorrt_llm": {"input_ids", "input_lengths", "request_output_len"},  # input_ids is optional from v0.15.0 on
    "ensemble": {"text_input", "max_tokens"},
    "tensorrt_llm_bls": {"text_input", "max_tokens"},
}
LLMAPI_MAX_TOKENS = 32  # the LLM API's SamplingParams.max_tokens default


def _required(client, model: str) -> set[str]:
    return {t["name"] for t in client.model_config(model)["input"] if not t.get("optional", False)}


@pytest.mark.triton_llm_requires("inflight_batcher_llm")
@pytest.mark.parametrize("model", sorted(REQUIRED))
def test_a_request_of_only_the_required_inputs_is_answered(triton_llm, prompts, model):
    """triton-inference-server/tensorrtllm_backend#855: [TRI-978][fix] Bump tensorrt_llm submodule to fix
    streaming=None executor crash; triton-inference-server/tensorrtllm_backend#856: [TRI-978][fix] Bump tensorrt_llm
    submodule to fix streaming/metrics CI failures (main)."""
    if model not in ("tensorrt_llm", *entry_models(triton_llm.ref)):
        pytest.skip(f"{triton_llm.id} does not serve {model} (its repository's `models`)")
    client, prompt = triton_llm.client, prompts.completion["columbus"]
    assert _required(client, model) <= REQUIRED[model], f"{model} requires inputs a minimal request lacks"
    ids = triton_llm.encode(prompt)
    if model == "tensorrt_llm":  # no end_id: TensorRT-LLM's executor then has none (-1) and runs to the length asked
        minimal = {
            "input_ids": (np.asarray([ids], dtype=np.int32), "INT32"),
            "input_lengths": (len(ids), "INT32"),
            "request_output_len": (TOKENS, "INT32"),
        }
        full = client.generate_ids(ids, TOKENS, end_id=NO_END)
        assert returned_ids(client.request(model, minimal)) == full.token_ids
    else:  # no end_id: preprocessing takes the tokenizer's end token
        answer = client.request(model, {"text_input": (prompt.encode(), "BYTES"), "max_tokens": (TOKENS, "INT32")})
        full = triton_llm.at_entry(model).client.generate(prompt, TOKENS, end_id=triton_llm.end_id).text
        assert output_text(answer, "text_output") == full


@pytest.mark.triton_llm_requires("llmapi")
def test_an_llmapi_request_of_only_the_required_inputs_is_answered(triton_llm, prompts):
    """triton-inference-server/tensorrtllm_backend#855: [TRI-978][fix] Bump tensorrt_llm submodule to fix
    streaming=None executor crash (a request without the optional `streaming` input)."""
    client, prompt = triton_llm.client, prompts.completion["columbus"]
    assert _required(client, client.ensemble) == {"text_input"}
    text = prompt.encode()
    value = text if client.model_config(client.ensemble).get("max_batch_size", 0) > 0 else Unbatched.of(text, "BYTES")
    answer = client.request(client.ensemble, {"text_input": (value, "BYTES")})
    full = client.generate(prompt, LLMAPI_MAX_TOKENS, exclude_input_in_output=False).text  # upstream's defaults
    assert output_text(answer, "text_output") == full


# -- 7. output dtypes are the declared ones -------------------------------------------------------------------------------
def _declared_outputs(client, model: str) -> dict[str, str]:
    return {t["name"]: _triton_dtype(t["data_type"]) for t in client.model_config(model)["output"]}


def _response_dtypes(outputs: dict) -> dict[str, str]:
    return {name: np_to_triton_dtype(np.asarray(value).dtype) for name, value in outputs.items()}


@pytest.mark.triton_llm_requires("inflight_batcher_llm", "return_log_probs")
@pytest.mark.parametrize("model", sorted(REQUIRED))
def test_every_output_has_the_datatype_its_config_declares(triton_llm, prompts, model):
    """triton-inference-server/tensorrtllm_backend#598: generation logits dtype bug (the engine's float16 logits sent
    as the float32 the config declares: a client reading the declared type read garbage)."""
    if model not in ("tensorrt_llm", *entry_models(triton_llm.ref)):
        pytest.skip(f"{triton_llm.id} does not serve {model} (its repository's `models`)")
    prompt = prompts.completion["fox"]
    if model == "tensorrt_llm":
        outputs = triton_llm.client.generate_ids(triton_llm.encode(prompt), 8, return_log_probs=True).raw
    else:
        outputs = triton_llm.at_entry(model).client.generate(prompt, 8, return_log_probs=True).raw
    declared = _declared_outputs(triton_llm.client, model)
    assert {"cum_log_probs", "output_log_probs"} <= set(outputs), sorted(outputs)
    assert set(outputs) <= set(declared), f"outputs {sorted(set(outputs) - set(declared))} are not declared"
    sent = _response_dtypes(outputs)
    wrong = {name: f"{dtype}, declared {declared[name]}" for name, dtype in sent.items() if dtype != declared[name]}
    assert not wrong, wrong


NUMERIC_TYPES = {"INT32": int, "INT64": int, "FP32": float}


@pytest.mark.triton_llm_requires("llmapi")
def test_every_llmapi_output_holds_a_value_of_its_declared_type(triton_llm, prompts):
    """triton-inference-server/tensorrtllm_backend#598: generation logits dtype bug.

    Upstream's llmapi model.py sends every output as a string tensor (text_output's dtype), whatever config.pbtxt
    declares: text outputs must be BYTES as declared, and each numeric one a string of a number of its declared type."""
    client = triton_llm.client
    outputs = client.generate(
        prompts.completion["fox"], 8, return_log_probs=True, return_finish_reason=True, return_stop_reason=True
    ).raw
    declared = _declared_outputs(client, client.ensemble)
    assert set(outputs) <= set(declared), f"outputs {sorted(set(outputs) - set(declared))} are not declared"
    assert {"text_output", "cumulative_logprob", "finish_reason", "stop_reason"} == set(outputs), sorted(outputs)
    assert set(_response_dtypes(outputs).values()) == {"BYTES"}
    for name in outputs:
        if declared[name] in NUMERIC_TYPES:
            value = NUMERIC_TYPES[declared[name]](output_text(outputs, name))  # a ValueError names the text that is no number
            assert np.isfinite(value), (name, value)
        else:
            assert declared[name] == "BYTES", (name, declared[name])


# -- 8. TensorRT-LLM's metric families on :metrics ------------------------------------------------------------------------
# (first Triton version, family, its categories from then on), read from tensorrtllm_backend's
# inflight_batcher_llm/src/custom_metrics_reporter/custom_metrics_reporter.cc at v0.7.0 (Triton 2.41), v0.8.0 (2.43),
# v0.9.0 (2.45), v0.13.0 (2.50), v0.15.0 (2.52) and v0.18.0 (2.56; unchanged in TensorRT-LLM's triton_backend since)
METRIC_FAMILIES = (
    ((2, 41), "nv_trt_llm_request_metrics", ("active", "max", "scheduled", "context")),
    ((2, 41), "nv_trt_llm_runtime_memory_metrics", ("cpu", "gpu", "pinned")),
    ((2, 41), "nv_trt_llm_kv_cache_block_metrics", ("max", "free", "used", "tokens_per")),
    ((2, 41), "nv_trt_llm_v1_metrics", ("total_context_tokens", "total_generation_tokens", "empty_generation_slots")),
    ((2, 41), "nv_trt_llm_inflight_batcher_metrics", ("total_context_tokens", "generation_requests", "micro_batch_id")),
    ((2, 41), "nv_trt_llm_general_metrics", ("timestamp", "iteration_counter")),
    (
        (2, 43),
        "nv_trt_llm_inflight_batcher_metrics",
        ("total_context_tokens", "generation_requests", "micro_batch_id", "terminated_requests"),
    ),
    (
        (2, 45),
        "nv_trt_llm_inflight_batcher_metrics",
        ("total_context_tokens", "generation_requests", "micro_batch_id", "paused_requests"),
    ),
    ((2, 50), "nv_trt_llm_kv_cache_block_metrics", ("max", "free", "used", "tokens_per", "reused")),
    ((2, 52), "nv_trt_llm_disaggregated_serving_metrics", ("kv_cache_transfer_ms", "request_count")),
    ((2, 56), "nv_trt_llm_request_metrics", ("active", "max", "scheduled", "context", "waiting")),
    ((2, 56), "nv_trt_llm_kv_cache_block_metrics", ("max", "free", "used", "tokens_per", "reused", "fraction")),
)
BATCHING_FAMILY = {"v1": "nv_trt_llm_v1_metrics", "inflight": "nv_trt_llm_inflight_batcher_metrics"}


def expected_metric_families(triton_version: str, batching: str) -> dict[str, set[str]]:
    """Family -> categories the tensorrt_llm model of `triton_version` publishes, for a V1 or in-flight model."""
    served = tuple(int(part) for part in triton_version.split(".")[:2])
    other = BATCHING_FAMILY["inflight" if batching == "v1" else "v1"]
    return {family: set(categories) for first, family, categories in METRIC_FAMILIES if first <= served and family != other}


def test_tensorrt_llm_publishes_the_metric_families_of_its_version(triton_llm, prompts):
    """triton-inference-server/tensorrtllm_backend#479: missing nv_trt_llm_request_metrics from python backend."""
    if not triton_llm.ref.serving_layout.trtllm_metrics:
        pytest.skip(
            "the llmapi model publishes no nv_trt_llm_* metrics (upstream's python model has no metrics "
            "reporter; test_llmapi.py reads its per-request perf outputs instead)"
        )
    assert triton_llm.client.generate(prompts.completion["fox"], 4).text
    published: dict[str, set[str]] = {}
    for family, category in trtllm_gauges(triton_llm.client.metrics(), "tensorrt_llm"):
        published.setdefault(family, set()).add(category)
    assert published == expected_metric_families(triton_llm.server.version, triton_llm.ref.options.batching)


# -- 9. a short soak: resident memory stays flat --------------------------------------------------------------------------
SOAK_WARMUP, SOAK_ROUNDS, SOAK_ROUND = 16, 3, 16  # requests (2 tokens each): warm-up, then rounds of this many
SOAK_BOUND_KIB = 24 * 1024  # over the 48 measured requests: a leak of more than 512 KiB a request fails
STOP_WORDS = ["Goodbye", "THE END", "Sincerely", "\n\n\n"]


def _tree_rss_kib(root: int) -> int:
    """VmRSS of `root` and every process below it (the python backend's stubs are tritonserver's children)."""
    parents, rss = {}, {}
    for status in Path("/proc").glob("[0-9]*/status"):
        try:
            fields = dict(line.split(":", 1) for line in status.read_text().splitlines() if ":" in line)
        except OSError:  # a process that ended while we read
            continue
        pid = int(status.parent.name)
        parents[pid] = int(fields["PPid"])
        rss[pid] = int(fields.get("VmRSS", "0 kB").split()[0])  # kernel threads have none
    tree, frontier = {root}, [root]
    while frontier:
        children = [pid for pid, parent in parents.items() if parent in frontier and pid not in tree]
        tree.update(children)
        frontier = children
    return sum(rss.get(pid, 0) for pid in tree)


def test_resident_memory_stays_flat_over_a_soak_of_requests_with_stop_words(triton_llm, prompts, triton_llm_report):
    """NVIDIA/TensorRT-LLM#5509: [TRT Executor] Setting stop_words in requests leads to memory leak;
    triton-inference-server/server#8457: TritonServer inference service shows steadily increasing RSS memory over
    requests without reclamation.

    One fixed prompt with stop words, at concurrency 4: after a warm-up (the first requests page the weights in and
    grow the allocators), the resident memory of tritonserver and its python stubs may grow by at most 24 MiB over 48
    requests. Measured on the embedded stand-in (2 CPU cores, runs of 48 and 96 requests): V1 +0.2 to +0.5 MiB, llmapi
    +0.2 to +5.9 MiB, in-flight +0.2 to +8.9 MiB (a one-time step of about 7 MiB in some runs, flat rounds otherwise);
    tritonserver itself adds 15-25 KiB a request. Each round's figures go to the report (`soak_rss_kib`)."""
    pid = getattr(triton_llm.server.process, "pid", None)
    if pid is None:
        pytest.skip(
            f"{triton_llm.id}'s server is not a process this session started here (a remote server or a "
            "container): its resident memory cannot be read"
        )
    client, prompt = triton_llm.client, prompts.completion["fox"]

    def soak(requests: int) -> None:
        answers = client.generate_many([prompt] * requests, 2, concurrency=4, stop_words=STOP_WORDS)
        assert all(a.text for a in answers)

    soak(SOAK_WARMUP)
    samples = [_tree_rss_kib(pid)]
    for _ in range(SOAK_ROUNDS):
        soak(SOAK_ROUND)
        samples.append(_tree_rss_kib(pid))
    growth = samples[-1] - samples[0]
    triton_llm_report.record(triton_llm.id, "soak_rss_kib", {"samples": samples, "growth": growth, "bound": SOAK_BOUND_KIB})
    assert growth <= SOAK_BOUND_KIB, (
        f"resident memory grew by {growth} KiB over {SOAK_ROUNDS * SOAK_ROUND} requests "
        f"(bound {SOAK_BOUND_KIB} KiB); samples after each round: {samples}"
    )
