"""Reference `tensorrt_llm` model: TensorRT-LLM's tensor contract served by a transformers model.

Parameters read from config.pbtxt, as the tensorrtllm backend reads them:
  gpt_model_path           the engine directory (engine.json, weights, tokenizer)
  gpt_model_type           V1: static batches through Triton's dynamic batcher (non-decoupled);
                           inflight_fused_batching: continuous batching, streaming and
                           cancellation (decoupled_mode true)
  exclude_input_in_output  default for requests that do not send the input of that name
  lora_cache_host_memory_bytes  LoRA adapters kept by task id before the oldest is evicted

Like TensorRT-LLM it publishes nv_trt_llm_request_metrics{request_type=active|waiting|max}.
"""

from __future__ import annotations

import json
from functools import partial

import triton_python_backend_utils as pb_utils
from generation import GenerationRequest, ReferenceEngine, Sampling, Sequence
from inflight import InflightScheduler, Job
from outputs import complete_outputs, streamed_outputs
from tensor_contract import RENAMED, RequestError, unpack_word_list
from triton_io import flag, model_parameters, optional_input

V1, INFLIGHT = "V1", "inflight_fused_batching"
SUPPORTED_MODEL_TYPES = (V1, INFLIGHT)
FINAL = pb_utils.TRITONSERVER_RESPONSE_COMPLETE_FINAL
# inputs of the contract that this backend cannot honour: refused, never silently ignored
UNSUPPORTED_INPUTS = ("draft_input_ids", "draft_logits", "prompt_embedding_table", "context_phase_params")


def _scalar(request, name: str, row: int, default, cast):
    value = optional_input(request, name)
    if value is None or value.size == 0:
        return default
    flat = value.reshape(value.shape[0], -1) if value.ndim > 1 else value.reshape(-1, 1)
    return cast(flat[min(row, flat.shape[0] - 1)][0])


def _renamed(request, name: str, row: int, default, cast):
    """An input by its pre-0.20 name or its new one, whichever the request sent."""
    value = _scalar(request, RENAMED[name], row, None, cast)
    return _scalar(request, name, row, default, cast) if value is None else value


class RequestMetrics:
    """TensorRT-LLM's request gauges, so dashboards and tests read the same names."""

    def __init__(self, model_name: str, version: str):
        # the family must outlive its metrics: keep a reference
        self._family = pb_utils.MetricFamily(
            name="nv_trt_llm_request_metrics",
            description="TRT LLM request metrics",
            kind=pb_utils.MetricFamily.GAUGE,
        )
        labels = {"model": model_name, "version": version}
        self._gauges = {
            kind: self._family.Metric(labels={**labels, "request_type": kind}) for kind in ("active", "waiting", "max")
        }

    def update(self, stats: dict) -> None:
        for kind, gauge in self._gauges.items():
            gauge.set(stats.get(kind, 0))


