"""The one load engine (asyncio): requests as tensor inputs (tensor_contract's encoders) sent to one model
over gRPC streams or HTTP, in a closed loop (N clients, each sends when answered, optionally ramped) or an
open loop (Poisson or constant arrivals), each timed per response.

- gRPC: one bidirectional ModelStreamInfer stream per request with Triton's empty final response
  enabled, so streamed tokens give TTFT and inter-token latency; works for decoupled models and others;
- HTTP: `infer` (v2 JSON tensors), `generate` (JSON body) or `generate_stream` (server-sent events);
- an OpenAI /v1 endpoint: v1_load.V1Target, JSON bodies streamed over server-sent events.

The perf suite measures with it, the batching suite compares batching modes with it, and
LLMClient.generate_many sends concurrent requests through it.
"""

from __future__ import annotations

import asyncio
import struct
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Protocol, Sequence

import numpy as np

from ..host.endpoints import Endpoints
from .streaming import StreamError, sse_payload
from .llmapi_contract import output_number
from .tensor_contract import Inputs, Unbatched, batched, returned_token_count

DRAFTED, ACCEPTED = "total_draft_tokens", "total_accepted_draft_tokens"
ALWAYS_READ = ("sequence_length", DRAFTED, ACCEPTED)

HTTP_PROTOCOLS = ("infer", "generate", "generate_stream")


@dataclass(frozen=True)
class Target:
    endpoints: Endpoints  # the server (addresses, TLS, headers)
    model: str = "tensorrt_llm"
    protocol: str = "grpc"  # grpc | infer | generate | generate_stream
    channels: int = 1  # gRPC: connections per load process, requests dealt to them in turn
    # a request unanswered this long is recorded as an error (None: a load point waits for every answer); checks that
    # send a batch set it, so that a stalled or crashed server fails them instead of hanging the session
    request_timeout_s: float | None = None

    def __post_init__(self):
        if self.protocol not in ("grpc", *HTTP_PROTOCOLS):
            raise ValueError(f"protocol must be grpc or one of {HTTP_PROTOCOLS}, not {self.protocol!r}")
        if self.channels < 1:
            raise ValueError(f"channels must be >= 1, not {self.channels}")

    def sender(self, keep: bool):
        """What sends this target's requests in one load process (its own connections)."""
        return _GrpcSender(self, keep) if self.protocol == "grpc" else _HttpSender(self, keep)


class Sender(Protocol):
    async def send(self, index: int, request) -> RequestRecord: ...

    async def close(self) -> None: ...


class LoadTarget(Protocol):
    """Where a load point's requests go (Triton's Target, or v1_load.V1Target): picklable, for the load processes."""

    def sender(self, keep: bool) -> Sender: ...


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
    worker: int = 0  # the load process that sent it
    server_sent: list[float] = field(default_factory=list)  # a stamping server's send times (CLOCK_MONOTONIC s)
    # speculative decoding's counts where the request asked for perf metrics (the llmapi model's, with its last response)
    drafted: int | None = None
    accepted: int | None = None

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
        if outputs.get(DRAFTED) is not None:  # totals over the request so far: the last response's are its own
            self.drafted, self.accepted = (int(output_number(outputs, n) or 0) for n in (DRAFTED, ACCEPTED))
        if keep and outputs:
            self.responses.append(outputs)


