"""LoRA through the tensorrt_llm model, as TensorRT-LLM serves it: adapters registered by task id,
mixed with each other and with the base model in the same batch, on both batching modes.

Adapters come from fixtures/lora_adapters.toml (peft, seeded, lora_B non-zero), converted to
lora_weights / lora_config in hf_lora_convert's layout. Requests go to tensorrt_llm directly,
like upstream's client: the ensemble of this version takes no LoRA inputs.
"""

from __future__ import annotations

import itertools
from concurrent.futures import ThreadPoolExecutor

import pytest

from pytest_triton_llm.properties.kv_blocks import ANSWER_TOKENS, FULL_BLOCKS, NAMES, fresh_prompt
from pytest_triton_llm.stack.kv_reuse import kv_cache_reuse, tokens_per_block
from pytest_triton_llm.triton.client import GenerationError
from pytest_triton_llm.verdicts.equality import compare
from pytest_triton_llm.triton.tensor_contract import NO_END, returned_ids

pytestmark = [pytest.mark.lora, pytest.mark.triton_llm_requires("lora", "inflight_batcher_llm")]

TOKENS = 16


@pytest.fixture(scope="session")
def adapters(lora_adapters):
    """name -> (task id, adapter), task ids stable within the session."""
    return {name: (1000 + i, adapter) for i, (name, adapter) in enumerate(sorted(lora_adapters.items()))}


def generate(triton_llm, ids, lora=None, send_weights=True):
    """Greedy tokens for `ids`, with the adapter `lora` = (task id, adapter) or without any."""
    options = {}
    if lora is not None:
        options["lora_task_id"] = lora[0]
        if send_weights:
            options.update(lora_weights=lora[1].lora_weights, lora_config=lora[1].lora_config)
    return triton_llm.client.generate_ids(ids, TOKENS, end_id=NO_END, **options).token_ids


@pytest.fixture(scope="session")
def registered(triton_llm, adapters, prompts):
    """Every adapter sent once with its weights, so the server holds it under its task id."""
    ids = triton_llm.encode(prompts.completion["fox"])
    return {name: generate(triton_llm, ids, lora) for name, lora in adapters.items()}


def test_adapters_change_the_output(triton_llm, adapters, registered, prompts):
    batch = [triton_llm.encode(p) for p in prompts.batch(3)]
    outputs = {None: tuple(tuple(generate(triton_llm, ids)) for ids in batch)}
    for name, lora in adapters.items():
        outputs[name] = tuple(tuple(generate(triton_llm, ids, lora, send_weights=False)) for ids in batch)
    for (a, out_a), (b, out_b) in itertools.combinations(outputs.items(), 2):
        assert out_a != out_b, f"{a or 'base'} and {b or 'base'} gave the same outputs"


def test_task_id_alone_equals_sending_the_weights(triton_llm, adapters, registered, prompts):
    # exact on every engine: each request runs alone, as the registering one did (same batch, same kernels, same
    # adapter), so any difference is the adapter the server found for the task id, not rounding
    ids = triton_llm.encode(prompts.completion["fox"])
    for name, lora in adapters.items():
        assert generate(triton_llm, ids, lora, send_weights=False) == registered[name], name
        assert generate(triton_llm, ids, lora, send_weights=True) == registered[name], name


def test_24_concurrent_mixed_requests_equal_their_solo_outputs(triton_llm, adapters, registered, prompts, equality_rule):
    loras = [None, *adapters.values()]
    jobs = [(triton_llm.encode(p), lora) for p in prompts.batch(6) for lora in loras]
    assert len(jobs) == 24
    solo = [generate(triton_llm, ids, lora, send_weights=False) for ids, lora in jobs]
    with triton_llm.client.watch_trtllm_gauges() as watch, ThreadPoolExecutor(len(jobs)) as pool:
        together = list(pool.map(lambda job: generate(triton_llm, job[0], job[1], send_weights=False), jobs))
    verdict = compare(solo, together, equality_rule)  # exact on float32; float16 kernels are not batch-invariant
    names = ["the base model", *adapters]  # as in `loras`
    labels = [f"prompt {i // len(names)} with {names[i % len(names)]}" for i in range(len(jobs))]
    assert verdict.passed, verdict.report(labels=labels)
    # adapters and the base model really shared iterations (TensorRT-LLM's scheduled-requests gauge)
    assert (watch.most("nv_trt_llm_request_metrics", "scheduled") or 0) > 1, f"{watch.samples} samples"


