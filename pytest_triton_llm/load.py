"""The one load engine (asyncio): requests as tensor inputs (tensor_contract's encoders) sent to one model
over gRPC streams or HTTP, in a closed loop (N clients, each sends when answered, optionally ramped) or an
open loop (Poisson or constant arrivals), each timed per response.

- gRPC: one bidirectional ModelStreamInfer stream per request with Triton's empty final response
  enabled, so streamed tokens give TTFT and inter-token latency; works for decoupled models and others;
- HTTP: `infer` (v2 JSON tensors), `generate` (JSON body) or `generate_stream` (server-sent events).

The perf suite measures with it, the batching suite compares batching modes with it, and
LLMClient.generate_many sends concurrent requests through it.
"""

from __future__ import annotations

import asyncio
import struct
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Sequence

import numpy as np

from .endpoints import Endpoints
from .streaming import StreamError, sse_payload
from .tensor_contract import Inputs, Unbatched, batched, returned_token_count

HTTP_PROTOCOLS = ("infer", "generate", "generate_stream")


@dataclass(frozen=True)
class Target:
    endpoints: Endpoints  # the server (addresses, TLS, headers)
    model: str = "tensorrt_llm"
    protocol: str = "grpc"  # grpc | infer | generate | generate_stream

    def __post_init__(self):
        if self.protocol not in ("grpc", *HTTP_PROTOCOLS):
            raise ValueError(f"protocol must be grpc or one of {HTTP_PROTOCOLS}, not {self.protocol!r}")


@dataclass
class RequestRecord:
    index: int  # the request's position in what was sent
    sent: float  # perf_counter seconds
    streamed: bool = False  # asked for token-by-token responses: TTFT and ITL are measured
    token_times: list[float] = field(default_factory=list)  # arrival of each response that carried tokens
    tokens: int = 0
    done: float | None = None
    error: str | None = None
    responses: list[dict] = field(default_factory=list)  # each response's outputs, when kept

    @property
    def latency_s(self) -> float:
        assert self.done is not None, "a request still waiting has no latency"
        return self.done - self.sent

    def add(self, outputs: dict, keep: bool) -> None:
        """A response arrived: its tokens (sequence_length; a text_output without it counts as one)."""
        now = time.perf_counter()
        tokens = returned_token_count(outputs) or (1 if "text_output" in outputs else 0)
        if tokens:
            self.tokens += tokens
            self.token_times.append(now)
        if keep and outputs:
            self.responses.append(outputs)


def _streamed(inputs: Inputs) -> bool:
    return any(name in ("streaming", "stream") and bool(value) for name, (value, _) in inputs.items())


def _raw(array: np.ndarray, dtype: str) -> bytes:
    """Triton's raw tensor encoding: BYTES elements are each prefixed with their length."""
    if dtype != "BYTES":
        return array.tobytes()
    return b"".join(struct.pack("<I", len(item)) + item for item in array.reshape(-1))


_FROM_TRITON = {
    "INT32": np.int32,
    "INT64": np.int64,
    "UINT64": np.uint64,
    "FP16": np.float16,
    "FP32": np.float32,
    "BOOL": np.bool_,
    "UINT32": np.uint32,
    "INT8": np.int8,
    "UINT8": np.uint8,
}


def _decode(datatype: str, shape, raw: bytes) -> np.ndarray:
    if datatype == "BYTES":
        items, offset = [], 0
        while offset < len(raw):
            (size,) = struct.unpack_from("<I", raw, offset)
            items.append(raw[offset + 4 : offset + 4 + size])
            offset += 4 + size
        return np.array(items, dtype=object).reshape(list(shape))
    return np.frombuffer(raw, dtype=_FROM_TRITON[datatype]).reshape(list(shape))


