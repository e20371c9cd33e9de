"""The tensorrt_llm model's responses, as TensorRT-LLM's backend sends them: one per request (or per streamed step),
optional outputs only when the request asked for them (tensor_contract.output_tensors)."""

from __future__ import annotations

import numpy as np
from generation import Sequence
from tensor_contract import output_tensors


def complete_outputs(seq: Sequence, exclude_input: bool, batch_index: int | None = None) -> dict[str, np.ndarray]:
    """Everything the sequence generated, after its prompt unless `exclude_input`."""
    ids = seq.tokens if exclude_input else seq.request.input_ids + seq.tokens
    log_probs = seq.log_probs if seq.request.return_log_probs else None
    return output_tensors(ids, log_probs, seq.cum_log_prob, batch_index)


def streamed_outputs(seq: Sequence, tokens: list[int], log_probs: list[float],
                     batch_index: int | None = None) -> dict[str, np.ndarray]:  # fmt: skip
    """A streaming step: only the new tokens (never the prompt), as TensorRT-LLM streams them."""
    return output_tensors(tokens, log_probs if seq.request.return_log_probs else None, seq.cum_log_prob, batch_index)
