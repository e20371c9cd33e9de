"""The tensor contract of TensorRT-LLM's `llmapi` model (triton_backend/all_models/llmapi/tensorrt_llm), for clients
and the reference stand-in alike: one python model, text in and text out, sampling as `sampling_param_*` inputs.

Facts from upstream's model.py and config.pbtxt (tensorrtllm_backend v0.19.0; TensorRT-LLM b35ac1b6 = 1.2.0rc2 and
2026 main 0a710573): `text_output` always; finish_reason, stop_reason, cumulative_logprob only when their
`return_*` input is true, each `str()` of the LLM API's value ("stop", "length", "cancelled", "None"); the KV-cache
counters, the four timestamps and the draft figures only with `sampling_param_return_perf_metrics`, all sent as
strings (the text_output dtype) whatever config.pbtxt declares. A streamed response carries the text so far
(CompletionOutput.text), not the new piece. Self-contained (numpy only): copied beside the reference model.
"""

from __future__ import annotations

from typing import Collection, Sequence

import numpy as np

REQUIRED = "text_input"
MARKER = "sampling_param_max_tokens"  # a model declaring this input speaks this contract
FINISH_REASONS = ("stop", "length", "timeout", "cancelled")  # tensorrt_llm CompletionOutput.finish_reason
KV_CACHE_OUTPUTS = (
    "kv_cache_reused_block",
    "kv_cache_missed_block",
    "kv_cache_alloc_new_blocks",
    "kv_cache_alloc_total_blocks",
    "kv_cache_hit_rate",
)
TIMESTAMP_OUTPUTS = ("arrival_time_ns", "first_scheduled_time_ns", "first_token_time_ns", "last_token_time_ns")
DRAFT_OUTPUTS = ("acceptance_rate", "total_accepted_draft_tokens", "total_draft_tokens")
PERF_OUTPUTS = KV_CACHE_OUTPUTS + TIMESTAMP_OUTPUTS + DRAFT_OUTPUTS
# tensorrt_llm SamplingParams._validate (the LLM API, 2026 main and 0.20's alike): best_of above 1 where the request
# decodes greedily (top_k absent or 1 and top_p absent or 0, whatever the temperature) is refused in these words
GREEDY_BEST_OF = (
    "Greedy decoding in the LLM API does not allow multiple returns. Please set to best_of=1, got best_of={best_of}. "
    "Please set to best_of=1 or set an environment variable TLLM_ALLOW_N_GREEDY_DECODING=1 to allow best_of > 1 "
    "under the greedy decoding."
)
# the client's sampling fields -> the llmapi inputs (SamplingParams names) and their Triton dtypes
SAMPLING = {
    "top_k": ("sampling_param_top_k", "INT32"),
    "top_p": ("sampling_param_top_p", "FP32"),
    "temperature": ("sampling_param_temperature", "FP32"),
    "random_seed": ("sampling_param_seed", "UINT64"),
    "presence_penalty": ("sampling_param_presence_penalty", "FP32"),
    "frequency_penalty": ("sampling_param_frequency_penalty", "FP32"),
    "repetition_penalty": ("sampling_param_repetition_penalty", "FP32"),
    "min_length": ("sampling_param_min_tokens", "INT32"),
}


class LlmapiRequestError(ValueError):
    """A request this contract cannot express; the message says what the llmapi model lacks."""


def speaks_llmapi(declared: Collection[str]) -> bool:
    return MARKER in declared


def llmapi_inputs(
    text: str | bytes,
    max_tokens: int,
    *,
    declared: Collection[str],
    end_id: int | None = None,
    pad_id: int | None = None,
    stop_words: Sequence[str] | None = None,
    bad_words: Sequence[str] | None = None,
    sampling=None,
    return_log_probs: bool = False,
    stream: bool | None = None,
    exclude_input_in_output: bool | None = None,
    return_finish_reason: bool = False,
    return_stop_reason: bool = False,
    return_perf_metrics: bool = False,
    lora: tuple[int, str, str] | None = None,
) -> dict:
    """The llmapi model's inputs as name -> (value, Triton dtype). What it has no input for (end_id, pad_id, bad
    words, per-token log probs) is refused, not dropped: a test would otherwise check something else than it says."""
    for name, value in (("end_id", end_id), ("pad_id", pad_id), ("bad_words", bad_words)):
        if value is not None:
            raise LlmapiRequestError(f"the llmapi model has no {name} input (SamplingParams are sent as sampling_param_*)")
    inputs = {
        "text_input": (text if isinstance(text, bytes) else text.encode("utf-8"), "BYTES"),
        "sampling_param_max_tokens": (max_tokens, "INT32"),
    }
    if stream is not None:
        inputs["streaming"] = (stream, "BOOL")
    if stop_words is not None:
        inputs["sampling_param_stop"] = ([w if isinstance(w, bytes) else w.encode("utf-8") for w in stop_words], "BYTES")
    if exclude_input_in_output is not None:
        inputs["sampling_param_exclude_input_from_output"] = (exclude_input_in_output, "BOOL")
    for flag, name in (
        (return_log_probs, "return_cumulative_logprob"),
        (return_finish_reason, "return_finish_reason"),
        (return_stop_reason, "return_stop_reason"),
        (return_perf_metrics, "sampling_param_return_perf_metrics"),
    ):
        if flag:
            inputs[name] = (True, "BOOL")
    if sampling is not None:
        for field, (name, dtype) in SAMPLING.items():
            value = getattr(sampling, field)
            if value is not None:
                inputs[name] = (value, dtype)
    if lora is not None:
        inputs.update(lora_id=(lora[0], "UINT64"), lora_name=(lora[1], "BYTES"), lora_path=(lora[2], "BYTES"))
    missing = sorted(set(inputs) - set(declared))
    if missing:
        raise LlmapiRequestError(f"the served llmapi model declares no input {missing[0]!r}")
    return inputs


def output_text(outputs: dict, name: str) -> str | None:
    """An output sent as a string tensor (every llmapi output is), decoded; None where the response has none."""
    value = outputs.get(name)
    if value is None:
        return None
    item = np.asarray(value).reshape(-1)[0]
    return item.decode("utf-8") if isinstance(item, bytes) else str(item)


def output_number(outputs: dict, name: str) -> float | None:
    """A perf output as a number (upstream sends "0", "1.5", ...)."""
    text = output_text(outputs, name)
    return None if text is None or text == "None" else float(text)
