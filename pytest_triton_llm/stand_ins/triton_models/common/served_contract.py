"""The serving half of the tensorrt_llm tensor contract: how the stand-in reads a request's word lists, the error it
answers a refused request with, and the outputs it returns. The client's half (tensor_contract.py) encodes requests and
reads responses on its own, so that a bug both halves shared could not hide (tests/unit/test_architecture.py)."""

from __future__ import annotations

import numpy as np


class RequestError(ValueError):
    """A request the served model refuses: it becomes an error response, and the server keeps serving."""


# -- stop and bad word lists: per batch row a [2, N] int32 array, row 0 the token ids of all words concatenated, row 1
# -- each word's cumulative end offset; padded with 0 and -1 --------------------------------------------------------
def unpack_word_list(words: np.ndarray | None) -> list[list[int]]:
    """One batch row's [2, N] word list -> its token-id sequences."""
    if words is None:
        return []
    words = np.asarray(words)
    if words.size == 0:
        return []
    if words.ndim != 2 or words.shape[0] != 2:
        raise RequestError(f"stop/bad word list must have shape [2, N], got {list(words.shape)}")
    flat, offsets = words[0].tolist(), words[1].tolist()
    sequences, start = [], 0
    for end in offsets:
        if end < 0:
            break
        if end <= start or end > len(flat):
            raise RequestError(f"word list offsets must increase within [1, {len(flat)}], got {offsets}")
        sequences.append(flat[start:end])
        start = end
    return sequences


# tensorrt_llm's outputs under return_perf_metrics (TensorRT-LLM's backend from 0.19, model_instance_state.cc), in the
# order it sends them: KV-cache blocks, the executor's steady-clock time points, speculative decoding's counts. The
# client's half names them on its own (tensor_contract.PERF_METRICS)
PERF_METRICS = (
    "kv_cache_alloc_new_blocks",
    "kv_cache_reused_blocks",
    "kv_cache_alloc_total_blocks",
    "arrival_time_ns",
    "first_scheduled_time_ns",
    "first_token_time_ns",
    "last_token_time_ns",
    "acceptance_rate",
    "total_accepted_draft_tokens",
    "total_draft_tokens",
)


# -- tensorrt_llm outputs, as TensorRT-LLM's backend answers one request (beam width 1) --------------------
def output_tensors(
    ids: list[int],
    log_probs: list[float] | None = None,
    cum_log_prob: float = 0.0,
    batch_index: int | None = None,
    sequence_index: int = 0,
) -> dict[str, np.ndarray]:
    """output_ids [1, 1, len] and sequence_length [1, 1], sequence_index [1, 1] (which of num_return_sequences this
    response's sequence is; the C++ backend sends it whenever it is asked for); cum_log_probs [1, 1] (so far) and
    output_log_probs [1, 1, n] (of this response's new tokens) only when the request asked for log probs (`log_probs`
    not None); batch_index [1, 1] only for a row of a request of batch > 1."""
    outputs: dict[str, np.ndarray] = {
        "output_ids": np.asarray(ids, dtype=np.int32).reshape(1, 1, -1),
        "sequence_length": np.array([[len(ids)]], dtype=np.int32),
        "sequence_index": np.array([[sequence_index]], dtype=np.int32),
    }
    if log_probs is not None:
        outputs["cum_log_probs"] = np.array([[cum_log_prob]], dtype=np.float32)
        outputs["output_log_probs"] = np.asarray(log_probs, dtype=np.float32).reshape(1, 1, -1)
    if batch_index is not None:
        outputs["batch_index"] = np.array([[batch_index]], dtype=np.int32)
    return outputs
