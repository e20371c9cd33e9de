"""The tensorrt_llm model's output tensors, shaped as TensorRT-LLM returns them (beam width 1)."""

from __future__ import annotations

import numpy as np
from generation import Sequence
from tensor_contract import output_tensors


def output_arrays(sequences: list[Sequence], rows: list[list[int]], log_probs: list[list[float]]) -> dict[str, np.ndarray]:
    """Arrays for `rows` (the token ids each sequence returns now) with their log probs: zero unless the
    request asked for them (return_log_probs); output_ids padded with end_id, as TensorRT-LLM pads them."""
    return output_tensors(
        rows,
        [s.request.end_id if s.request.end_id >= 0 else s.request.pad_id for s in sequences],
        [lps if s.request.return_log_probs else None for s, lps in zip(sequences, log_probs, strict=True)],
        [s.cum_log_prob if s.request.return_log_probs else None for s in sequences],
    )


def complete_outputs(sequences: list[Sequence], exclude_input: bool) -> dict[str, np.ndarray]:
    """Everything each sequence generated (after its prompt unless `exclude_input`)."""
    rows = [s.tokens if exclude_input else s.request.input_ids + s.tokens for s in sequences]
    return output_arrays(sequences, rows, [s.log_probs for s in sequences])


def streamed_outputs(sequence: Sequence, tokens: list[int], log_probs: list[float]) -> dict[str, np.ndarray]:
    """A streaming step: only the new tokens, as TensorRT-LLM streams them."""
    return output_arrays([sequence], [tokens], [log_probs])