class TritonPythonModel:
    def initialize(self, args):
        params = model_parameters(args)
        self.model_type = params.get("gpt_model_type", V1)
        decoupled = pb_utils.using_decoupled_model_transaction_policy(json.loads(args["model_config"]))
        if self.model_type not in SUPPORTED_MODEL_TYPES:
            raise pb_utils.TritonModelException(
                f"gpt_model_type {self.model_type!r} is not supported by the reference backend "
                f"(supported: {', '.join(SUPPORTED_MODEL_TYPES)})"
            )
        if decoupled != (self.model_type == INFLIGHT):
            raise pb_utils.TritonModelException(
                f"the reference backend serves {V1} non-decoupled and {INFLIGHT} decoupled; "
                f"got gpt_model_type {self.model_type} with decoupled_mode {str(decoupled).lower()}"
            )
        self.exclude_input_default = flag(params.get("exclude_input_in_output"), False)
        self.metrics = RequestMetrics(args["model_name"], args["model_version"])
        cache_bytes = params.get("lora_cache_host_memory_bytes")
        load = partial(ReferenceEngine, params["gpt_model_path"], int(cache_bytes) if cache_bytes else None)
        self.scheduler = InflightScheduler(load, self.metrics.update) if decoupled else None
        self.engine = self.scheduler.engine if decoupled else load()
        self.metrics.update({"max": self.engine.build_config["max_batch_size"]})

    # -- request parsing ----------------------------------------------------------------
    def _parse(self, request) -> tuple[list[GenerationRequest], bool, bool]:
        """-> (one request per batch row, exclude_input_in_output, streaming)"""
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
        streaming = _scalar(request, "streaming", 0, False, bool)
        if streaming and self.scheduler is None:
            raise RequestError("Streaming is only supported if model is deployed using decoupled mode.")
        if _scalar(request, "stop", 0, False, bool):  # a decoupled model handles it before parsing
            raise RequestError(f"the stop input needs a decoupled deployment (gpt_model_type {INFLIGHT})")
        stop_lists = optional_input(request, "stop_words_list")
        bad_lists = optional_input(request, "bad_words_list")
        bias = optional_input(request, "embedding_bias")
        lora_weights, lora_config = optional_input(request, "lora_weights"), optional_input(request, "lora_config")
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
                # the names the served template family declares (TensorRT-LLM 0.20 renamed both)
                min_length=_renamed(request, "min_length", row, 0, int),
                seed=_renamed(request, "random_seed", row, 0, int),
            )
            gen = GenerationRequest(
                input_ids=[int(t) for t in input_ids[row, :n]],
                max_new_tokens=_scalar(request, "request_output_len", row, 0, int),
                end_id=end_id,
                pad_id=_scalar(request, "pad_id", row, max(end_id, 0), int),
                sampling=sampling,
                stop_words=unpack_word_list(None if stop_lists is None else stop_lists[min(row, len(stop_lists) - 1)]),
                bad_words=unpack_word_list(None if bad_lists is None else bad_lists[min(row, len(bad_lists) - 1)]),
                embedding_bias=None if bias is None or bias.size == 0 else bias[min(row, len(bias) - 1)],
                return_log_probs=_scalar(request, "return_log_probs", row, False, bool),
                lora=self._adapter(
                    _scalar(request, "lora_task_id", row, None, int),
                    None if lora_weights is None else lora_weights[min(row, len(lora_weights) - 1)],
                    None if lora_config is None else lora_config[min(row, len(lora_config) - 1)],
                ),
            )
            self.engine.validate(gen)
            parsed.append(gen)
        return parsed, exclude, streaming

    def _adapter(self, task_id, weights, config):
        if self.engine.lora is None:
            if task_id is not None or weights is not None or config is not None:
                raise RequestError(
                    "this engine was built without LoRA support: give it a [engines.<name>.lora] section in engines.lock"
                )
            return None
        return self.engine.lora.resolve(task_id, weights, config)

    @staticmethod
    def _response(arrays: dict):
        return pb_utils.InferenceResponse(output_tensors=[pb_utils.Tensor(name, value) for name, value in arrays.items()])

    def execute(self, requests):
        if self.scheduler is None:
            return self._execute_static(requests)
        for request in requests:
            self._submit(request)
        return None  # decoupled: responses go through each request's response sender

    def finalize(self):
        if self.scheduler is not None:
            self.scheduler.close()

    # -- inflight_fused_batching: hand requests to the scheduler ------------------------------
    def _submit(self, request) -> None:
        sender = request.get_response_sender()
        if _scalar(request, "stop", 0, False, bool):  # upstream's stop signal: same request id, stop=true
            self.scheduler.request_stop(request.request_id())
            sender.send(flags=FINAL)
            return
        try:
            parsed, exclude, streaming = self._parse(request)
            if len(parsed) != 1:
                raise RequestError(f"{INFLIGHT} takes one sequence per request, got a batch of {len(parsed)}")
        except RequestError as exc:
            sender.send(pb_utils.InferenceResponse(error=pb_utils.TritonError(str(exc))), flags=FINAL)
            return
        emit = partial(self._emit, sender, exclude)
        job = Job(Sequence(parsed[0]), request.request_id(), emit, streaming=streaming, is_cancelled=request.is_cancelled)
        self.scheduler.submit(job)

    def _emit(self, sender, exclude: bool, job: Job, tokens, log_probs, final: bool, error: str | None = None) -> None:
        try:
            if error is not None:
                sender.send(pb_utils.InferenceResponse(error=pb_utils.TritonError(error)), flags=FINAL)
            elif not job.streaming:
                sender.send(self._response(complete_outputs([job.sequence], exclude)), flags=FINAL)
            elif tokens:
                sender.send(self._response(streamed_outputs(job.sequence, tokens, log_probs)), flags=FINAL if final else 0)
            elif final:
                sender.send(flags=FINAL)
        except Exception:  # noqa: S110 - the client closed its stream; the slot is freed all the same
            pass

    # -- V1: one static batch per execute() -----------------------------------------------
    def _execute_static(self, requests):
        responses = [None] * len(requests)
        batch, owners = [], []
        for i, request in enumerate(requests):
            try:
                parsed, exclude, _ = self._parse(request)
            except RequestError as exc:
                responses[i] = pb_utils.InferenceResponse(error=pb_utils.TritonError(str(exc)))
                continue
            owners.append((i, len(parsed), exclude))
            batch.extend(parsed)
        self.metrics.update({"active": len(batch), "max": self.engine.build_config["max_batch_size"]})
        try:
            sequences = self.engine.generate_static(batch)
        except Exception as exc:  # keep serving: fail this batch, not the server
            for i, _, _ in owners:
                responses[i] = pb_utils.InferenceResponse(error=pb_utils.TritonError(f"generation failed: {exc}"))
            return responses
        finally:
            self.metrics.update({"active": 0, "max": self.engine.build_config["max_batch_size"]})
        start = 0
        for i, count, exclude in owners:
            responses[i] = self._response(complete_outputs(sequences[start : start + count], exclude))
            start += count
        return responses
