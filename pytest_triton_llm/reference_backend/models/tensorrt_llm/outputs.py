"""The tensorrt_llm model's output tensors, shaped as TensorRT-LLM returns them (beam width 1)."""

from __future__ import annotations

import numpy as np
from generation import Sequence


def output_arrays(sequences: list[Sequence], rows: list[list[int]], log_probs: list[list[float]]) -> dict[str, np.ndarray]:
    """Arrays for `rows` (the token ids each sequence returns now) with their log probs.

    Log probs are zero unless the request asked for them (return_log_probs); output_ids are
    padded with end_id, as TensorRT-LLM pads them.
    """
    batch = len(sequences)
    width = max([1] + [len(r) for r in rows])
    steps = max([1] + [len(lp) for lp in log_probs])
    output_ids = np.zeros((batch, 1, width), dtype=np.int32)
    out_log_probs = np.zeros((batch, 1, steps), dtype=np.float32)
    cum = np.zeros((batch, 1), dtype=np.float32)
    for i, (seq, row, lps) in enumerate(zip(sequences, rows, log_probs, strict=True)):
        request = seq.request
        output_ids[i, 0, :] = request.end_id if request.end_id >= 0 else request.pad_id
        output_ids[i, 0, : len(row)] = row
        if request.return_log_probs:
            out_log_probs[i, 0, : len(lps)] = lps
            cum[i, 0] = seq.cum_log_prob
    return {
        "output_ids": output_ids,
        "sequence_length": np.array([[len(r)] for r in rows], dtype=np.int32),
        "cum_log_probs": cum,
        "output_log_probs": out_log_probs,
        "context_logits": np.zeros((batch, 1, 1), dtype=np.float32),
        "generation_logits": np.zeros((batch, 1, 1, 1), dtype=np.float32),
        "batch_index": np.arange(batch, dtype=np.int32).reshape(batch, 1),
        "sequence_index": np.zeros((batch, 1), dtype=np.int32),
    }


def complete_outputs(sequences: list[Sequence], exclude_input: bool) -> dict[str, np.ndarray]:
    """Everything each sequence generated (after its prompt unless `exclude_input`)."""
    rows = [s.tokens if exclude_input else s.request.input_ids + s.tokens for s in sequences]
    return output_arrays(sequences, rows, [s.log_probs for s in sequences])


def streamed_outputs(sequence: Sequence, tokens: list[int], log_probs: list[float]) -> dict[str, np.ndarray]:
    """A streaming step: only the new tokens, as TensorRT-LLM streams them."""
    return output_arrays([sequence], [tokens], [log_probs])
