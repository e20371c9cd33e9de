"""A KServe gRPC server that only streams: the benchmark fixture that outruns the load generator.

It answers ModelStreamInfer as a decoupled tensorrt_llm model does (one response per token with `output_ids` and
`sequence_length`, then Triton's empty final response when the request asks for it) and does no other work, so
the client is the limit of what a load point measures. Each response carries `sent_ns`, the server's
CLOCK_MONOTONIC time at sending, so the client's own delay (receive time - sent_ns) is measured per response.
P processes share one port (SO_REUSEPORT); their request and response counts are shared, and ModelStatistics
returns them, as Triton's statistics check what a client claims.

Used only by benchmarks/harness_fidelity.py; never a product part. Inputs: `request_output_len` (INT32, the
responses to send) and optionally `interval_us` (INT32, the pause between a request's responses; 0: at once).
"""

from __future__ import annotations

import argparse
import asyncio
import multiprocessing as mp
import os
import socket
import struct
import sys
import time

# the protocol's generated stubs, as tritonclient ships them (the server side of the same service)
from tritonclient.grpc import service_pb2, service_pb2_grpc


def _int32(request, name: str, default: int) -> int:
    for position, tensor in enumerate(request.inputs):
        if tensor.name == name:
            if request.raw_input_contents:
                return struct.unpack_from("<i", request.raw_input_contents[position])[0]
            return int(tensor.contents.int_contents[0])
    return default


class Streamer(service_pb2_grpc.GRPCInferenceServiceServicer):
    def __init__(self, counts):
        self.counts = counts  # shared by the processes: [requests, responses]

    async def ServerLive(self, request, context):
        return service_pb2.ServerLiveResponse(live=True)

    async def ServerReady(self, request, context):
        return service_pb2.ServerReadyResponse(ready=True)

    async def ModelReady(self, request, context):
        return service_pb2.ModelReadyResponse(ready=True)

    async def ModelStatistics(self, request, context):
        stats = service_pb2.ModelStatisticsResponse()
        model = stats.model_stats.add(name=request.name or "tensorrt_llm", version="1")
        with self.counts.get_lock():
            model.inference_stats.success.count = self.counts[0]
            model.execution_count = self.counts[1]  # responses sent (a stand-in field for the count)
        return stats

    async def ModelStreamInfer(self, request_iterator, context):
        async for request in request_iterator:
            tokens = _int32(request, "request_output_len", 1)
            interval_s = _int32(request, "interval_us", 0) / 1e6
            final_wanted = request.parameters["triton_enable_empty_final_response"].bool_param
            response = service_pb2.ModelStreamInferResponse()
            infer = response.infer_response
            infer.model_name, infer.id = request.model_name, request.id
            for name, shape in (("output_ids", (1, 1, 1)), ("sequence_length", (1, 1))):
                output = infer.outputs.add(name=name, datatype="INT32")
                output.shape.extend(shape)
                infer.raw_output_contents.append(struct.pack("<i", 1))
            stamp = infer.parameters["sent_ns"]
            start = time.monotonic()
            for k in range(tokens):
                if interval_s:  # an absolute schedule: a late send does not delay the next ones
                    delay = start + k * interval_s - time.monotonic()
                    if delay > 0:
                        await asyncio.sleep(delay)
                stamp.int64_param = time.monotonic_ns()
                self._count(requests=int(k == tokens - 1 and not final_wanted), responses=1)
                yield response
            if final_wanted:
                final = service_pb2.ModelStreamInferResponse()
                final.infer_response.model_name, final.infer_response.id = request.model_name, request.id
                final.infer_response.parameters["triton_final_response"].bool_param = True
                self._count(requests=1, responses=0)
                yield final

    def _count(self, requests: int, responses: int) -> None:
        """Counted before the yield that sends it: a client may read the counts the moment its last response arrived
        (counting after the final yield raced with it: 39 of 40 requests counted, CI 2026-11-29)."""
        with self.counts.get_lock():
            self.counts[0] += requests
            self.counts[1] += responses


async def _serve(port: int, counts) -> None:
    import grpc

    server = grpc.aio.server(options=[("grpc.so_reuseport", 1), ("grpc.max_receive_message_length", -1)])
    service_pb2_grpc.add_GRPCInferenceServiceServicer_to_server(Streamer(counts), server)
    server.add_insecure_port(f"127.0.0.1:{port}")
    await server.start()
    await server.wait_for_termination()


def _process(port: int, counts) -> None:
    try:
        import uvloop  # optional: a faster event loop where installed

        uvloop.install()
    except ImportError:
        pass
    asyncio.run(_serve(port, counts))


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class StreamServer:
    """`processes` server processes on one loopback port; a context manager that starts and stops them."""

    def __init__(self, processes: int = 1, port: int | None = None):
        self.processes, self.port = processes, port or free_port()
        context = mp.get_context("spawn")  # grpc must not be forked once initialised
        self.counts = context.Array("q", 2)
        self._children = [context.Process(target=_process, args=(self.port, self.counts), daemon=True) for _ in range(processes)]

    @property
    def address(self) -> str:
        return f"127.0.0.1:{self.port}"

    @property
    def pids(self) -> list[int]:
        return [child.pid for child in self._children if child.pid is not None]

    def counted(self) -> tuple[int, int]:
        """(requests, responses) finished so far, over all processes."""
        with self.counts.get_lock():
            return self.counts[0], self.counts[1]

    def __enter__(self) -> StreamServer:
        for child in self._children:
            child.start()
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:  # ready when the port answers
            with socket.socket() as s:
                if s.connect_ex(("127.0.0.1", self.port)) == 0:
                    time.sleep(0.5)  # the other processes bind within the same moment
                    return self
            time.sleep(0.05)
        self.__exit__()
        raise RuntimeError(f"stream server did not listen on {self.address} within 60 s")

    def __exit__(self, *exc) -> None:
        for child in self._children:
            child.terminate()
        for child in self._children:
            child.join(10)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--processes", type=int, default=max(1, (os.cpu_count() or 2) // 2))
    parser.add_argument("--port", type=int, default=8001)
    args = parser.parse_args(argv)
    with StreamServer(args.processes, args.port) as server:
        print(f"streaming on {server.address} with {args.processes} processes; Ctrl-C stops", flush=True)
        try:
            while True:
                time.sleep(3600)
        except KeyboardInterrupt:
            return 0


if __name__ == "__main__":
    sys.exit(main())