class _GrpcSender:
    def __init__(self, target: Target, keep: bool):
        import grpc
        from tritonclient.grpc import service_pb2, service_pb2_grpc

        self.target, self.keep, self.pb = target, keep, service_pb2
        options = [("grpc.max_receive_message_length", -1)]
        endpoints = target.endpoints
        if endpoints.grpc_tls:
            certificates = Path(endpoints.ca_file).read_bytes() if endpoints.ca_file else None
            credentials = grpc.ssl_channel_credentials(root_certificates=certificates)
            self.channel = grpc.aio.secure_channel(endpoints.grpc, credentials, options=options)
        else:
            self.channel = grpc.aio.insecure_channel(endpoints.grpc, options=options)
        self.metadata = endpoints.grpc_metadata()
        self.stub = service_pb2_grpc.GRPCInferenceServiceStub(self.channel)

    def _message(self, index: int, inputs: Inputs):
        message = self.pb.ModelInferRequest(model_name=self.target.model, id=f"load-{index}")
        for name, (value, dtype) in inputs.items():
            array = batched(value, dtype)
            tensor = message.inputs.add(name=name, datatype=dtype)
            tensor.shape.extend(array.shape)
            message.raw_input_contents.append(_raw(array, dtype))
        message.parameters["triton_enable_empty_final_response"].bool_param = True  # tells us the request ended
        return message

    async def send(self, index: int, inputs: Inputs) -> RequestRecord:
        record = RequestRecord(index, time.perf_counter(), streamed=_streamed(inputs))

        async def requests():
            yield self._message(index, inputs)

        try:
            async for response in self.stub.ModelStreamInfer(requests(), metadata=self.metadata):
                if response.error_message:
                    record.error = response.error_message
                    break
                infer = response.infer_response
                outputs = {
                    o.name: _decode(o.datatype, o.shape, raw)
                    for o, raw in zip(infer.outputs, infer.raw_output_contents, strict=True)
                }
                record.add(outputs, self.keep)
                if infer.parameters["triton_final_response"].bool_param:
                    break
        except Exception as exc:  # transport errors count as failed requests
            record.error = f"{type(exc).__name__}: {exc}"
        record.done = time.perf_counter()
        return record

    async def close(self) -> None:
        await self.channel.close()


def json_body(inputs: Inputs) -> dict:
    """Inputs as HTTP generate's JSON body: one value per input, byte strings as text."""
    body = {}
    for name, (value, dtype) in inputs.items():
        value = batched(value, dtype) if isinstance(value, Unbatched) else value
        if isinstance(value, np.ndarray):
            value = value.reshape(-1).tolist() if value.size != 1 else value.reshape(-1).tolist()[0]
        if dtype == "BYTES":
            value = (
                [v.decode("utf-8", errors="surrogateescape") for v in value]
                if isinstance(value, list)
                else value.decode("utf-8", errors="surrogateescape")
            )
        body[name] = value
    return body


class _HttpSender:
    def __init__(self, target: Target, keep: bool):
        import aiohttp

        self.target, self.keep = target, keep
        endpoints = target.endpoints
        connector = aiohttp.TCPConnector(ssl=endpoints.ssl_context() or True) if endpoints.http_tls else None
        self.session = aiohttp.ClientSession(
            timeout=aiohttp.ClientTimeout(total=None), headers=endpoints.header_dict(), connector=connector
        )
        self.base = endpoints.http_url(f"/v2/models/{target.model}")

    async def send(self, index: int, inputs: Inputs) -> RequestRecord:
        record = RequestRecord(index, time.perf_counter(), streamed=_streamed(inputs))
        try:
            if self.target.protocol == "generate_stream":  # one server-sent event per streamed response
                async with self.session.post(f"{self.base}/generate_stream", json=json_body(inputs)) as resp:
                    async for raw in resp.content:
                        event = sse_payload(raw)
                        if event is not None:
                            record.add(event, self.keep)
            elif self.target.protocol == "generate":
                async with self.session.post(f"{self.base}/generate", json=json_body(inputs)) as resp:
                    payload = await resp.json(content_type=None)
                if "error" in payload:
                    raise StreamError(payload["error"])
                record.add(payload, self.keep)
            else:
                tensors = []
                for name, (value, dtype) in inputs.items():
                    array = batched(value, dtype)
                    data = [v.decode() for v in array.reshape(-1)] if dtype == "BYTES" else array.reshape(-1).tolist()
                    tensors.append({"name": name, "shape": list(array.shape), "datatype": dtype, "data": data})
                async with self.session.post(f"{self.base}/infer", json={"inputs": tensors}) as resp:
                    payload = await resp.json(content_type=None)
                if "error" in payload:
                    raise StreamError(payload["error"])
                record.add({o["name"]: np.asarray(o["data"]).reshape(o["shape"]) for o in payload["outputs"]}, self.keep)
        except Exception as exc:
            record.error = str(exc) if isinstance(exc, StreamError) else f"{type(exc).__name__}: {exc}"
        record.done = time.perf_counter()
        return record

    async def close(self) -> None:
        await self.session.close()


