"""The client's half of the tensor contract of TensorRT-LLM's inflight_batcher_llm models.

Input names (and TensorRT-LLM 0.20's renames), how requests are encoded as tensors, stop/bad word
lists, the stop signal, how the tensorrt_llm outputs are read, and model parameters. Self-contained (numpy only): the
client and the load generator use it, and it is copied next to the reference python models in a rendered repository,
which import by its bare name what both sides share (the renames, word-list packing, parameters); the serving half is
theirs alone (stand_ins/triton_models/common/served_contract.py), so that a bug both shared could not hide.
"""

from __future__ import annotations

from dataclasses import dataclass, fields
from typing import Collection, Sequence

import numpy as np

NO_END = -1  # an end_id no token has: nothing ends generation before max_tokens

# TensorRT-LLM 0.20 (template families trtllm-1.0 on, NGC 25.06+) renamed these inputs of both
# tensorrt_llm and the ensemble; a model declares one name or the other, never both.
RENAMED = {"min_length": "min_tokens", "random_seed": "seed"}

NUMPY = {
    "INT32": np.int32,
    "INT64": np.int64,
    "UINT64": np.uint64,
    "FP16": np.float16,
    "FP32": np.float32,
    "BOOL": np.bool_,
    "BYTES": np.object_,
}


class RequestError(ValueError):
    """A request the served model cannot take (an input it does not declare): refused before it is sent."""


@dataclass(frozen=True)
class Sampling:
    """Optional sampling inputs; None leaves the server default (greedy)."""

    top_k: int | None = None
    top_p: float | None = None
    temperature: float | None = None
    random_seed: int | None = None
    min_length: int | None = None
    repetition_penalty: float | None = None
    presence_penalty: float | None = None
    frequency_penalty: float | None = None


# Sampling field -> (ensemble input, tensorrt_llm input, Triton dtype), by their pre-0.20 names
SAMPLING_INPUTS = {
    "top_k": ("top_k", "runtime_top_k", "INT32"),
    "top_p": ("top_p", "runtime_top_p", "FP32"),
    "temperature": ("temperature", "temperature", "FP32"),
    "random_seed": ("random_seed", "random_seed", "UINT64"),
    "min_length": ("min_length", "min_length", "INT32"),
    "repetition_penalty": ("repetition_penalty", "repetition_penalty", "FP32"),
    "presence_penalty": ("presence_penalty", "presence_penalty", "FP32"),
    "frequency_penalty": ("frequency_penalty", "frequency_penalty", "FP32"),
}
assert set(SAMPLING_INPUTS) == {f.name for f in fields(Sampling)}

Inputs = dict  # input name -> (value, Triton dtype)
# tensorrt_llm's outputs under return_perf_metrics (TensorRT-LLM's backend from 0.19: model_instance_state.cc), which
# the entry models of those families pass on: KV-cache blocks, the executor's steady-clock time points, speculative
# decoding's counts
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


def input_name(name: str, declared: Collection[str] | None) -> str:
    """`name` as the served model declares it (min_length or min_tokens, ...); `declared` None: as given."""
    if declared is None or name in declared:
        return name
    for old, new in RENAMED.items():
        if name in (old, new) and {old, new} & set(declared):
            return new if new in declared else old
    raise RequestError(f"the served model declares no input {name!r}")


def _named(inputs: Inputs, declared: Collection[str] | None) -> Inputs:
    return {input_name(name, declared): value for name, value in inputs.items()}


def _bytes(text: str | bytes) -> bytes:
    return text if isinstance(text, bytes) else text.encode("utf-8")


def _sampling(sampling: Sampling | None, column: int) -> Inputs:
    if sampling is None:
        return {}
    return {
        SAMPLING_INPUTS[f.name][column]: (getattr(sampling, f.name), SAMPLING_INPUTS[f.name][2])
        for f in fields(Sampling)
        if getattr(sampling, f.name) is not None
    }


def ensemble_inputs(
    text: str | bytes,
    max_tokens: int,
    *,
    end_id: int | None = None,
    pad_id: int | None = None,
    stop_words: Sequence[str] | None = None,
    bad_words: Sequence[str] | None = None,
    sampling: Sampling | None = None,
    return_log_probs: bool = False,
    stream: bool | None = None,
    declared: Collection[str] | None = None,
) -> Inputs:
    """The ensemble's inputs (text in) as name -> (value, Triton dtype), named as `declared` has them."""
    inputs = {"text_input": (_bytes(text), "BYTES"), "max_tokens": (max_tokens, "INT32")}
    optional = {"end_id": (end_id, "INT32"), "pad_id": (pad_id, "INT32"), "stream": (stream, "BOOL")}
    inputs.update((k, v) for k, v in optional.items() if v[0] is not None)
    if stop_words is not None:
        inputs["stop_words"] = ([_bytes(w) for w in stop_words], "BYTES")
    if bad_words is not None:
        inputs["bad_words"] = ([_bytes(w) for w in bad_words], "BYTES")
    if return_log_probs:
        inputs["return_log_probs"] = (True, "BOOL")
    inputs.update(_sampling(sampling, 0))
    return _named(inputs, declared)


