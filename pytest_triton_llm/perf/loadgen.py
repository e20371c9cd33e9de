"""An asyncio load generator for the tensorrt_llm model (token ids in, token counts out, like
upstream's benchmark_core_model), over gRPC streams or HTTP; or for any model with the ensemble's
text contract (text_input, max_tokens -> text_output), where each response counts as one token.

- gRPC: one bidirectional ModelStreamInfer stream per request, with Triton's empty final
  response enabled, so streamed tokens give TTFT and inter-token latency;
- HTTP: unary infer for non-decoupled models, generate_stream (SSE) for decoupled ones;
- closed loop (N clients, each sends when answered) or open loop (Poisson or constant arrivals);
- warm-up requests first, then a request count (optionally cut off by a duration).
"""

from __future__ import annotations

import asyncio
import json
import struct
import time
from dataclasses import dataclass

import numpy as np

from .metrics import RequestRecord
from .workload import PerfRequest


@dataclass(frozen=True)
class Target:
    grpc_url: str  # host:port
    http_url: str  # host:port
    decoupled: bool  # answers through streams only (in-flight batching)
    model: str = "tensorrt_llm"
    protocol: str = "grpc"  # grpc | http
    fixed_output: bool = True  # end_id -1 and min_length = max_tokens: every request yields max_tokens
    contract: str = "tensorrt_llm"  # tensorrt_llm (token ids) | text (text_input, max_tokens)

    @property
    def streaming(self) -> bool:
        return self.decoupled  # streamed token by token wherever the model can


def _inputs(target: Target, request: PerfRequest) -> list[tuple[str, np.ndarray, str]]:
    if target.contract == "text":
        tensors = [
            ("text_input", np.asarray([[request.text.encode()]], dtype=object), "BYTES"),
            ("max_tokens", np.asarray([[request.max_tokens]], dtype=np.int32), "INT32"),
        ]
        if target.streaming:
            tensors.append(("stream", np.asarray([[True]]), "BOOL"))
        return tensors
    tensors = [
        ("input_ids", np.asarray([request.input_ids], dtype=np.int32), "INT32"),
        ("input_lengths", np.asarray([[len(request.input_ids)]], dtype=np.int32), "INT32"),
        ("request_output_len", np.asarray([[request.max_tokens]], dtype=np.int32), "INT32"),
    ]
    if target.fixed_output:
        tensors += [("end_id", np.asarray([[-1]], dtype=np.int32), "INT32"),
                    ("min_length", np.asarray([[request.max_tokens]], dtype=np.int32), "INT32")]  # fmt: skip
    if target.streaming:
        tensors.append(("streaming", np.asarray([[True]]), "BOOL"))
    return tensors


class _GrpcSender:
    def __init__(self, target: Target):
        import grpc
        from tritonclient.grpc import service_pb2, service_pb2_grpc

        self.target, self.pb = target, service_pb2
        self.channel = grpc.aio.insecure_channel(target.grpc_url)
        self.stub = service_pb2_grpc.GRPCInferenceServiceStub(self.channel)
        self.counter = 0

    def _request(self, request: PerfRequest):
        self.counter += 1
        message = self.pb.ModelInferRequest(model_name=self.target.model, id=f"load-{self.counter}")
        for name, array, dtype in _inputs(self.target, request):
            tensor = message.inputs.add(name=name, datatype=dtype)
            tensor.shape.extend(array.shape)
            message.raw_input_contents.append(_raw(array, dtype))
        message.parameters["triton_enable_empty_final_response"].bool_param = True  # tells us the request ended
        return message

    async def send(self, request: PerfRequest) -> RequestRecord:
        record = RequestRecord(sent=time.perf_counter(), streamed=self.target.streaming)

        async def requests():
            yield self._request(request)

        try:
            async for response in self.stub.ModelStreamInfer(requests()):
                now = time.perf_counter()
                if response.error_message:
                    record.error = response.error_message
                    break
                infer = response.infer_response
                names = [o.name for o in infer.outputs]
                tokens = 0
                if "sequence_length" in names:
                    tokens = int(np.frombuffer(infer.raw_output_contents[names.index("sequence_length")], dtype=np.int32).sum())
                elif "text_output" in names:
                    tokens = 1  # the text contract: one response, one token (streamed) or one answer
                if tokens:
                    record.tokens += tokens
                    record.token_times.append(now)
                if infer.parameters["triton_final_response"].bool_param:
                    break
        except Exception as exc:  # transport errors count as failed requests
            record.error = f"{type(exc).__name__}: {exc}"
        record.done = time.perf_counter()
        return record

    async def close(self) -> None:
        await self.channel.close()