class LoadRecords(list):
    """A load point's RequestRecords, with what sending them cost during the measured part: the CPU seconds of the
    load processes (their event loops and gRPC's threads) and of their event-loop threads alone (a loop busy all
    the time is the limit: responses wait for it), to tell a client-bound measurement."""

    def __init__(self, records=(), client_cpu_s: float = 0.0, workers: int = 1, loop_cpu_s: float = 0.0):
        super().__init__(records)
        self.client_cpu_s, self.workers, self.loop_cpu_s = client_cpu_s, workers, loop_cpu_s


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
        # a pool of its own per channel: channels to one address otherwise share one connection
        options = [("grpc.max_receive_message_length", -1), ("grpc.use_local_subchannel_pool", 1)]
        endpoints = target.endpoints
        credentials = None
        if endpoints.grpc_tls:
            certificates = Path(endpoints.ca_file).read_bytes() if endpoints.ca_file else None
            credentials = grpc.ssl_channel_credentials(root_certificates=certificates)
        self.channels = [
            grpc.aio.secure_channel(endpoints.grpc, credentials, options=options)
            if credentials is not None
            else grpc.aio.insecure_channel(endpoints.grpc, options=options)
            for _ in range(target.channels)
        ]
        self.metadata = endpoints.grpc_metadata()
        self.stubs = [service_pb2_grpc.GRPCInferenceServiceStub(channel) for channel in self.channels]

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
            stub = self.stubs[index % len(self.stubs)]
            async for response in stub.ModelStreamInfer(requests(), metadata=self.metadata):
                if response.error_message:
                    record.error = response.error_message
                    break
                infer = response.infer_response
                # without keep only the token count and draft counts are read: a streamed response costs less
                outputs = {
                    o.name: _decode(o.datatype, o.shape, raw) if self.keep or o.name in ALWAYS_READ else None
                    for o, raw in zip(infer.outputs, infer.raw_output_contents, strict=True)
                }
                record.add(outputs, self.keep)
                if "sent_ns" in infer.parameters:  # a server that stamps its responses (the benchmarks' stream server)
                    record.server_sent.append(infer.parameters["sent_ns"].int64_param / 1e9)
                if infer.parameters["triton_final_response"].bool_param:
                    break
        except Exception as exc:  # transport errors count as failed requests
            record.error = f"{type(exc).__name__}: {exc}"
        record.done = time.perf_counter()
        return record

    async def close(self) -> None:
        for channel in self.channels:
            await channel.close()


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


class _Queue:
    """The requests of a load point, handed out in order, each to one client (of one process: an iterator)."""

    def __init__(self, count: int):
        self.count, self.next = count, 0

    def take(self) -> int | None:
        if self.next >= self.count:
            return None
        self.next += 1
        return self.next - 1


class _SharedQueue(_Queue):
    """The same over several processes: one counter in shared memory."""

    def __init__(self, count: int, counter):
        self.count, self.counter = count, counter

    def take(self) -> int | None:
        with self.counter.get_lock():
            index = self.counter.value
            if index >= self.count:
                return None
            self.counter.value = index + 1
        return index


async def _closed_loop(
    send,
    requests: Sequence[Inputs],
    concurrency: int,
    deadline: float | None,
    stagger_s: float,
    queue: _Queue | None = None,
    clients: Sequence[int] | None = None,
) -> list[RequestRecord]:
    """`concurrency` clients, each sends its next request when answered; `clients`: the numbers of the clients this
    process runs (client i starts i * stagger_s late), `queue`: the requests' hand-out, shared by the processes."""
    queue = queue or _Queue(len(requests))
    records: list[RequestRecord] = []

    async def client(number: int):
        await asyncio.sleep(number * stagger_s)  # a ramp: clients do not start in lockstep
        while (index := queue.take()) is not None:
            if deadline is not None and time.perf_counter() >= deadline:
                return
            records.append(await send(index, requests[index]))

    await asyncio.gather(*(client(i) for i in (range(concurrency) if clients is None else clients)))
    return records


def arrival_offsets(count: int, rate: float, arrival: str, seed: int) -> list[float]:
    """Seconds after the start at which each of `count` open-loop requests is sent: Poisson or constant arrivals."""
    rng = np.random.default_rng(seed)
    gaps = rng.exponential(1.0 / rate, count) if arrival == "poisson" else np.full(count, 1.0 / rate)
    return np.cumsum(gaps).tolist()


