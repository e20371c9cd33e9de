"""A client of an OpenAI-compatible /v1 endpoint: completions and chat, unary and streamed (server-sent events).

The standard library's http.client, one connection per request, so that a test sees exactly what the server sent:
the status, the JSON body (or the text that was not JSON) and, when streamed, every event with its arrival time.
"""

from __future__ import annotations

import http.client
import json
import ssl
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urlsplit

from ..common.errors import TritonLLMError
from ..host.processes import ManagedProcess, start_until_ready

DONE = "[DONE]"  # the event that ends an OpenAI stream
# the header every answer of the project's trtllm-serve stand-in carries (stand_ins/trtllm_serve/server.py),
# with the project's version: a real server never sends it
STAND_IN_HEADER = "x-triton-llm-stand-in"


class OpenAIURLError(TritonLLMError, ValueError):
    """--openai-url is not an http(s) address of a /v1 endpoint."""


class OpenAIRequestError(TritonLLMError, RuntimeError):
    """The server answered a request with an error status; `status` and `body` are what it sent."""

    def __init__(self, method: str, path: str, status: int, body: Any):
        self.path, self.status, self.body = path, status, body
        super().__init__(f"{method} {path}: HTTP {status}: {json.dumps(body)[:300] if not isinstance(body, str) else body[:300]}")


@dataclass(frozen=True)
class Reply:
    """An HTTP answer: the status and the body, parsed from JSON where it is JSON (else the text)."""

    status: int
    body: Any
    headers: dict[str, str] = field(default_factory=dict)  # names in lower case


@dataclass(frozen=True)
class Completion:
    """One choice of a unary /v1/completions or /v1/chat/completions answer."""

    text: str
    finish_reason: str | None
    usage: dict | None
    logprobs: dict | None
    body: dict
    index: int = 0  # the choice's index (n > 1)


@dataclass
class Streamed:
    """A streamed answer as it arrived: each text delta with its arrival time, the finish reason and usage events."""

    sent_s: float  # perf_counter when the request was sent
    deltas: list[str] = field(default_factory=list)  # the text of every event that carried text, in order
    times: list[float] = field(default_factory=list)  # perf_counter at each delta's arrival
    events: int = 0  # data events before [DONE]
    finish_reason: str | None = None
    usage: dict | None = None  # the last usage a chunk carried (a usage chunk has choices [])
    usage_chunks: int = 0
    usage_alone_last: bool = False  # the last data event carried the usage and no choices (OpenAI's usage chunk)
    done: bool = False  # [DONE] arrived
    closed_early: bool = False  # the client closed the stream after `stop_after` deltas
    log_probs: list[float] = field(default_factory=list)  # each streamed token's log prob, where the request asked
    by_choice: dict[int, list[str]] = field(default_factory=dict)  # each choice's text deltas, by its index (n > 1)

    @property
    def text(self) -> str:
        return "".join(self.deltas)