def core_inputs(
    input_ids: Sequence[int],
    max_tokens: int,
    *,
    end_id: int | None = None,
    pad_id: int | None = None,
    stop_words_ids: Sequence[Sequence[int]] | None = None,
    bad_words_ids: Sequence[Sequence[int]] | None = None,
    exclude_input_in_output: bool | None = None,
    sampling: Sampling | None = None,
    return_log_probs: bool = False,
    streaming: bool | None = None,
    lora_task_id: int | None = None,
    lora_weights: np.ndarray | None = None,
    lora_config: np.ndarray | None = None,
    declared: Collection[str] | None = None,
) -> Inputs:
    """tensorrt_llm's inputs (token ids in) as name -> (value, Triton dtype), named as `declared` has them.

    LoRA as TensorRT-LLM takes it: the first request of a task sends lora_task_id with lora_weights
    [1, rows, size] and lora_config [1, rows, 3]; later ones may send the id alone."""
    inputs = {
        "input_ids": (np.asarray([list(input_ids)], dtype=np.int32), "INT32"),
        "input_lengths": (len(input_ids), "INT32"),
        "request_output_len": (max_tokens, "INT32"),
    }
    optional = {
        "end_id": (end_id, "INT32"),
        "pad_id": (pad_id, "INT32"),
        "exclude_input_in_output": (exclude_input_in_output, "BOOL"),
        "streaming": (streaming, "BOOL"),
        "lora_task_id": (lora_task_id, "UINT64"),
        "lora_weights": (None if lora_weights is None else np.asarray(lora_weights, dtype=np.float16), "FP16"),
        "lora_config": (None if lora_config is None else np.asarray(lora_config, dtype=np.int32), "INT32"),
    }
    inputs.update((k, v) for k, v in optional.items() if v[0] is not None)
    if stop_words_ids:
        inputs["stop_words_list"] = (pack_word_ids([list(stop_words_ids)]), "INT32")
    if bad_words_ids:
        inputs["bad_words_list"] = (pack_word_ids([list(bad_words_ids)]), "INT32")
    if return_log_probs:
        inputs["return_log_probs"] = (True, "BOOL")
    inputs.update(_sampling(sampling, 1))
    return _named(inputs, declared)


# upstream client's stop signal: an empty request with the same request id and stop=true
STOP_SIGNAL: Inputs = {
    "input_ids": (np.zeros((1, 1), dtype=np.int32), "INT32"),
    "input_lengths": (0, "INT32"),
    "request_output_len": (0, "INT32"),
    "stop": (True, "BOOL"),
}


@dataclass(frozen=True)
class Unbatched:
    """A tensor sent as it is, with no batch dimension: the input of a model with max_batch_size 0 (the llmapi model)."""

    array: np.ndarray

    @classmethod
    def of(cls, value, dtype: str) -> Unbatched:
        """Scalars -> [1], lists -> [N]."""
        return cls(np.array(value if isinstance(value, list) else [value], dtype=NUMPY[dtype]))


def batched(value, dtype: str) -> np.ndarray:
    """A request of batch size 1: scalars -> [1, 1], lists -> [1, N], arrays get a batch dimension; Unbatched as is."""
    if isinstance(value, Unbatched):
        return value.array
    if isinstance(value, np.ndarray):
        return value if value.ndim >= 2 else value.reshape(1, -1)
    if isinstance(value, list):
        return np.array([value], dtype=NUMPY[dtype])
    return np.array([[value]], dtype=NUMPY[dtype])


# -- stop and bad word lists: per batch row a [2, N] int32 array, row 0 the token ids of all words
# -- concatenated, row 1 each word's cumulative end offset; padded with 0 and -1 --------------------
def pack_word_ids(rows: Sequence[Sequence[Sequence[int]]]) -> np.ndarray:
    """Token-id sequences per batch row -> [batch, 2, N] int32; empty sequences are dropped."""
    packed = []
    for sequences in rows:
        flat: list[int] = []
        offsets: list[int] = []
        for ids in sequences:
            if ids:
                flat.extend(int(t) for t in ids)
                offsets.append(len(flat))
        packed.append((flat, offsets))
    width = max([1] + [len(flat) for flat, _ in packed])
    out = np.zeros((len(packed), 2, width), dtype=np.int32)
    out[:, 1, :] = -1
    for i, (flat, offsets) in enumerate(packed):
        out[i, 0, : len(flat)] = flat
        out[i, 1, : len(offsets)] = offsets
    return out


# -- tensorrt_llm outputs, as the client reads one response --------------------------------------------
def returned_ids(outputs: dict) -> list[int]:
    """The token ids one response of tensorrt_llm returns (its first batch row and beam)."""
    if "output_ids" not in outputs:
        return []
    length = int(np.asarray(outputs["sequence_length"]).reshape(-1)[0])
    return np.asarray(outputs["output_ids"]).reshape(-1)[:length].tolist()


def returned_token_count(outputs: dict) -> int:
    """Tokens a response carries: its sequence lengths (every row and beam summed)."""
    return int(np.asarray(outputs["sequence_length"]).sum()) if "sequence_length" in outputs else 0


# -- model parameters, read as tensorrtllm_backend's models read them -------------------------
_TRUE = ("1", "true", "t", "y", "yes", "on")


def config_parameters(config: dict) -> dict[str, str]:
    """A model config's (JSON) `parameters` as name -> string value; an empty one, or an unfilled `${...}`
    placeholder, is unset."""
    values = {k: (v.get("string_value") or "").strip() for k, v in config.get("parameters", {}).items()}
    return {k: v for k, v in values.items() if v and not v.startswith("${")}


def flag(text: str | None, default: bool) -> bool:
    """A boolean parameter; unset or an unfilled `${...}` placeholder gives `default`."""
    if text is None or text.startswith("${") or not text.strip():
        return default
    return text.strip().lower() in _TRUE