async def _open_loop(
    send, requests: Sequence[Inputs], schedule: Sequence[tuple[int, float]], start: float, deadline: float | None
) -> list[RequestRecord]:
    """Send request i at start + its offset, for each (i, offset) of `schedule`, whether or not earlier ones were answered."""
    tasks = []
    for index, offset in schedule:
        if deadline is not None and start + offset >= deadline:
            break
        await asyncio.sleep(max(0.0, start + offset - time.perf_counter()))
        tasks.append(asyncio.create_task(send(index, requests[index])))
    return list(await asyncio.gather(*tasks))


@dataclass(frozen=True)
class _Plan:
    """One load point as one process runs it: which requests and clients are its own."""

    target: LoadTarget
    requests: Sequence[Inputs]
    warmup: Sequence[Inputs]
    concurrency: int | None  # closed loop: all processes' clients together
    clients: Sequence[int] | None  # closed loop: the numbers of this process's clients (None: all)
    schedule: Sequence[tuple[int, float]]  # open loop: (request, offset) this process sends
    duration_s: float | None
    stagger_s: float
    keep: bool


def _bounded(send, timeout_s: float | None):
    """`send`, its request recorded as an error when unanswered after `timeout_s`."""
    if timeout_s is None:
        return send

    async def bounded(index: int, inputs: Inputs) -> RequestRecord:
        began = time.perf_counter()
        try:
            return await asyncio.wait_for(send(index, inputs), timeout_s)
        except asyncio.TimeoutError:
            record = RequestRecord(index, began, streamed=_streamed(inputs))
            record.error, record.done = f"no answer after {timeout_s:.0f} s", time.perf_counter()
            return record

    return bounded


async def _send_point(plan: _Plan, queue: _Queue | None = None, ready=None) -> tuple[LoadRecords, float]:
    """Warm up, then run the load point from now, or (`ready` given) from the start the coordinator of the processes
    names; -> (records with the CPU time spent sending them, start)."""
    sender = plan.target.sender(plan.keep)
    send = _bounded(sender.send, getattr(plan.target, "request_timeout_s", None))
    try:
        if plan.warmup:
            clients = len(plan.clients) if plan.clients is not None else (plan.concurrency or 1)
            await _closed_loop(send, plan.warmup, max(1, min(len(plan.warmup), clients)), None, 0.0)
        if ready is not None:
            start = await asyncio.get_running_loop().run_in_executor(None, ready)
            await asyncio.sleep(max(0.0, start - time.perf_counter()))
        else:
            start = time.perf_counter()
        deadline = start + plan.duration_s if plan.duration_s else None
        cpu, loop_cpu = time.process_time(), time.thread_time()
        if plan.concurrency:
            records = await _closed_loop(send, plan.requests, plan.concurrency, deadline, plan.stagger_s, queue, plan.clients)
        else:
            records = await _open_loop(send, plan.requests, plan.schedule, start, deadline)
        return LoadRecords(records, time.process_time() - cpu, 1, time.thread_time() - loop_cpu), start
    finally:
        await sender.close()


# perf_counter is one clock for every process of the host where it is CLOCK_MONOTONIC (Linux); elsewhere each
# process's times are moved onto the coordinator's clock by the difference of their offsets to the wall clock
_SHARED_CLOCK = time.get_clock_info("perf_counter").implementation == "clock_gettime(CLOCK_MONOTONIC)"


def _clock_offset() -> float:
    return 0.0 if _SHARED_CLOCK else time.time() - time.perf_counter()


def _worker(plan: _Plan, counter, connection, number: int) -> None:
    """A load process: its own event loop and channel; reports ready, runs from the coordinator's start, sends back
    its records on the coordinator's clock."""
    shift = 0.0  # this process's clock minus the coordinator's

    def ready() -> float:
        nonlocal shift
        connection.send(("ready", None))
        start, offset = connection.recv()
        shift = offset - _clock_offset()
        return start + shift

    try:
        records, _ = asyncio.run(_send_point(plan, _SharedQueue(len(plan.requests), counter), ready))
        for record in records:
            record.worker = number
            if shift:
                record.sent -= shift
                record.done = None if record.done is None else record.done - shift
                record.token_times = [t - shift for t in record.token_times]
        connection.send(("records", (list(records), records.client_cpu_s, records.loop_cpu_s)))
    except BaseException as exc:  # said to the coordinator, which fails the load point with it
        connection.send(("error", f"load process {number}: {type(exc).__name__}: {exc}"))
    finally:
        connection.close()