class _HttpSender:
    def __init__(self, target: Target):
        import aiohttp

        self.target = target
        self.session = aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=None))

    async def send(self, request: PerfRequest) -> RequestRecord:
        record = RequestRecord(sent=time.perf_counter(), streamed=self.target.streaming)
        tensors = _inputs(self.target, request)
        try:
            if self.target.contract == "text":  # HTTP generate, as OpenAI-style tools call a server
                url = f"http://{self.target.http_url}/v2/models/{self.target.model}/generate"
                async with self.session.post(url, json={"text_input": request.text, "max_tokens": request.max_tokens}) as resp:
                    payload = await resp.json(content_type=None)
                if "error" in payload:
                    record.error = payload["error"]
                else:
                    record.tokens = 1
                    record.token_times.append(time.perf_counter())
            elif self.target.decoupled:  # generate_stream: one SSE event per streamed response
                body = {name: array.reshape(-1).tolist() if name == "input_ids" else array.item() for name, array, _ in tensors}
                url = f"http://{self.target.http_url}/v2/models/{self.target.model}/generate_stream"
                async with self.session.post(url, json=body) as resp:
                    async for raw in resp.content:
                        line = raw.decode().strip()
                        if not line.startswith("data:"):
                            continue
                        event = json.loads(line[5:])
                        if "error" in event:
                            record.error = event["error"]
                            break
                        tokens = int(np.sum(event.get("sequence_length", 0)))
                        if tokens:
                            record.tokens += tokens
                            record.token_times.append(time.perf_counter())
            else:
                inputs = [
                    {"name": n, "shape": list(a.shape), "datatype": d, "data": a.reshape(-1).tolist()} for n, a, d in tensors
                ]
                url = f"http://{self.target.http_url}/v2/models/{self.target.model}/infer"
                async with self.session.post(url, json={"inputs": inputs}) as resp:
                    payload = await resp.json(content_type=None)
                if "error" in payload:
                    record.error = payload["error"]
                else:
                    lengths = next(o for o in payload["outputs"] if o["name"] == "sequence_length")
                    record.tokens = int(np.sum(lengths["data"]))
                    record.token_times.append(time.perf_counter())
        except Exception as exc:
            record.error = f"{type(exc).__name__}: {exc}"
        record.done = time.perf_counter()
        return record

    async def close(self) -> None:
        await self.session.close()


def _raw(array: np.ndarray, dtype: str) -> bytes:
    """Triton's raw tensor encoding: BYTES elements are each prefixed with their length."""
    if dtype != "BYTES":
        return array.tobytes()
    return b"".join(struct.pack("<I", len(item)) + item for item in array.reshape(-1))


async def _closed_loop(send, requests: list[PerfRequest], concurrency: int, deadline: float | None) -> list[RequestRecord]:
    pending = iter(requests)
    records: list[RequestRecord] = []

    async def client():
        for request in pending:  # the shared iterator hands each request to one client
            if deadline is not None and time.perf_counter() >= deadline:
                return
            records.append(await send(request))

    await asyncio.gather(*(client() for _ in range(concurrency)))
    return records


async def _open_loop(send, requests: list[PerfRequest], rate: float, arrival: str, seed: int,
                     deadline: float | None) -> list[RequestRecord]:  # fmt: skip
    rng = np.random.default_rng(seed)
    tasks, next_at = [], time.perf_counter()
    for request in requests:
        next_at += rng.exponential(1.0 / rate) if arrival == "poisson" else 1.0 / rate
        if deadline is not None and next_at >= deadline:
            break
        await asyncio.sleep(max(0.0, next_at - time.perf_counter()))
        tasks.append(asyncio.create_task(send(request)))
    return list(await asyncio.gather(*tasks))


async def _run(target, requests, warmup, concurrency, request_rate, arrival, seed, duration_s):
    sender = _GrpcSender(target) if target.protocol == "grpc" else _HttpSender(target)
    try:
        if warmup:
            await _closed_loop(sender.send, warmup, min(len(warmup), concurrency or 1), None)
        start = time.perf_counter()
        deadline = start + duration_s if duration_s else None
        if concurrency:
            records = await _closed_loop(sender.send, requests, concurrency, deadline)
        else:
            records = await _open_loop(sender.send, requests, request_rate, arrival, seed, deadline)
        end = max((r.done for r in records), default=start)
        return records, end - start
    finally:
        await sender.close()


def run_load_point(target: Target, requests: list[PerfRequest], warmup: list[PerfRequest], *,
                   concurrency: int | None = None, request_rate: float | None = None, arrival: str = "poisson",
                   seed: int = 0, duration_s: float | None = None) -> tuple[list[RequestRecord], float]:  # fmt: skip
    """Send `warmup` (unmeasured), then `requests` at the load point; -> (records, measured seconds)."""
    if (concurrency is None) == (request_rate is None):
        raise ValueError("give exactly one of concurrency or request_rate")
    return asyncio.run(_run(target, requests, warmup, concurrency, request_rate, arrival, seed, duration_s))
