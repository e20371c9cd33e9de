"""The load engine's OpenAI /v1 target: completion or chat bodies posted to one endpoint, streamed over server-sent
events and timed per content chunk, as aiperf times an OpenAI endpoint.

A record's tokens are the stream's `usage.completion_tokens` where the body asked for it (stream_options.include_usage):
a server that was asked and sent none fails the request. Without usage they are the content chunks, and a chunk may
carry several tokens (llama-cpp-python holds back the tokens of a character split across them), so ITL and TPOT are
then per chunk.
"""

from __future__ import annotations

import json
import ssl
import time
from dataclasses import dataclass, field

from ..triton.load import RequestRecord
from .client import DONE
from .contract import Family
from ..triton.streaming import StreamError


@dataclass(frozen=True)
class V1Target:
    """A /v1 endpoint as the load processes reach it (plain data: they are spawned, and pickle it)."""

    url: str  # the /v1 base, http(s)://HOST:PORT/v1
    headers: tuple[tuple[str, str], ...] = field(default=(), repr=False)  # values may be secrets: never shown
    ca_file: str | None = None
    path: str = "/completions"  # or /chat/completions

    def __post_init__(self):
        if self.path not in ("/completions", "/chat/completions"):
            raise ValueError(f"path must be /completions or /chat/completions, not {self.path!r}")

    def sender(self, keep: bool) -> _V1Sender:
        return _V1Sender(self, keep)


def _text(choice: dict, chat: bool) -> str:
    return ((choice.get("delta") or {}).get("content") if chat else choice.get("text")) or ""


class _V1Sender:
    def __init__(self, target: V1Target, keep: bool):
        import aiohttp

        self.keep, self.chat = keep, target.path.startswith("/chat")
        self.url = target.url.rstrip("/") + target.path
        connector = None
        if self.url.startswith("https://"):
            connector = aiohttp.TCPConnector(ssl=ssl.create_default_context(cafile=target.ca_file))
        self.session = aiohttp.ClientSession(
            timeout=aiohttp.ClientTimeout(total=None), headers=dict(target.headers), connector=connector
        )

    async def send(self, index: int, body: dict) -> RequestRecord:
        """`body` with stream true (an answer that is not a stream fails: it has no [DONE])."""
        record = RequestRecord(index, time.perf_counter(), streamed=True)
        try:
            async with self.session.post(self.url, json=body) as response:
                if response.status != 200:
                    raise StreamError(f"POST {self.url}: HTTP {response.status}: {(await response.text())[:300]}")
                await self._read_stream(response, record, body)
        except Exception as exc:  # an error status, a broken stream or the transport: a failed request
            record.error = str(exc) if isinstance(exc, StreamError) else f"{type(exc).__name__}: {exc}"
        record.done = time.perf_counter()
        return record

    async def _read_stream(self, response, record: RequestRecord, body: dict) -> None:
        usage, done = None, False
        async for raw in response.content:  # one line at a time; OpenAI servers send each event's JSON on one line
            line = raw.decode("utf-8").strip()
            if not line.startswith("data:"):
                continue
            data = line[len("data:") :].strip()
            if data == DONE:
                done = True
                break
            chunk = json.loads(data)
            if "error" in chunk:
                raise StreamError(f"the stream sent an error: {json.dumps(chunk['error'])[:300]}")
            if any(_text(choice, self.chat) for choice in chunk.get("choices") or []):
                record.token_times.append(time.perf_counter())
            if chunk.get("usage"):
                usage = chunk["usage"]
            if self.keep:
                record.responses.append(chunk)
        if not done:
            raise StreamError(f"the stream ended without data: {DONE}")
        if (body.get("stream_options") or {}).get("include_usage"):
            if usage is None:
                raise StreamError("stream_options.include_usage was asked for and no chunk carried usage")
            record.tokens = int(usage["completion_tokens"])
        else:
            record.tokens = len(record.token_times)

    async def close(self) -> None:
        await self.session.close()


def v1_bodies(requests: list, base: dict, decode, family: Family, fixed_output: bool) -> tuple[list[dict], str]:
    """The perf workload's requests (perf.workload.PerfRequest: input_ids, max_tokens) as streamed /v1/completions
    bodies on `base` (the model and the family's greedy fields): each prompt the drawn token ids decoded to text (the
    server tokenizes it again: input lengths near the drawn ones, not equal), usage asked for where the family streams
    it, and with `fixed_output` every answer held to its drawn length by the first of ignore_eos and min_tokens that
    the family honours. -> (bodies, how lengths are held: that field's name, or why they are not)."""
    usage = {"stream_options": {"include_usage": True}} if family.supports("stream_options.include_usage") else {}
    held = next((f for f in ("ignore_eos", "min_tokens") if family.supports(f)), None) if fixed_output else None
    bodies = []
    for r in requests:
        body = {**base, "prompt": decode(r.input_ids), "max_tokens": r.max_tokens, "stream": True, **usage}
        if held is not None:
            body[held] = True if held == "ignore_eos" else r.max_tokens
        bodies.append(body)
    if held is None:
        why = "; ".join(family.why_not(f) for f in ("ignore_eos", "min_tokens"))
        held = f"not held: {why}" if fixed_output else "not asked: the workload's fixed_output is false"
    return bodies, held