@pytest.mark.triton_llm_requires("perf_metrics")
def test_kv_cache_blocks_are_keyed_by_the_adapter(triton_llm, adapters, registered, equality_rule):
    """Where KV-cache blocks are reused, a block holds one adapter's keys and values (TensorRT-LLM keys it by the LoRA
    task; vllm-project/vllm#30931: adapters that shared blocks were served each other's). A fresh prompt of 2 blocks and
    a token, sent with one adapter, then another, then the base model, finds none of its blocks each time; sent with the
    first adapter again it finds its 2 whole ones and answers as the first time."""
    reuse, reuse_from = kv_cache_reuse(triton_llm)
    if not reuse:
        pytest.skip(f"KV-cache block reuse is off here ({reuse_from})")
    size, size_from = tokens_per_block(triton_llm)
    if size is None:
        pytest.skip(size_from)
    ids = triton_llm.encode(fresh_prompt(triton_llm.tokenizer, FULL_BLOCKS * size + 1))
    first, second = sorted(adapters.items())[:2]
    sent = []
    for name, lora, reused in (
        (first[0], first[1], 0),
        (second[0], second[1], 0),
        ("base", None, 0),
        (first[0], first[1], FULL_BLOCKS),
    ):
        options = {"lora_task_id": lora[0]} if lora else {}
        inputs = triton_llm.client.core_inputs(ids, ANSWER_TOKENS, end_id=NO_END, **options)
        inputs["return_perf_metrics"] = (True, "BOOL")
        outputs = triton_llm.client.request(triton_llm.client.core_model, inputs)
        got = tuple(int(outputs[n].reshape(-1)[0]) if n in outputs else None for n in NAMES)
        assert got[1] == reused, (
            f"a fresh prompt of {FULL_BLOCKS * size + 1} tokens (blocks of {size}) sent with {[n for n, *_ in sent] + [name]}: "
            f"with {name} it must reuse {reused} block(s), got (new, reused, total) = {got} ({reuse_from})"
        )
        sent.append((name, outputs))
    answers = [list(returned_ids(sent[0][1])), list(returned_ids(sent[3][1]))]
    verdict = compare(answers[:1], answers[1:], equality_rule)
    assert verdict.passed, verdict.report(labels=[f"{first[0]} again, from its reused blocks"])


def test_unknown_task_id_is_an_error_and_the_server_keeps_serving(triton_llm, registered, prompts):
    ids = triton_llm.encode(prompts.completion["village"])
    with pytest.raises(GenerationError, match="LoRA task 424242 not found in cache. Please send LoRA weights with request"):
        triton_llm.client.generate_ids(ids, TOKENS, lora_task_id=424242)
    assert triton_llm.server.ready()
    assert len(generate(triton_llm, ids)) == TOKENS


@pytest.mark.triton_llm_stand_in_only("the wording of TensorRT-LLM's error for such an adapter is not pinned here")
def test_an_adapter_for_a_module_the_engine_has_no_lora_for_is_refused(triton_llm, adapters, prompts):
    _, adapter = next(iter(adapters.values()))
    config = adapter.lora_config.copy()
    config[0, :, 0] = 4  # attn_dense: not among the engine's lora_target_modules
    ids = triton_llm.encode(prompts.completion["village"])
    with pytest.raises(GenerationError, match="not among the engine's lora_target_modules"):
        triton_llm.client.generate_ids(ids, TOKENS, lora_task_id=7, lora_weights=adapter.lora_weights, lora_config=config)
    assert len(generate(triton_llm, ids)) == TOKENS
