"""A small LLM client over tritonclient, for the TensorRT-LLM ensemble and its tensorrt_llm model.

- `generate(text, ...)`       the ensemble (text in, text out) over gRPC, HTTP infer or HTTP generate
- `generate_ids(ids, ...)`    the tensorrt_llm model directly (token ids in, token ids out), as
                              upstream's inflight_batcher_llm client does
- `generate_many(...)`        N requests in flight at once
"""

from __future__ import annotations

import json
import threading
import time
import urllib.error
import urllib.request
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Callable, Sequence

import numpy as np
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient
from tritonclient.utils import InferenceServerException

from .reference_backend.models.preprocessing.words import pack_word_ids
from .runtimes.server import Endpoints

PROTOCOLS = ("grpc", "http", "generate")


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
_NP = {"INT32": np.int32, "UINT64": np.uint64, "FP32": np.float32, "BOOL": np.bool_, "BYTES": np.object_}


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

    def model_metadata(self, model: str | None = None) -> dict:
        return self.grpc().get_model_metadata(model or self.ensemble, as_json=True)

    def executed_batch_sizes(self, model: str | None = None) -> dict[int, int]:
        """How many executions the server ran per batch size (Triton's inference statistics)."""
        stats = self.grpc().get_inference_statistics(model or self.core_model, as_json=True)["model_stats"]
        sizes: dict[int, int] = {}
        for version in stats:
            for entry in version.get("batch_stats", []):
                count = int(entry.get("compute_infer", {}).get("count", 0))
                sizes[int(entry["batch_size"])] = sizes.get(int(entry["batch_size"]), 0) + count
        return sizes

    def model_config(self, model: str | None = None) -> dict:
        return self.grpc().get_model_config(model or self.ensemble, as_json=True)["config"]

    # -- the ensemble ------------------------------------------------------------------------
    def generate(
        self,
        text: str | bytes,
        max_tokens: int,
        *,
        protocol: str = "grpc",
        end_id: int | None = None,
        pad_id: int | None = None,
        stop_words: Sequence[str] | None = None,
        bad_words: Sequence[str] | None = None,
        sampling: Sampling | None = None,
        return_log_probs: bool = False,
    ) -> Generation:
        if protocol not in PROTOCOLS:
            raise ValueError(f"protocol must be one of {PROTOCOLS}, not {protocol!r}")
        inputs = {"text_input": (_bytes(text), "BYTES"), "max_tokens": (max_tokens, "INT32")}
        if end_id is not None:
            inputs["end_id"] = (end_id, "INT32")
        if pad_id is not None:
            inputs["pad_id"] = (pad_id, "INT32")
        if stop_words is not None:
            inputs["stop_words"] = ([_bytes(w) for w in stop_words], "BYTES")
        if bad_words is not None:
            inputs["bad_words"] = ([_bytes(w) for w in bad_words], "BYTES")
        if return_log_probs:
            inputs["return_log_probs"] = (True, "BOOL")
        for name, value in _sampling_items(sampling):
            inputs[name] = (value, _SAMPLING_INPUTS[name][1])
        start = time.perf_counter()
        if protocol == "generate":
            body = self._post_generate(inputs)
            text_out = body["text_output"]
            cum = body.get("cum_log_probs")
            result = Generation(text=text_out[0] if isinstance(text_out, list) else text_out,
                                cum_log_prob=_first(cum), protocol=protocol, raw=body)  # fmt: skip
        else:
            outputs = self._infer(self.ensemble, inputs, protocol)
            result = Generation(
                text=outputs["text_output"].reshape(-1)[0].decode("utf-8"),
                cum_log_prob=float(outputs["cum_log_probs"].reshape(-1)[0]),
                output_log_probs=outputs["output_log_probs"].reshape(-1).tolist(),
                protocol=protocol,
                raw=outputs,
            )
        result.latency_s = time.perf_counter() - start
        return result

    # -- the tensorrt_llm model --------------------------------------------------------------
    def generate_ids(
        self,
        input_ids: Sequence[int],
        max_tokens: int,
        *,
        protocol: str = "grpc",
        end_id: int | None = None,
        pad_id: int | None = None,
        stop_words_ids: Sequence[Sequence[int]] | None = None,
        bad_words_ids: Sequence[Sequence[int]] | None = None,
        exclude_input_in_output: bool | None = None,
        sampling: Sampling | None = None,
        return_log_probs: bool = False,
    ) -> Generation:
        inputs = {
            "input_ids": (np.asarray([list(input_ids)], dtype=np.int32), "INT32"),
            "input_lengths": (len(input_ids), "INT32"),
            "request_output_len": (max_tokens, "INT32"),
        }
        if end_id is not None:
            inputs["end_id"] = (end_id, "INT32")
        if pad_id is not None:
            inputs["pad_id"] = (pad_id, "INT32")
        if stop_words_ids:
            inputs["stop_words_list"] = (pack_word_ids([list(stop_words_ids)]), "INT32")
        if bad_words_ids:
            inputs["bad_words_list"] = (pack_word_ids([list(bad_words_ids)]), "INT32")
        if exclude_input_in_output is not None:
            inputs["exclude_input_in_output"] = (exclude_input_in_output, "BOOL")
        if return_log_probs:
            inputs["return_log_probs"] = (True, "BOOL")
        for name, value in _sampling_items(sampling):
            core_name, dtype = _SAMPLING_INPUTS[name]
            inputs[core_name] = (value, dtype)
        start = time.perf_counter()
        outputs = self._infer(self.core_model, inputs, protocol)
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
    def _infer(self, model: str, inputs: dict, protocol: str) -> dict[str, np.ndarray]:
        module = grpcclient if protocol == "grpc" else httpclient
        tensors = []
        for name, (value, dtype) in inputs.items():
            array = _batched(value, dtype)
            tensor = module.InferInput(name, list(array.shape), dtype)
            tensor.set_data_from_numpy(array)
            tensors.append(tensor)
        try:
            if protocol == "grpc":
                result = self.grpc().infer(model, tensors, client_timeout=self.timeout_s)
            else:
                result = self.http().infer(model, tensors)
        except InferenceServerException as exc:
            raise GenerationError(f"{model}: {exc.message()}") from None
        names = [
            o["name"] for o in (result.get_response(as_json=True) if protocol == "grpc" else result.get_response())["outputs"]
        ]
        return {name: result.as_numpy(name) for name in names}

    def _post_generate(self, inputs: dict) -> dict:
        body = {}
        for name, (value, dtype) in inputs.items():
            if dtype == "BYTES":
                value = (
                    [v.decode("utf-8", errors="surrogateescape") for v in value]
                    if isinstance(value, list)
                    else value.decode("utf-8", errors="surrogateescape")
                )
            body[name] = value
        url = f"http://{self.endpoints.http}/v2/models/{self.ensemble}/generate"
        request = urllib.request.Request(url, data=json.dumps(body).encode(), headers={"Content-Type": "application/json"})
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
