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
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from functools import cached_property
from typing import Callable, Sequence

import numpy as np
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient
from tritonclient.utils import InferenceServerException

from .reference_backend.models.preprocessing.words import pack_word_ids
from .runtimes.server import Endpoints
from .streaming import StreamError, StreamResult, grpc_stream, sse_stream

PROTOCOLS = ("grpc", "http", "generate")
STREAM_PROTOCOLS = ("grpc", "sse")


class GenerationError(RuntimeError):
    """The server answered the request with an error."""


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


# ensemble input name -> tensorrt_llm input name, with the Triton dtype
_SAMPLING_INPUTS = {
    "top_k": ("runtime_top_k", "INT32"),
    "top_p": ("runtime_top_p", "FP32"),
    "temperature": ("temperature", "FP32"),
    "random_seed": ("random_seed", "UINT64"),
    "min_length": ("min_length", "INT32"),
    "repetition_penalty": ("repetition_penalty", "FP32"),
    "presence_penalty": ("presence_penalty", "FP32"),
    "frequency_penalty": ("frequency_penalty", "FP32"),
}
_NP = {"INT32": np.int32, "UINT64": np.uint64, "FP16": np.float16, "FP32": np.float32, "BOOL": np.bool_, "BYTES": np.object_}


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
) -> dict:
    """Ensemble inputs as name -> (value, Triton dtype)."""
    inputs = {"text_input": (_bytes(text), "BYTES"), "max_tokens": (max_tokens, "INT32")}
    optional = {"end_id": (end_id, "INT32"), "pad_id": (pad_id, "INT32"), "stream": (stream, "BOOL")}
    inputs.update((k, v) for k, v in optional.items() if v[0] is not None)
    if stop_words is not None:
        inputs["stop_words"] = ([_bytes(w) for w in stop_words], "BYTES")
    if bad_words is not None:
        inputs["bad_words"] = ([_bytes(w) for w in bad_words], "BYTES")
    if return_log_probs:
        inputs["return_log_probs"] = (True, "BOOL")
    for name, value in _sampling_items(sampling):
        inputs[name] = (value, _SAMPLING_INPUTS[name][1])
    return inputs


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
) -> dict:
    """tensorrt_llm inputs as name -> (value, Triton dtype). LoRA as TensorRT-LLM takes it: the first
    request of a task sends lora_task_id with lora_weights [1, rows, size] and lora_config [1, rows, 3];
    later ones may send the id alone."""
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
    for name, value in _sampling_items(sampling):
        core_name, dtype = _SAMPLING_INPUTS[name]
        inputs[core_name] = (value, dtype)
    return inputs


