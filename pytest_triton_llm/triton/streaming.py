"""Streamed requests: gRPC bidirectional streams and HTTP generate_stream (server-sent events).

A decoupled model answers through a stream only; each response is recorded with its
arrival time and Triton's final flag, so suites can check token order, time to first
token, and that exactly one response closes the request.
"""

from __future__ import annotations

import json
import queue
import time
import urllib.error
from dataclasses import dataclass, field

import numpy as np
import tritonclient.grpc as grpcclient

from ..host.endpoints import Endpoints
from .tensor_contract import returned_ids


class StreamError(RuntimeError):
    pass


@dataclass
class StreamEvent:
    t_s: float  # seconds after the request was sent
    outputs: dict  # output name -> numpy array (gRPC) or JSON value (SSE)
    final: bool

    def text(self) -> str:
        value = self.outputs.get("text_output")
        if value is None:
            return ""
        if isinstance(value, np.ndarray):
            return b"".join(value.reshape(-1)).decode("utf-8")
        return "".join(value) if isinstance(value, list) else str(value)

    def token_ids(self) -> list[int]:
        return returned_ids(self.outputs)


@dataclass
class StreamResult:
    events: list[StreamEvent] = field(default_factory=list)
    cancelled: bool = False  # the client closed the stream before the request ended
    cumulative: bool = False  # each response carries the text so far (the llmapi model), not its new piece

    @property
    def text(self) -> str:
        if self.cumulative:
            return self.content_events[-1].text() if self.content_events else ""
        return "".join(e.text() for e in self.events)

    @property
    def token_ids(self) -> list[int]:
        return [t for e in self.events for t in e.token_ids()]

    @property
    def content_events(self) -> list[StreamEvent]:
        """Responses that carry output (an empty final response only closes the stream)."""
        return [e for e in self.events if e.outputs]

    @property
    def finals(self) -> int:
        return sum(e.final for e in self.events)


def grpc_stream(
    endpoints: Endpoints,
    model: str,
    inputs: list[grpcclient.InferInput],
    *,
    request_id: str = "",
    stop_inputs: list[grpcclient.InferInput] | None = None,
    stop_after_s: float | None = None,
    cancel_after_s: float | None = None,
    timeout_s: float = 300.0,
) -> StreamResult:
    """Send one request on its own gRPC stream and collect responses until its final one.

    stop_after_s: then send `stop_inputs` with the same request id (TensorRT-LLM's stop signal,
    upstream client's --stop-after-ms) and also wait for that request's final response.
    cancel_after_s: then close the stream with cancellation (--stop-via-request-cancel).
    """
    client = endpoints.grpc_client()
    arrivals: queue.Queue = queue.Queue()
    start = time.perf_counter()
    client.start_stream(
        callback=lambda result, error: arrivals.put((time.perf_counter() - start, result, error)), headers=endpoints.header_dict()
    )
    result, expected_finals, stop_sent = StreamResult(), 1, False
    try:
        client.async_stream_infer(model, inputs, request_id=request_id, enable_empty_final_response=True)
        while result.finals < expected_finals:
            now = time.perf_counter() - start
            if stop_after_s is not None and not stop_sent and now >= stop_after_s:
                client.async_stream_infer(model, stop_inputs, request_id=request_id, enable_empty_final_response=True)
                expected_finals, stop_sent = expected_finals + 1, True
            if cancel_after_s is not None and now >= cancel_after_s:
                client.stop_stream(cancel_requests=True)
                result.cancelled = True
                break
            if now >= timeout_s:
                raise StreamError(f"{model}: no final response after {timeout_s:.0f} s")
            next_action = min(x for x in (stop_after_s if not stop_sent else None, cancel_after_s, timeout_s) if x is not None)
            try:
                t_s, response, error = arrivals.get(timeout=max(0.001, next_action - now))
            except queue.Empty:
                continue
            if error is not None:
                raise StreamError(f"{model}: {error.message() if hasattr(error, 'message') else error}")
            message = response.get_response()
            final_param = message.parameters.get("triton_final_response")
            outputs = {o.name: response.as_numpy(o.name) for o in message.outputs}
            result.events.append(StreamEvent(t_s, outputs, bool(final_param and final_param.bool_param)))
    finally:
        # a stream that got no final response (a timeout, an error) is cancelled: closing it plainly waits for the
        # server to end it, and a stalled server never does (the gate would hang instead of failing)
        client.stop_stream(cancel_requests=not result.cancelled and result.finals < expected_finals)
        client.close()
    return result


def sse_payload(raw: bytes | str) -> dict | None:
    """One line of Triton's generate_stream: the event's JSON for a `data:` line, else None; an event
    that reports an error raises StreamError."""
    line = (raw.decode("utf-8") if isinstance(raw, bytes) else raw).strip()
    if not line.startswith("data:"):
        return None
    payload = json.loads(line[len("data:") :])
    if "error" in payload:
        raise StreamError(f"generate_stream: {payload['error']}")
    return payload


def sse_stream(endpoints: Endpoints, url: str, body: dict, timeout_s: float = 300.0) -> StreamResult:
    """POST to Triton's generate_stream and read its `data:` events until the server closes the stream."""
    result = StreamResult()
    start = time.perf_counter()
    try:
        with endpoints.open(url, json.dumps(body).encode(), timeout=timeout_s) as resp:
            for raw in resp:
                payload = sse_payload(raw)
                if payload is not None:
                    result.events.append(StreamEvent(time.perf_counter() - start, payload, False))
    except urllib.error.HTTPError as exc:
        raise StreamError(f"generate_stream: HTTP {exc.code}: {exc.read().decode('utf-8', errors='replace')}") from None
    if result.events:
        result.events[-1].final = True  # the server closing the stream is its final response
    return result
