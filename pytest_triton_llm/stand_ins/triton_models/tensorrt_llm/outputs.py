"""The tensorrt_llm model's responses, as TensorRT-LLM's backend sends them: one per request (or per streamed step),
optional outputs only when the request asked for them (served_contract.output_tensors); `fault` (generation.py's)
names the known upstream bug of its outputs it reproduces, if any (output_faults.py)."""

from __future__ import annotations

import math

import numpy as np
from generation import Sequence, no_fault
from output_faults import distort_length, distort_log_probs
from served_contract import PERF_METRICS, output_tensors


def complete_outputs(
    seq: Sequence, exclude_input: bool, batch_index: int | None = None, fault=no_fault, sequence_index: int = 0
) -> dict[str, np.ndarray]:
    """Everything the sequence generated, after its prompt unless `exclude_input`."""
    ids = seq.tokens if exclude_input else seq.request.input_ids + seq.tokens
    log_probs = seq.log_probs if seq.request.return_log_probs else None
    outputs = output_tensors(ids, log_probs, seq.cum_log_prob, batch_index, sequence_index) | perf_metrics(seq, fault)
    outputs |= gathered_logits(seq, len(seq.generation_logits), first=True, fault=fault) | token_counts(seq, len(ids))
    return distort_length(fault, distort_log_probs(fault, outputs), seq, exclude_input)


def streamed_outputs(
    seq: Sequence,
    tokens: list[int],
    log_probs: list[float],
    batch_index: int | None = None,
    fault=no_fault,
    sequence_index: int = 0,
) -> dict[str, np.ndarray]:
    """A streaming step: only the new tokens (never the prompt), as TensorRT-LLM streams them."""
    log_probs_or_none = log_probs if seq.request.return_log_probs else None
    outputs = output_tensors(tokens, log_probs_or_none, seq.cum_log_prob, batch_index, sequence_index)
    # the stand-in's choice: each response the rows of its own steps, the context logits with the first (what
    # TensorRT-LLM's executor streams was not read; NVIDIA/TensorRT-LLM#2090 describes a full-length buffer)
    new_rows = len(seq.generation_logits) - (len(seq.tokens) - len(tokens))
    outputs |= gathered_logits(seq, new_rows, first=len(seq.tokens) == len(tokens), fault=fault)
    return distort_log_probs(fault, outputs | perf_metrics(seq, fault) | token_counts(seq, len(tokens)))


def token_counts(seq: Sequence, returned: int) -> dict[str, np.ndarray]:
    """With return_num_input_tokens and return_num_output_tokens (TensorRT-LLM 1.1's backend,
    model_instance_state.cc fillTritonResponse): the request's input ids, and the ids this response returns (a
    streamed step's new tokens; unary, all of them, the prompt's too where it is not excluded), each [1, 1] int32."""
    r, outputs = seq.request, {}
    if r.return_num_input_tokens:
        outputs["num_input_tokens"] = np.array([[len(r.input_ids)]], dtype=np.int32)
    if r.return_num_output_tokens:
        outputs["num_output_tokens"] = np.array([[returned]], dtype=np.int32)
    return outputs


def gathered_logits(seq: Sequence, rows: int, first: bool, fault=no_fault) -> dict[str, np.ndarray]:
    """context_logits [1, prompt tokens, vocab] (with the `first` response) and the last `rows` rows of
    generation_logits [1, 1, rows, vocab], where the request asked for them, as the backend sends the executor's."""
    r, outputs = seq.request, {}
    if r.return_context_logits and first and seq.context_logits is not None:
        outputs["context_logits"] = seq.context_logits.numpy().astype(np.float32)[np.newaxis]
    if r.return_generation_logits:
        kept = seq.generation_logits[len(seq.generation_logits) - rows :] if rows > 0 else []
        if seq.finish_reason == "end_id" and fault("generation_logits_step_dropped_at_the_end_token"):
            kept = kept[1:] + kept[-1:]  # one step missing, every later row one early (NVIDIA/TensorRT-LLM#1569)
        vocab = seq.context_logits.shape[-1] if seq.context_logits is not None else (kept[0].numel() if kept else 0)
        stacked = np.stack([row.numpy() for row in kept]) if kept else np.zeros((0, vocab))
        outputs["generation_logits"] = stacked.astype(np.float32)[np.newaxis, np.newaxis]
    return outputs


TOKENS_PER_BLOCK = 64  # trtllm-build's default


def accepted_draft_tokens(seq: Sequence) -> int:
    """The draft's tokens the target kept: its prefix that agrees with the answer (the executor counts the tokens of
    the verifying step but its own one)."""
    draft = seq.request.draft_tokens or []
    return next((i for i, (d, t) in enumerate(zip(draft, seq.tokens, strict=False)) if d != t), min(len(draft), len(seq.tokens)))


def perf_metrics(seq: Sequence, fault=no_fault) -> dict[str, np.ndarray]:
    """With return_perf_metrics, what TensorRT-LLM's backend sends from the executor's RequestPerfMetrics
    (model_instance_state.cc): KV-cache blocks, the steady clock's time points, and speculative decoding's counts
    (LlmRequest::updateNumTokensPerIteration: draft tokens given, those kept); with return_kv_cache_reuse_stats (before
    v0.19.0, when it was deprecated) the KV-cache blocks alone. Blocks: the sequence's tokens in blocks of 64, those
    its prompt found in the prefix cache reused (none where reuse is off). Fault draft_acceptance_not_reported
    (NVIDIA/TensorRT-LLM#17082): the counts stay zero though drafting ran."""
    r = seq.request
    if not (r.return_perf_metrics or r.return_kv_cache_reuse_stats):
        return {}
    drafted = 0 if fault("draft_acceptance_not_reported") else len(r.draft_tokens or [])
    accepted = accepted_draft_tokens(seq) if drafted else 0
    blocks = math.ceil((len(r.input_ids) + len(seq.tokens)) / TOKENS_PER_BLOCK)
    reused = seq.kv.reused if seq.kv is not None else 0
    values = (
        (blocks - reused, np.int32),
        (reused, np.int32),
        (blocks, np.int32),
        (r.arrival_ns, np.int64),
        (seq.scheduled_ns, np.int64),
        (seq.first_token_ns, np.int64),
        (seq.last_token_ns, np.int64),
        (accepted / drafted if drafted else 0.0, np.float32),
        (accepted, np.int32),
        (drafted, np.int32),
    )
    if not r.return_perf_metrics:
        values = values[:3]
    return {name: np.array([[value]], dtype=dtype) for name, (value, dtype) in zip(PERF_METRICS, values, strict=False)}
