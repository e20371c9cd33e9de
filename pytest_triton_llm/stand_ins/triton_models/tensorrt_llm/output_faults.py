"""The tensorrt_llm model's known upstream bugs that show in its output tensors (fixtures/faults.toml)."""

from __future__ import annotations

import numpy as np
from generation import Sequence


def distort_log_probs(fault, outputs: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """A response's log probs as the fault named by `fault` (a predicate over names) returns them."""
    if "output_log_probs" in outputs:
        if fault("output_log_probs_all_zero") or fault("log_probs_all_zero"):
            outputs["output_log_probs"] = np.zeros_like(outputs["output_log_probs"])
        if fault("cum_log_probs_zero") or fault("log_probs_all_zero"):
            outputs["cum_log_probs"] = np.zeros_like(outputs["cum_log_probs"])
        if fault("output_log_probs_dtype_differs"):  # FP16 values where the config declares TYPE_FP32
            outputs["output_log_probs"] = outputs["output_log_probs"].astype(np.float16)
    return outputs


def distort_length(fault, outputs: dict[str, np.ndarray], seq: Sequence, exclude_input: bool) -> dict[str, np.ndarray]:
    """A complete response's ids and sequence_length as the fault returns them."""
    if fault("sequence_length_ignores_end_id"):  # the whole budget claimed, the ids padded to it
        request = seq.request
        length = request.max_new_tokens + (0 if exclude_input else len(request.input_ids))
        ids = outputs["output_ids"]
        padded = np.full((1, 1, max(length, ids.shape[-1])), request.pad_id, dtype=ids.dtype)
        padded[..., : ids.shape[-1]] = ids
        outputs["output_ids"], outputs["sequence_length"] = padded, np.array([[length]], dtype=np.int32)
    return outputs