class OpenAIEndpoint:
    """One /v1 base address with its headers (auth) and TLS trust."""

    def __init__(self, url: str, headers: dict[str, str] | None = None, ca_file: str | None = None, timeout_s: float = 120.0):
        parts = urlsplit(url)
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise OpenAIURLError(f"--openai-url {url!r}: expected http://HOST:PORT/v1 or https://HOST:PORT/v1")
        if parts.username or parts.password:
            raise OpenAIURLError(
                "--openai-url must not hold credentials: pass them as --openai-header 'Authorization: Bearer ...'"
            )
        if not parts.path.rstrip("/").endswith("/v1"):
            raise OpenAIURLError(f"--openai-url {url!r}: the address must end in /v1 (the OpenAI API's base path)")
        self.host = parts.hostname
        self.port = parts.port or (443 if parts.scheme == "https" else 80)
        self.base_path = parts.path.rstrip("/")
        self.headers = dict(headers or {})
        self.timeout_s = timeout_s
        self._ssl = ssl.create_default_context(cafile=ca_file) if parts.scheme == "https" else None

    def _connection(self) -> http.client.HTTPConnection:
        if self._ssl is not None:
            return http.client.HTTPSConnection(self.host, self.port, timeout=self.timeout_s, context=self._ssl)
        return http.client.HTTPConnection(self.host, self.port, timeout=self.timeout_s)

    def _send(self, method: str, path: str, body: bytes | None, accept: str) -> tuple[http.client.HTTPConnection, Any]:
        headers = {"Accept": accept, **self.headers}
        if body is not None:
            headers["Content-Type"] = "application/json"
        connection = self._connection()
        connection.request(method, path, body=body, headers=headers)
        return connection, connection.getresponse()

    def request(self, method: str, path: str, body: dict | bytes | str | None = None, under_v1: bool = True) -> Reply:
        """`path` under /v1 (else beside it: a server's own /health, /perf_metrics); a dict body is sent as JSON, bytes
        or str as they are (a robustness test's malformed body)."""
        data = json.dumps(body).encode() if isinstance(body, dict) else body.encode() if isinstance(body, str) else body
        base = self.base_path if under_v1 else self.base_path.removesuffix("/v1")
        connection, response = self._send(method, base + path, data, "application/json")
        try:
            return Reply(response.status, _parsed(response.read()), {k.lower(): v for k, v in response.getheaders()})
        finally:
            connection.close()

    def models(self) -> list[dict]:
        return self.listing()[0]

    def listing(self) -> tuple[list[dict], dict[str, str]]:
        """GET /models: the models it lists, and the answer's headers."""
        reply = self.request("GET", "/models")
        if reply.status != 200 or not isinstance(reply.body, dict) or not isinstance(reply.body.get("data"), list):
            raise OpenAIRequestError("GET", "/models", reply.status, reply.body)
        return reply.body["data"], reply.headers

    def complete(self, body: dict) -> Completion:
        [choice] = self.choices("/completions", body)  # n is 1: one choice
        return choice

    def chat(self, body: dict) -> Completion:
        [choice] = self.choices("/chat/completions", body)
        return choice

    def choices(self, path: str, body: dict) -> list[Completion]:
        """A unary answer (stream false) to `body` at `path`: every choice as its own Completion, in the order the
        body lists them (one unless n > 1)."""
        reply = self.request("POST", path, {**body, "stream": False})
        if reply.status != 200 or not isinstance(reply.body, dict):
            raise OpenAIRequestError("POST", path, reply.status, reply.body)
        chat = path.startswith("/chat")
        return [
            Completion(
                choice["message"].get("content") or "" if chat else choice["text"],
                choice.get("finish_reason"),
                reply.body.get("usage"),
                choice.get("logprobs"),
                reply.body,
                choice.get("index", 0),
            )
            for choice in reply.body["choices"]
        ]

    def stream(self, path: str, body: dict, stop_after: int | None = None) -> Streamed:
        """POST `body` with stream true to `path` (/completions or /chat/completions) and read its events until
        [DONE], or close the connection after `stop_after` text deltas (a client that goes away)."""
        chat = path.startswith("/chat")
        sent = time.perf_counter()
        connection, response = self._send(
            "POST", self.base_path + path, json.dumps({**body, "stream": True}).encode(), "text/event-stream"
        )
        result = Streamed(sent_s=sent)
        try:
            if response.status != 200:
                raise OpenAIRequestError("POST", path, response.status, _parsed(response.read()))
            for event in sse_events(response):
                if event == DONE:
                    result.done = True
                    break
                result.events += 1
                chunk = json.loads(event)
                result.usage_alone_last = bool(chunk.get("usage")) and not chunk.get("choices")
                if chunk.get("usage"):
                    result.usage = chunk["usage"]
                    result.usage_chunks += 1
                for choice in chunk.get("choices") or []:
                    piece = (choice.get("delta") or {}).get("content") if chat else choice.get("text")
                    if piece:
                        result.deltas.append(piece)
                        result.times.append(time.perf_counter())
                        result.by_choice.setdefault(choice.get("index", 0), []).append(piece)
                    result.log_probs += chunk_log_probs(choice.get("logprobs"), chat)
                    if choice.get("finish_reason"):
                        result.finish_reason = choice["finish_reason"]
                if stop_after is not None and len(result.deltas) >= stop_after:
                    result.closed_early = True
                    break
        finally:
            connection.close()
        return result


def usage_counts(usage: dict) -> dict:
    """A usage object's three token counts (prompt, completion, total), without the details a server may add."""
    return {key: usage[key] for key in ("prompt_tokens", "completion_tokens", "total_tokens")}


def chunk_log_probs(logprobs: dict | None, chat: bool) -> list[float]:
    """The token log probs of one choice (or streamed chunk): chat's content[].logprob, completions' token_logprobs."""
    if not logprobs:
        return []
    if chat:
        return [float(t["logprob"]) for t in logprobs.get("content") or []]
    return [float(v) for v in logprobs.get("token_logprobs") or []]


def start_until_listed(
    process: ManagedProcess, endpoint: OpenAIEndpoint, what: str, timeout_s: float, unavailable: Callable[[str], Exception]
) -> dict:
    """Start a /v1 server's process and return the one model its /v1/models lists, once that answers (refused
    connections and error answers until then are waited out; start_until_ready says why it gave up)."""
    [listed] = start_until_ready(
        process,
        endpoint.models,
        what=what,
        log_path=process.log_path,
        timeout_s=timeout_s,
        unavailable=unavailable,
        retry_on=(OSError, TritonLLMError),
    )
    return listed


def _parsed(raw: bytes) -> Any:
    """A body as JSON where it is JSON, else its text."""
    text = raw.decode("utf-8", errors="replace")
    try:
        return json.loads(text)
    except ValueError:
        return text


def sse_events(response) -> Iterator[str]:
    """The `data:` payloads of a server-sent event stream (comments and other fields skipped), one per event."""
    data: list[str] = []
    while True:
        line = response.readline()
        if not line:
            if data:
                yield "\n".join(data)
            return
        text = line.decode("utf-8").rstrip("\r\n")
        if not text:
            if data:
                yield "\n".join(data)
                data = []
            continue
        if text.startswith("data:"):
            data.append(text[5:].removeprefix(" "))