async def _closed_loop(
    send, requests: Sequence[Inputs], concurrency: int, deadline: float | None, stagger_s: float
) -> list[RequestRecord]:
    pending = iter(enumerate(requests))
    records: list[RequestRecord] = []

    async def client(number: int):
        await asyncio.sleep(number * stagger_s)  # a ramp: clients do not start in lockstep
        for index, inputs in pending:  # the shared iterator hands each request to one client
            if deadline is not None and time.perf_counter() >= deadline:
                return
            records.append(await send(index, inputs))

    await asyncio.gather(*(client(i) for i in range(concurrency)))
    return records


async def _open_loop(
    send, requests: Sequence[Inputs], rate: float, arrival: str, seed: int, deadline: float | None
) -> list[RequestRecord]:
    rng = np.random.default_rng(seed)
    tasks, next_at = [], time.perf_counter()
    for index, inputs in enumerate(requests):
        next_at += rng.exponential(1.0 / rate) if arrival == "poisson" else 1.0 / rate
        if deadline is not None and next_at >= deadline:
            break
        await asyncio.sleep(max(0.0, next_at - time.perf_counter()))
        tasks.append(asyncio.create_task(send(index, inputs)))
    return list(await asyncio.gather(*tasks))


async def _run(target, requests, warmup, concurrency, request_rate, arrival, seed, duration_s, stagger_s, keep):
    sender = _GrpcSender(target, keep) if target.protocol == "grpc" else _HttpSender(target, keep)
    try:
        if warmup:
            await _closed_loop(sender.send, warmup, min(len(warmup), concurrency or 1), None, 0.0)
        start = time.perf_counter()
        deadline = start + duration_s if duration_s else None
        if concurrency:
            records = await _closed_loop(sender.send, requests, concurrency, deadline, stagger_s)
        else:
            records = await _open_loop(sender.send, requests, request_rate, arrival, seed, deadline)
        end = max((r.done for r in records), default=start)
        return records, end - start
    finally:
        await sender.close()


def run_load(
    target: Target,
    requests: Sequence[Inputs],
    warmup: Sequence[Inputs] = (),
    *,
    concurrency: int | None = None,
    request_rate: float | None = None,
    arrival: str = "poisson",
    seed: int = 0,
    duration_s: float | None = None,
    stagger_s: float = 0.0,
    keep_outputs: bool = False,
) -> tuple[list[RequestRecord], float]:
    """Send `warmup` (unmeasured), then `requests` at one load point; -> (records, measured seconds).

    stagger_s: closed-loop client i sends its first request i * stagger_s after the start.
    keep_outputs: records keep every response's outputs (for callers that read the answers)."""
    if (concurrency is None) == (request_rate is None):
        raise ValueError("give exactly one of concurrency or request_rate")
    return asyncio.run(
        _run(target, requests, warmup, concurrency, request_rate, arrival, seed, duration_s, stagger_s, keep_outputs)
    )
