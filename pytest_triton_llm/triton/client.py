"""A small LLM client over tritonclient, for the TensorRT-LLM ensemble and its tensorrt_llm model.

- `generate(text, ...)`       the ensemble (text in, text out): gRPC, HTTP infer or HTTP generate
- `generate_ids(ids, ...)`    the tensorrt_llm model directly (token ids in, token ids out), as
                              upstream's inflight_batcher_llm client does
- `stream(text, ...)`         the ensemble with stream=true: gRPC stream or HTTP generate_stream (SSE)
- `stream_ids(ids, ...)`      the tensorrt_llm model on a gRPC stream, with upstream's stop signal
                              (stop_after_s) or stream cancellation (cancel_after_s)
- `generate_many(...)`        N requests in flight at once

A deployment with a decoupled tensorrt_llm (in-flight batching) makes the ensemble decoupled too:
Triton then refuses unary gRPC/HTTP infer, so "grpc" requests go over a gRPC stream.
"""

from __future__ import annotations

import json
import threading
import time
import urllib.error
import urllib.request
from dataclasses import dataclass, field
from functools import cached_property
from typing import Callable, Sequence

import numpy as np
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient
from tritonclient.utils import InferenceServerException

from ..host.endpoints import Endpoints
from .llmapi_contract import LlmapiRequestError, llmapi_inputs, output_text, speaks_llmapi
from .load import Target, json_body, run_load
from .server_metrics import Gauges, GaugeWatch, trtllm_gauges
from .streaming import StreamError, StreamResult, grpc_stream, sse_stream
from .tensor_contract import (
    STOP_SIGNAL,
    Inputs,
    RequestError,
    Sampling,
    Unbatched,
    batched,
    config_parameters,
    core_inputs,
    ensemble_inputs,
    flag,
    returned_ids,
)

__all__ = ["GenerationError", "Generation", "LLMClient", "Sampling"]

PROTOCOLS = ("grpc", "http", "generate")
STREAM_PROTOCOLS = ("grpc", "sse")


class GenerationError(RuntimeError):
    """The server answered the request with an error."""


@dataclass
class Generation:
    text: str | None
    token_ids: list[int] | None = None  # from the tensorrt_llm model; None through the ensemble
    sequence_length: int | None = None
    cum_log_prob: float | None = None
    output_log_probs: list[float] | None = None
    latency_s: float = 0.0
    protocol: str = "grpc"
    raw: dict = field(default_factory=dict, repr=False)


def log_probs_of(outputs: dict) -> tuple[float | None, list[float] | None]:
    """(cum_log_prob, output_log_probs): present only when the request asked for log probs (the llmapi model: the
    cumulative one only, as a string)."""
    if (cumulative := output_text(outputs, "cumulative_logprob")) is not None:
        return float(cumulative), None
    if "cum_log_probs" not in outputs:
        return None, None
    return float(outputs["cum_log_probs"].reshape(-1)[0]), outputs["output_log_probs"].reshape(-1).tolist()


def _ensemble_generation(outputs: dict, protocol: str) -> Generation:
    cum, per_token = log_probs_of(outputs)
    return Generation(
        text=outputs["text_output"].reshape(-1)[0].decode("utf-8"),
        cum_log_prob=cum,
        output_log_probs=per_token,
        protocol=protocol,
        raw=outputs,
    )