# upstream client's stop signal: an empty request with the same request id and stop=true
STOP_SIGNAL = {
    "input_ids": (np.zeros((1, 1), dtype=np.int32), "INT32"),
    "input_lengths": (0, "INT32"),
    "request_output_len": (0, "INT32"),
    "stop": (True, "BOOL"),
}


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
        self._local = threading.local()

    # -- connections (one per thread) --------------------------------------------------------
    def grpc(self) -> grpcclient.InferenceServerClient:
        if getattr(self._local, "grpc", None) is None:
            self._local.grpc = grpcclient.InferenceServerClient(self.endpoints.grpc)
        return self._local.grpc

    def http(self) -> httpclient.InferenceServerClient:
        if getattr(self._local, "http", None) is None:
            self._local.http = httpclient.InferenceServerClient(self.endpoints.http, network_timeout=self.timeout_s)
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
        return self.grpc().get_model_metadata(model or self.ensemble, as_json=True)

    def model_config(self, model: str | None = None) -> dict:
        return self.grpc().get_model_config(model or self.ensemble, as_json=True)["config"]

    @cached_property
    def decoupled(self) -> bool:
        """Whether tensorrt_llm (and so the ensemble) answers through streams only."""
        return bool(self.model_config(self.core_model).get("model_transaction_policy", {}).get("decoupled", False))

    @property
    def protocols(self) -> tuple[str, ...]:
        """The request protocols this deployment accepts for non-streamed requests."""
        return ("grpc", "generate") if self.decoupled else PROTOCOLS

    def executed_batch_sizes(self, model: str | None = None) -> dict[int, int]:
        """How many executions the server ran per batch size (Triton's inference statistics)."""
        stats = self.grpc().get_inference_statistics(model or self.core_model, as_json=True)["model_stats"]
        sizes: dict[int, int] = {}
        for version in stats:
            for entry in version.get("batch_stats", []):
                count = int(entry.get("compute_infer", {}).get("count", 0))
                sizes[int(entry["batch_size"])] = sizes.get(int(entry["batch_size"]), 0) + count
        return sizes

    def batch_sizes_since(self, before: dict[int, int], model: str | None = None) -> dict[int, int]:
        """Executions per batch size since `before` (an earlier executed_batch_sizes()), sizes that ran only."""
        after = self.executed_batch_sizes(model)
        return {size: after[size] - before.get(size, 0) for size in sorted(after) if after[size] > before.get(size, 0)}

    def metrics(self) -> str:
        """The server's Prometheus metrics text."""
        with urllib.request.urlopen(f"http://{self.endpoints.metrics}/metrics", timeout=10) as resp:  # noqa: S310
            return resp.read().decode()

    # -- the ensemble ------------------------------------------------------------------------
    def generate(self, text: str | bytes, max_tokens: int, *, protocol: str = "grpc", **options) -> Generation:
        """One non-streamed request to the ensemble; `options` as `ensemble_inputs`."""
        if protocol not in PROTOCOLS:
            raise ValueError(f"protocol must be one of {PROTOCOLS}, not {protocol!r}")
        inputs = ensemble_inputs(text, max_tokens, **options)
        start = time.perf_counter()
        if protocol == "generate":
            body = self._post_generate(inputs)
            text_out = body["text_output"]
            result = Generation(text=text_out[0] if isinstance(text_out, list) else text_out,
                                cum_log_prob=_first(body.get("cum_log_probs")), protocol=protocol, raw=body)  # fmt: skip
        else:
            outputs = self.request(self.ensemble, inputs, protocol)
            result = Generation(
                text=outputs["text_output"].reshape(-1)[0].decode("utf-8"),
                cum_log_prob=float(outputs["cum_log_probs"].reshape(-1)[0]),
                output_log_probs=outputs["output_log_probs"].reshape(-1).tolist(),
                protocol=protocol,
                raw=outputs,
            )
        result.latency_s = time.perf_counter() - start
        return result

    def stream(self, text: str | bytes, max_tokens: int, *, protocol: str = "grpc", **options) -> StreamResult:
        """The ensemble with stream=true; one event per response, text pieces in order."""
        if protocol not in STREAM_PROTOCOLS:
            raise ValueError(f"protocol must be one of {STREAM_PROTOCOLS}, not {protocol!r}")
        inputs = ensemble_inputs(text, max_tokens, stream=True, **options)
        try:
            if protocol == "sse":
                url = f"http://{self.endpoints.http}/v2/models/{self.ensemble}/generate_stream"
                return sse_stream(url, _json_body(inputs), self.timeout_s)
            return grpc_stream(self.endpoints.grpc, self.ensemble, _tensors(grpcclient, inputs), timeout_s=self.timeout_s)
        except StreamError as exc:
            raise GenerationError(str(exc)) from None

    # -- the tensorrt_llm model --------------------------------------------------------------
    def generate_ids(self, input_ids: Sequence[int], max_tokens: int, *, protocol: str = "grpc", **options) -> Generation:
        """One non-streamed request to tensorrt_llm; `options` as `core_inputs`."""
        start = time.perf_counter()
        outputs = self.request(self.core_model, core_inputs(input_ids, max_tokens, **options), protocol)
        length = int(outputs["sequence_length"].reshape(-1)[0])
        ids = outputs["output_ids"].reshape(-1)[:length].tolist()
        return Generation(
            text=self.decode(ids) if self.decode else None,
            token_ids=ids,
            sequence_length=length,
            cum_log_prob=float(outputs["cum_log_probs"].reshape(-1)[0]),
            output_log_probs=outputs["output_log_probs"].reshape(-1).tolist(),
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
        inputs = core_inputs(input_ids, max_tokens, streaming=streaming, **options)
        if stop_after_s is not None and not request_id:
            raise ValueError("stop_after_s needs a request_id: the stop signal names the request it stops")
        try:
            return grpc_stream(
                self.endpoints.grpc,
                self.core_model,
                _tensors(grpcclient, inputs),
                request_id=request_id,
                stop_inputs=_tensors(grpcclient, STOP_SIGNAL),
                stop_after_s=stop_after_s,
                cancel_after_s=cancel_after_s,
                timeout_s=self.timeout_s,
            )
        except StreamError as exc:
            raise GenerationError(str(exc)) from None

    def send_stop(self, request_id: str) -> StreamResult:
        """Upstream's stop signal for `request_id`, alone on its own stream; its answer is one empty final response."""
        try:
            return grpc_stream(self.endpoints.grpc, self.core_model, _tensors(grpcclient, STOP_SIGNAL),
                               request_id=request_id, timeout_s=self.timeout_s)  # fmt: skip
        except StreamError as exc:
            raise GenerationError(str(exc)) from None

    def generate_many(self, prompts: Sequence, max_tokens: int, concurrency: int | None = None,
                      call: Callable[..., Generation] | None = None, **kwargs) -> list[Generation]:  # fmt: skip
        """Send every prompt at once (up to `concurrency` in flight); results in prompt order."""
        call = call or self.generate
        workers = concurrency or len(prompts)
        barrier = threading.Barrier(min(workers, len(prompts)))

        def one(prompt):
            try:
                barrier.wait(timeout=30)  # release the first wave together so they meet in the server
            except threading.BrokenBarrierError:
                pass
            return call(prompt, max_tokens, **kwargs)

        with ThreadPoolExecutor(max_workers=workers) as pool:
            return list(pool.map(one, prompts))

    # -- transport -------------------------------------------------------------------------------
    def request(self, model: str, inputs: dict, protocol: str = "grpc") -> dict[str, np.ndarray]:
        """One request, one answer: unary infer, or a gRPC stream where the model is decoupled."""
        if protocol not in ("grpc", "http"):
            raise ValueError(f"protocol must be 'grpc' or 'http' here, not {protocol!r}")
        if self.decoupled:
            if protocol == "http":
                raise GenerationError(f"{model}: HTTP infer cannot call a decoupled model; use gRPC or HTTP generate")
            try:
                result = grpc_stream(self.endpoints.grpc, model, _tensors(grpcclient, inputs), timeout_s=self.timeout_s)
            except StreamError as exc:
                raise GenerationError(str(exc)) from None
            events = result.content_events
            if len(events) != 1:
                raise GenerationError(f"{model}: expected one response to a non-streamed request, got {len(events)}")
            return events[0].outputs
        module = grpcclient if protocol == "grpc" else httpclient
        try:
            if protocol == "grpc":
                result = self.grpc().infer(model, _tensors(module, inputs), client_timeout=self.timeout_s)
                names = [o["name"] for o in result.get_response(as_json=True)["outputs"]]
            else:
                result = self.http().infer(model, _tensors(module, inputs))
                names = [o["name"] for o in result.get_response()["outputs"]]
        except InferenceServerException as exc:
            raise GenerationError(f"{model}: {exc.message()}") from None
        return {name: result.as_numpy(name) for name in names}

    def _post_generate(self, inputs: dict) -> dict:
        url = f"http://{self.endpoints.http}/v2/models/{self.ensemble}/generate"
        request = urllib.request.Request(
            url, data=json.dumps(_json_body(inputs)).encode(), headers={"Content-Type": "application/json"}
        )
        try:
            with urllib.request.urlopen(request, timeout=self.timeout_s) as resp:  # noqa: S310 (loopback URL)
                return json.loads(resp.read())
        except urllib.error.HTTPError as exc:
            detail = exc.read().decode("utf-8", errors="replace")
            try:
                detail = json.loads(detail).get("error", detail)
            except json.JSONDecodeError:
                pass
            raise GenerationError(f"{self.ensemble} generate: HTTP {exc.code}: {detail}") from None


def _bytes(text: str | bytes) -> bytes:
    return text if isinstance(text, bytes) else text.encode("utf-8")


def _first(value):
    while isinstance(value, list):
        value = value[0] if value else None
    return value


def _sampling_items(sampling: Sampling | None):
    if sampling is None:
        return []
    return [(name, getattr(sampling, name)) for name in _SAMPLING_INPUTS if getattr(sampling, name) is not None]


def _batched(value, dtype: str) -> np.ndarray:
    """A request of batch size 1: scalars -> [1, 1], lists -> [1, N], arrays get a batch dimension."""
    if isinstance(value, np.ndarray):
        return value if value.ndim >= 2 else value.reshape(1, -1)
    if isinstance(value, list):
        return np.array([value], dtype=_NP[dtype])
    return np.array([[value]], dtype=_NP[dtype])


def _tensors(module, inputs: dict) -> list:
    tensors = []
    for name, (value, dtype) in inputs.items():
        array = _batched(value, dtype)
        tensor = module.InferInput(name, list(array.shape), dtype)
        tensor.set_data_from_numpy(array)
        tensors.append(tensor)
    return tensors


def _json_body(inputs: dict) -> dict:
    """Inputs for HTTP generate: JSON values, byte strings as text."""
    body = {}
    for name, (value, dtype) in inputs.items():
        if dtype == "BYTES":
            value = (
                [v.decode("utf-8", errors="surrogateescape") for v in value]
                if isinstance(value, list)
                else value.decode("utf-8", errors="surrogateescape")
            )
        body[name] = value
    return body
