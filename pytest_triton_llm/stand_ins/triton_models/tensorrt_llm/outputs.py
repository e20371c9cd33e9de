"""The tensorrt_llm model's responses, as TensorRT-LLM's backend sends them: one per request (or per streamed step),
optional outputs only when the request asked for them (served_contract.output_tensors); `fault` (generation.py's)
names the known upstream bug of its outputs it reproduces, if any (output_faults.py)."""

from __future__ import annotations

import numpy as np
from generation import Sequence, no_fault
from output_faults import distort_length, distort_log_probs
from served_contract import output_tensors


def complete_outputs(seq: Sequence, exclude_input: bool, batch_index: int | None = None, fault=no_fault) -> dict[str, np.ndarray]:
    """Everything the sequence generated, after its prompt unless `exclude_input`."""
    ids = seq.tokens if exclude_input else seq.request.input_ids + seq.tokens
    log_probs = seq.log_probs if seq.request.return_log_probs else None
    outputs = output_tensors(ids, log_probs, seq.cum_log_prob, batch_index)
    return distort_length(fault, distort_log_probs(fault, outputs), seq, exclude_input)


def streamed_outputs(
    seq: Sequence, tokens: list[int], log_probs: list[float], batch_index: int | None = None, fault=no_fault
) -> dict[str, np.ndarray]:
    """A streaming step: only the new tokens (never the prompt), as TensorRT-LLM streams them."""
    outputs = output_tensors(tokens, log_probs if seq.request.return_log_probs else None, seq.cum_log_prob, batch_index)
    return distort_log_probs(fault, outputs)
