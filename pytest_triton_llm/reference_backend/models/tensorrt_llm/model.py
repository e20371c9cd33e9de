"""Reference `tensorrt_llm` model: TensorRT-LLM's tensor contract served by a transformers model.

Parameters read from config.pbtxt, as the tensorrtllm backend reads them:
  gpt_model_path           the engine directory (engine.json, weights, tokenizer)
  gpt_model_type           V1 (static batching)
  exclude_input_in_output  default for requests that do not send the input of that name
"""

from __future__ import annotations

import numpy as np
import triton_python_backend_utils as pb_utils
from generation import GenerationRequest, ReferenceEngine, RequestError, Sampling, Sequence, decode_word_list
from triton_io import flag, model_parameters, optional_input

SUPPORTED_MODEL_TYPES = ("V1",)
# inputs of the contract that this backend cannot honour: refused, never silently ignored
UNSUPPORTED_INPUTS = (
    "draft_input_ids", "draft_logits", "prompt_embedding_table", "lora_task_id", "lora_weights", "lora_config",
    "context_phase_params",
)  # fmt: skip


def _scalar(request, name: str, row: int, default, cast):
    value = optional_input(request, name)
    if value is None or value.size == 0:
        return default
    flat = value.reshape(value.shape[0], -1) if value.ndim > 1 else value.reshape(-1, 1)
    return cast(flat[min(row, flat.shape[0] - 1)][0])