class LoadProcessError(RuntimeError):
    """A load process failed (not a request: the process itself)."""


def _in_processes(plans: list[_Plan]) -> tuple[LoadRecords, float]:
    import multiprocessing

    context = multiprocessing.get_context("spawn")  # gRPC's state must not be forked
    counter = context.Value("q", 0)
    pipes, processes = [], []
    for number, plan in enumerate(plans):
        ours, theirs = context.Pipe()
        process = context.Process(target=_worker, args=(plan, counter, theirs, number), daemon=True)
        process.start()
        theirs.close()
        pipes.append(ours)
        processes.append(process)
    try:

        def receive(pipe, number: int, expected: str):
            try:
                kind, value = pipe.recv()
            except EOFError:
                raise LoadProcessError(
                    f"load process {number} ended without a word (exit {processes[number].exitcode})"
                ) from None
            if kind == "error":
                raise LoadProcessError(value)
            assert kind == expected, f"load process {number} said {kind!r} where {expected!r} was due"
            return value

        for number, pipe in enumerate(pipes):
            receive(pipe, number, "ready")
        start = time.perf_counter() + 0.02  # all processes start at one instant, clear of the go's own delivery
        for pipe in pipes:
            pipe.send((start, _clock_offset()))
        sent = [receive(pipe, number, "records") for number, pipe in enumerate(pipes)]
    finally:
        for process in processes:
            process.join(10)
            if process.is_alive():
                process.kill()
    records = LoadRecords(
        sorted((r for own, _, _ in sent for r in own), key=lambda r: r.index),
        sum(cpu for _, cpu, _ in sent),
        len(plans),
        sum(loop for _, _, loop in sent),
    )
    return records, _measured_s(records, start)


def _measured_s(records: list[RequestRecord], start: float) -> float:
    """A load point's measured seconds: its start to the last request's end."""
    return max((r.done for r in records if r.done is not None), default=start) - start


def run_load(
    target: LoadTarget,
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
    workers: int = 1,
) -> tuple[LoadRecords, float]:
    """Send `warmup` (unmeasured), then `requests` at one load point; -> (records, measured seconds).

    stagger_s: closed-loop client i sends its first request i * stagger_s after the start.
    keep_outputs: records keep every response's outputs (for callers that read the answers).
    workers: processes that send (each its own event loop and channels); 1 sends from this process. Closed-loop
    clients are dealt to them in turn and take requests from one shared queue; open-loop requests keep the one
    arrival schedule, dealt in turn. Every record's times are on this process's perf_counter clock."""
    if (concurrency is None) == (request_rate is None):
        raise ValueError("give exactly one of concurrency or request_rate")
    if workers < 1:
        raise ValueError(f"workers must be >= 1, not {workers}")
    schedule = [] if request_rate is None else list(enumerate(arrival_offsets(len(requests), request_rate, arrival, seed)))
    count = min(workers, concurrency or workers, max(1, len(requests)))
    if count == 1:
        plan = _Plan(target, requests, warmup, concurrency, None, schedule, duration_s, stagger_s, keep_outputs)
        records, start = asyncio.run(_send_point(plan))
        return records, _measured_s(records, start)
    plans = [
        _Plan(
            target,
            requests,
            warmup[number::count],
            concurrency,
            None if concurrency is None else range(number, concurrency, count),
            schedule[number::count],
            duration_s,
            stagger_s,
            keep_outputs,
        )
        for number in range(count)
    ]
    return _in_processes(plans)