class LLMClient:
    def __init__(
        self,
        endpoints: Endpoints,
        ensemble: str = "ensemble",
        core_model: str = "tensorrt_llm",
        timeout_s: float = 300.0,
        decode: Callable[[list[int]], str] | None = None,
    ):
        self.endpoints = endpoints
        self.ensemble = ensemble
        self.core_model = core_model
        self.timeout_s = timeout_s
        self.decode = decode  # token ids -> text, for generate_ids
        # an llmapi deployment's exclude_input_in_output: sent with every text request, as the model's own default
        # (upstream's: false, the prompt echoed) has no config parameter
        self.exclude_input: bool | None = None
        self._local = threading.local()
        self._declared: dict[str, frozenset[str]] = {}
        self._batching: dict[str, bool] = {}
        self._parameters: dict[str, dict[str, str]] = {}
        # model -> every input name sent to it since the plugin last cleared it (per test): the harness checks that a
        # test declares the capability behind each input whose presence depends on the served family
        self.sent: dict[str, set[str]] = {}

    # -- connections (one per thread) --------------------------------------------------------
    def grpc(self) -> grpcclient.InferenceServerClient:
        if getattr(self._local, "grpc", None) is None:
            self._local.grpc = self.endpoints.grpc_client()
        return self._local.grpc

    def http(self) -> httpclient.InferenceServerClient:
        if getattr(self._local, "http", None) is None:
            self._local.http = self.endpoints.http_client(self.timeout_s)
        return self._local.http

    def close(self) -> None:
        """Close this thread's connections (other threads' close with their thread)."""
        for name in ("grpc", "http"):
            conn = getattr(self._local, name, None)
            if conn is not None:
                conn.close()
                setattr(self._local, name, None)

    # -- what the server says about its models ---------------------------------------------------
    def model_metadata(self, model: str | None = None) -> dict:
        return self.grpc().get_model_metadata(model or self.ensemble, headers=self.endpoints.header_dict(), as_json=True)

    def model_config(self, model: str | None = None) -> dict:
        return self.grpc().get_model_config(model or self.ensemble, headers=self.endpoints.header_dict(), as_json=True)["config"]

    def parameters(self, model: str) -> dict[str, str]:
        """`model`'s config parameters (tensor_contract.config_parameters), asked once."""
        if model not in self._parameters:
            self._parameters[model] = config_parameters(self.model_config(model))
        return self._parameters[model]

    def declared_inputs(self, model: str) -> frozenset[str]:
        """The input names `model` declares (min_length or min_tokens, ...), asked once."""
        if model not in self._declared:
            self._declared[model] = frozenset(t["name"] for t in self.model_metadata(model)["inputs"])
        return self._declared[model]

    def ensemble_inputs(self, text: str | bytes, max_tokens: int, **options) -> Inputs:
        """The entry model's inputs, named as the served model has them: the ensemble's or BLS's
        (tensor_contract.ensemble_inputs), or the llmapi model's (llmapi_contract.llmapi_inputs)."""
        if self.speaks_llmapi:
            if self.exclude_input is not None:
                options.setdefault("exclude_input_in_output", self.exclude_input)
            options = {k: v for k, v in options.items() if k != "stream" or v is not None}
            inputs = self._encode(llmapi_inputs, self.ensemble, text, max_tokens, options)
            if not self.batches(self.ensemble):  # upstream's max_batch_size 0: no batch dimension
                inputs = {name: (Unbatched.of(value, dtype), dtype) for name, (value, dtype) in inputs.items()}
            return inputs
        return self._encode(ensemble_inputs, self.ensemble, text, max_tokens, options)

    def batches(self, model: str) -> bool:
        """Whether `model` takes a batch dimension (max_batch_size > 0), asked once."""
        if model not in self._batching:
            self._batching[model] = int(self.model_config(model).get("max_batch_size", 0)) > 0
        return self._batching[model]

    @property
    def speaks_llmapi(self) -> bool:
        """The entry model is TensorRT-LLM's llmapi model (text in, text out, sampling_param_* inputs)."""
        return speaks_llmapi(self.declared_inputs(self.ensemble))

    def core_inputs(self, input_ids: Sequence[int], max_tokens: int, **options) -> Inputs:
        """tensorrt_llm's inputs (tensor_contract.core_inputs), named as the served tensorrt_llm has them. An
        exclude_input_in_output the model does not declare (families before tensorrtllm_backend v0.14) is left out
        where its config parameter of that name already gives the value asked for."""
        asked = options.get("exclude_input_in_output")
        if asked is not None and "exclude_input_in_output" not in self.declared_inputs(self.core_model):
            if flag(self.parameters(self.core_model).get("exclude_input_in_output"), False) == asked:
                options = {k: v for k, v in options.items() if k != "exclude_input_in_output"}
        return self._encode(core_inputs, self.core_model, input_ids, max_tokens, options)

    def _encode(self, encoder, model: str, prompt, max_tokens: int, options: dict) -> Inputs:
        try:
            inputs = encoder(prompt, max_tokens, declared=self.declared_inputs(model), **options)
        except (RequestError, LlmapiRequestError) as exc:
            raise GenerationError(f"{model}: {exc}") from None
        self._note(model, inputs)
        return inputs

    def _note(self, model: str, inputs: dict) -> None:
        self.sent.setdefault(model, set()).update(inputs)

    @cached_property
    def decoupled(self) -> bool:
        """Whether tensorrt_llm (and so the ensemble) answers through streams only."""
        return bool(self.model_config(self.core_model).get("model_transaction_policy", {}).get("decoupled", False))

    @property
    def protocols(self) -> tuple[str, ...]:
        """The request protocols this deployment accepts for non-streamed requests."""
        return ("grpc", "generate") if self.decoupled else PROTOCOLS

    def metrics(self) -> str:
        """The server's Prometheus metrics text."""
        with self.endpoints.open(self.endpoints.metrics_url(), timeout=10) as resp:
            return resp.read().decode()

    def trtllm_gauges(self) -> Gauges:
        """The tensorrt_llm model's nv_trt_llm_* gauges, now."""
        return trtllm_gauges(self.metrics(), self.core_model)

    def watch_trtllm_gauges(self, interval_s: float = 0.05) -> GaugeWatch:
        """`with client.watch_trtllm_gauges() as watch:` samples the gauges while the block runs."""
        return GaugeWatch(self.trtllm_gauges, interval_s)

    # -- the ensemble ------------------------------------------------------------------------
    def generate(self, text: str | bytes, max_tokens: int, *, protocol: str = "grpc", **options) -> Generation:
        """One non-streamed request to the ensemble; `options` as `ensemble_inputs`."""
        if protocol not in PROTOCOLS:
            raise ValueError(f"protocol must be one of {PROTOCOLS}, not {protocol!r}")
        inputs = self.ensemble_inputs(text, max_tokens, **options)
        start = time.perf_counter()
        if protocol == "generate":
            body = self._post_generate(inputs)
            text_out = body["text_output"]
            result = Generation(
                text=text_out[0] if isinstance(text_out, list) else text_out,
                cum_log_prob=_first(body.get("cum_log_probs")),
                protocol=protocol,
                raw=body,
            )
        else:
            result = _ensemble_generation(self.request(self.ensemble, inputs, protocol), protocol)
        result.latency_s = time.perf_counter() - start
        return result

    def stream(
        self, text: str | bytes, max_tokens: int, *, protocol: str = "grpc", cancel_after_s: float | None = None, **options
    ) -> StreamResult:
        """The entry model with stream=true; one event per response (text pieces in order; the llmapi model's carry the
        text so far), the gRPC stream closed after `cancel_after_s` when given."""
        if protocol not in STREAM_PROTOCOLS:
            raise ValueError(f"protocol must be one of {STREAM_PROTOCOLS}, not {protocol!r}")
        inputs = self.ensemble_inputs(text, max_tokens, stream=True, **options)
        try:
            if protocol == "sse":
                url = self.endpoints.http_url(f"/v2/models/{self.ensemble}/generate_stream")
                result = sse_stream(self.endpoints, url, json_body(inputs), self.timeout_s)
            else:
                result = grpc_stream(
                    self.endpoints,
                    self.ensemble,
                    infer_inputs(grpcclient, inputs),
                    cancel_after_s=cancel_after_s,
                    timeout_s=self.timeout_s,
                )
        except StreamError as exc:
            raise GenerationError(str(exc)) from None
        result.cumulative = self.speaks_llmapi
        return result

    # -- the tensorrt_llm model --------------------------------------------------------------
    def generate_ids(self, input_ids: Sequence[int], max_tokens: int, *, protocol: str = "grpc", **options) -> Generation:
        """One non-streamed request to tensorrt_llm; `options` as `core_inputs`."""
        start = time.perf_counter()
        outputs = self.request(self.core_model, self.core_inputs(input_ids, max_tokens, **options), protocol)
        ids = returned_ids(outputs)
        cum, per_token = log_probs_of(outputs)
        return Generation(
            text=self.decode(ids) if self.decode else None,
            token_ids=ids,
            sequence_length=int(outputs["sequence_length"].reshape(-1)[0]),
            cum_log_prob=cum,
            output_log_probs=per_token,
            latency_s=time.perf_counter() - start,
            protocol=protocol,
            raw=outputs,
        )

    def stream_ids(
        self,
        input_ids: Sequence[int],
        max_tokens: int,
        *,
        streaming: bool = True,
        request_id: str = "",
        stop_after_s: float | None = None,
        cancel_after_s: float | None = None,
        **options,
    ) -> StreamResult:
        """tensorrt_llm on a gRPC stream (decoupled deployments), optionally stopped or cancelled early."""
        inputs = self.core_inputs(input_ids, max_tokens, streaming=streaming, **options)
        if stop_after_s is not None and not request_id:
            raise ValueError("stop_after_s needs a request_id: the stop signal names the request it stops")
        try:
            return grpc_stream(
                self.endpoints,
                self.core_model,
                infer_inputs(grpcclient, inputs),
                request_id=request_id,
                stop_inputs=infer_inputs(grpcclient, STOP_SIGNAL),
                stop_after_s=stop_after_s,
                cancel_after_s=cancel_after_s,
                timeout_s=self.timeout_s,
            )
        except StreamError as exc:
            raise GenerationError(str(exc)) from None

    def stream_inputs(self, model: str, inputs: Inputs) -> StreamResult:
        """`inputs` (already named for `model`, its streaming flag set) on one gRPC stream, until its final response."""
        self._note(model, inputs)
        try:
            return grpc_stream(self.endpoints, model, infer_inputs(grpcclient, inputs), timeout_s=self.timeout_s)
        except StreamError as exc:
            raise GenerationError(str(exc)) from None

    def send_stop(self, request_id: str) -> StreamResult:
        """Upstream's stop signal for `request_id`, alone on its own stream; its answer is one empty final response."""
        try:
            return grpc_stream(
                self.endpoints,
                self.core_model,
                infer_inputs(grpcclient, STOP_SIGNAL),
                request_id=request_id,
                timeout_s=self.timeout_s,
            )
        except StreamError as exc:
            raise GenerationError(str(exc)) from None

    def generate_many(
        self, prompts: Sequence[str | bytes], max_tokens: int, concurrency: int | None = None, **options
    ) -> list[Generation]:
        """Non-streamed ensemble requests for every prompt, up to `concurrency` in flight at once (all by
        default), over gRPC streams by the load engine; results in prompt order."""
        requests = [self.ensemble_inputs(p, max_tokens, **options) for p in prompts]
        target = Target(self.endpoints, self.ensemble)
        records, _ = run_load(target, requests, concurrency=concurrency or len(prompts), keep_outputs=True)
        results = []
        for record in sorted(records, key=lambda r: r.index):
            if record.error is not None:
                raise GenerationError(f"{self.ensemble}: {record.error}")
            if len(record.responses) != 1:
                raise GenerationError(
                    f"{self.ensemble}: expected one response to a non-streamed request, got {len(record.responses)}"
                )
            results.append(_ensemble_generation(record.responses[0], "grpc"))
            results[-1].latency_s = record.latency_s
        return results

    # -- transport -------------------------------------------------------------------------------
    def request(self, model: str, inputs: dict, protocol: str = "grpc") -> dict[str, np.ndarray]:
        """One request, one answer: unary infer, or a gRPC stream where the model is decoupled."""
        if protocol not in ("grpc", "http"):
            raise ValueError(f"protocol must be 'grpc' or 'http' here, not {protocol!r}")
        self._note(model, inputs)
        if self.decoupled:
            if protocol == "http":
                raise GenerationError(f"{model}: HTTP infer cannot call a decoupled model; use gRPC or HTTP generate")
            try:
                result = grpc_stream(self.endpoints, model, infer_inputs(grpcclient, inputs), timeout_s=self.timeout_s)
            except StreamError as exc:
                raise GenerationError(str(exc)) from None
            events = result.content_events
            if len(events) != 1:
                raise GenerationError(f"{model}: expected one response to a non-streamed request, got {len(events)}")
            return events[0].outputs
        module = grpcclient if protocol == "grpc" else httpclient
        try:
            if protocol == "grpc":
                result = self.grpc().infer(
                    model, infer_inputs(module, inputs), client_timeout=self.timeout_s, headers=self.endpoints.header_dict()
                )
                names = [o["name"] for o in result.get_response(as_json=True)["outputs"]]
            else:
                result = self.http().infer(model, infer_inputs(module, inputs), headers=self.endpoints.header_dict())
                names = [o["name"] for o in result.get_response()["outputs"]]
        except InferenceServerException as exc:
            raise GenerationError(f"{model}: {exc.message()}") from None
        return {name: result.as_numpy(name) for name in names}

    def _post_generate(self, inputs: dict) -> dict:
        url = self.endpoints.http_url(f"/v2/models/{self.ensemble}/generate")
        try:
            with self.endpoints.open(url, json.dumps(json_body(inputs)).encode(), timeout=self.timeout_s) as resp:
                return json.loads(resp.read())
        except urllib.error.HTTPError as exc:
            detail = exc.read().decode("utf-8", errors="replace")
            try:
                detail = json.loads(detail).get("error", detail)
            except json.JSONDecodeError:
                pass
            raise GenerationError(f"{self.ensemble} generate: HTTP {exc.code}: {detail}") from None


def _first(value):
    while isinstance(value, list):
        value = value[0] if value else None
    return value


def infer_inputs(module, inputs: Inputs) -> list:
    tensors = []
    for name, (value, dtype) in inputs.items():
        array = batched(value, dtype)
        tensor = module.InferInput(name, list(array.shape), dtype)
        tensor.set_data_from_numpy(array)
        tensors.append(tensor)
    return tensors