class TritonPythonModel:
    def initialize(self, args):
        params = model_parameters(args)
        self.model_type = params.get("gpt_model_type", "V1")
        if self.model_type not in SUPPORTED_MODEL_TYPES:
            raise pb_utils.TritonModelException(
                f"gpt_model_type {self.model_type!r} is not supported by the reference backend "
                f"(supported: {', '.join(SUPPORTED_MODEL_TYPES)})"
            )
        self.exclude_input_default = flag(params.get("exclude_input_in_output"), False)
        self.engine = ReferenceEngine(params["gpt_model_path"])

    # -- request parsing ----------------------------------------------------------------
    def _parse(self, request) -> tuple[list[GenerationRequest], bool]:
        for name in UNSUPPORTED_INPUTS:
            if optional_input(request, name) is not None:
                raise RequestError(f"input {name!r} is not supported by the reference backend")
        input_ids = pb_utils.get_input_tensor_by_name(request, "input_ids").as_numpy()
        input_ids = input_ids.reshape(1, -1) if input_ids.ndim == 1 else input_ids
        lengths = pb_utils.get_input_tensor_by_name(request, "input_lengths").as_numpy().reshape(-1)
        batch = input_ids.shape[0]
        if lengths.shape[0] != batch:
            raise RequestError(f"input_lengths has {lengths.shape[0]} rows, input_ids has {batch}")
        if _scalar(request, "beam_width", 0, 1, int) != 1:
            raise RequestError("beam_width > 1 is not supported by the reference backend")
        if _scalar(request, "num_return_sequences", 0, 1, int) != 1:
            raise RequestError("num_return_sequences > 1 is not supported by the reference backend")
        for name in ("return_context_logits", "return_generation_logits"):
            if _scalar(request, name, 0, False, bool):
                raise RequestError(f"{name} needs an engine built with logits gathering; the reference backend has none")
        if _scalar(request, "streaming", 0, False, bool):
            raise RequestError("Streaming is only supported if model is deployed using decoupled mode.")
        stop_lists = optional_input(request, "stop_words_list")
        bad_lists = optional_input(request, "bad_words_list")
        bias = optional_input(request, "embedding_bias")
        exclude = _scalar(request, "exclude_input_in_output", 0, self.exclude_input_default, bool)
        parsed = []
        for row in range(batch):
            n = int(lengths[row])
            if not 0 <= n <= input_ids.shape[1]:
                raise RequestError(f"input_lengths[{row}] = {n} is outside [0, {input_ids.shape[1]}]")
            end_id = _scalar(request, "end_id", row, -1, int)
            sampling = Sampling(
                top_k=_scalar(request, "runtime_top_k", row, 0, int),
                top_p=_scalar(request, "runtime_top_p", row, 0.0, float),
                temperature=_scalar(request, "temperature", row, 1.0, float),
                repetition_penalty=_scalar(request, "repetition_penalty", row, 1.0, float),
                presence_penalty=_scalar(request, "presence_penalty", row, 0.0, float),
                frequency_penalty=_scalar(request, "frequency_penalty", row, 0.0, float),
                min_length=_scalar(request, "min_length", row, 0, int),
                seed=_scalar(request, "random_seed", row, 0, int),
            )
            gen = GenerationRequest(
                input_ids=[int(t) for t in input_ids[row, :n]],
                max_new_tokens=_scalar(request, "request_output_len", row, 0, int),
                end_id=end_id,
                pad_id=_scalar(request, "pad_id", row, max(end_id, 0), int),
                sampling=sampling,
                stop_words=decode_word_list(None if stop_lists is None else stop_lists[min(row, len(stop_lists) - 1)]),
                bad_words=decode_word_list(None if bad_lists is None else bad_lists[min(row, len(bad_lists) - 1)]),
                embedding_bias=None if bias is None or bias.size == 0 else bias[min(row, len(bias) - 1)],
                return_log_probs=_scalar(request, "return_log_probs", row, False, bool),
            )
            self.engine.validate(gen)
            parsed.append(gen)
        return parsed, exclude

    # -- responses ------------------------------------------------------------------------
    @staticmethod
    def _response(sequences: list[Sequence], exclude_input: bool):
        rows = [(s.tokens if exclude_input else s.request.input_ids + s.tokens) for s in sequences]
        width = max(1, max(len(r) for r in rows))
        steps = max(1, max(len(s.tokens) for s in sequences))
        batch = len(sequences)
        output_ids = np.zeros((batch, 1, width), dtype=np.int32)
        log_probs = np.zeros((batch, 1, steps), dtype=np.float32)
        cum = np.zeros((batch, 1), dtype=np.float32)
        for i, (seq, row) in enumerate(zip(sequences, rows, strict=True)):
            fill = seq.request.end_id if seq.request.end_id >= 0 else seq.request.pad_id
            output_ids[i, 0, :] = fill  # TensorRT-LLM pads outputs with end_id
            output_ids[i, 0, : len(row)] = row
            if seq.request.return_log_probs:
                log_probs[i, 0, : len(seq.log_probs)] = seq.log_probs
                cum[i, 0] = seq.cum_log_prob
        tensors = [
            pb_utils.Tensor("output_ids", output_ids),
            pb_utils.Tensor("sequence_length", np.array([[len(r)] for r in rows], dtype=np.int32)),
            pb_utils.Tensor("cum_log_probs", cum),
            pb_utils.Tensor("output_log_probs", log_probs),
            pb_utils.Tensor("context_logits", np.zeros((batch, 1, 1), dtype=np.float32)),
            pb_utils.Tensor("generation_logits", np.zeros((batch, 1, 1, 1), dtype=np.float32)),
            pb_utils.Tensor("batch_index", np.arange(batch, dtype=np.int32).reshape(batch, 1)),
            pb_utils.Tensor("sequence_index", np.zeros((batch, 1), dtype=np.int32)),
        ]
        return pb_utils.InferenceResponse(output_tensors=tensors)

    # -- V1: one static batch per execute() -----------------------------------------------
    def execute(self, requests):
        responses = [None] * len(requests)
        batch, owners = [], []
        for i, request in enumerate(requests):
            try:
                parsed, exclude = self._parse(request)
            except RequestError as exc:
                responses[i] = pb_utils.InferenceResponse(error=pb_utils.TritonError(str(exc)))
                continue
            owners.append((i, len(parsed), exclude))
            batch.extend(parsed)
        try:
            sequences = self.engine.generate_static(batch)
        except Exception as exc:  # keep serving: fail this batch, not the server
            for i, _, _ in owners:
                responses[i] = pb_utils.InferenceResponse(error=pb_utils.TritonError(f"generation failed: {exc}"))
            return responses
        start = 0
        for i, count, exclude in owners:
            responses[i] = self._response(sequences[start : start + count], exclude)
            start += count
        return responses
