"""A proxy on 127.0.0.1 in front of a real /v1 server that injects one fault of fixtures/openai_faults.toml (each
modelled on an upstream bug) into what the server answers, or none: how the /v1 checks are shown to fail for the
stack's reasons. Requests and answers are rewritten as the fault says."""

from __future__ import annotations

import http.client
import json
import queue
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from urllib.parse import urlsplit

from tokenizers import Tokenizer

from ..common.files import fixtures_dir
from . import tracker_rewrites as tracker
from .tracker_rewrites import choice_text, set_choice_text
from .client import DONE, STAND_IN_HEADER, sse_events
from ..common.schema import load_toml

FAULTS_FILE = fixtures_dir() / "openai_faults.toml"
TRACKER_FILE = fixtures_dir() / "tracker_openai_faults.toml"  # the tracker catalog's /v1 rows (tracker_rewrites.py)
Events = list[dict]  # a stream's JSON chunks, in order ([DONE] apart)


def fault_names(path: Path = FAULTS_FILE) -> list[str]:
    return list(load_toml(path)["faults"])


def _text_of(chunk: dict) -> str:
    return choice_text((chunk.get("choices") or [{}])[0]) or ""


def _set_text(chunk: dict, text: str) -> None:
    set_choice_text(chunk["choices"][0], text)


def _drop_final_text(events: Events) -> Events:
    last = max(i for i, e in enumerate(events) if _text_of(e))
    if events[last]["choices"][0].get("finish_reason"):
        _set_text(events[last], "")  # the finish reason stays, its tokens go
        return events
    return events[:last] + events[last + 1 :]


def _repeat_last_text(events: Events) -> Events:
    last = max(i for i, e in enumerate(events) if _text_of(e))
    repeat = json.loads(json.dumps(events[last]))
    repeat["choices"][0]["finish_reason"] = None
    return events[: last + 1] + [repeat] + events[last + 1 :]


def _one_short(event: dict) -> dict:
    usage = event.get("usage")
    if isinstance(usage, dict) and usage.get("completion_tokens"):
        usage.update(completion_tokens=usage["completion_tokens"] - 1, total_tokens=usage["total_tokens"] - 1)
    return event


CACHED_BEYOND = 2  # tokens: the cited stream said cached_tokens 3604 for input_tokens 3602


def _cached_beyond_the_prompt(event: dict) -> dict:
    """The cached prompt tokens CACHED_BEYOND more than the cache held, wherever the server reports a cache hit."""
    usage = event.get("usage")
    if not isinstance(usage, dict):
        return event
    details = usage.get("prompt_tokens_details")
    if isinstance(details, dict) and details.get("cached_tokens"):
        details["cached_tokens"] += CACHED_BEYOND
    return event


# per fault: (what it does to a whole stream, or None), (what it does to a unary answer, given the request, or None)
STREAM_FAULTS: dict[str, Callable[[Events], Events]] = {
    "stream_drops_final_tokens": _drop_final_text,
    "stream_repeats_last_token": _repeat_last_text,
    "stream_buffered_until_done": lambda events: events,  # held back, then sent at once
    "stream_usage_one_short": lambda events: [_one_short(e) for e in events],
    "stream_cached_tokens_beyond_the_prompt": lambda events: [_cached_beyond_the_prompt(e) for e in events],
}


def _always_stop(request: dict, answer: dict) -> dict:
    for choice in answer.get("choices", []):
        if choice.get("finish_reason") == "length":
            choice["finish_reason"] = "stop"
    return answer


def _keep_stop_string(request: dict, answer: dict) -> dict:
    stop = request.get("stop")
    stop = [stop] if isinstance(stop, str) else stop
    for choice in answer.get("choices", []):
        if stop and choice.get("finish_reason") == "stop" and "text" in choice:
            choice["text"] += stop[0]
    return answer


def _name_the_checkpoint(request: dict, answer: dict) -> dict:
    if "choices" in answer:  # a completion or chat answer; the model list passes as it is
        answer["model"] = f"/checkpoints/{request.get('model')}"
    return answer


def _one_completion_token(request: dict, answer: dict) -> dict:
    usage = answer.get("usage")
    if isinstance(usage, dict) and "completion_tokens" in usage:
        usage.update(completion_tokens=1, total_tokens=usage["prompt_tokens"] + 1)
    return answer


WINDOW = 2048  # the context window of the servers the faults run against (llama n_ctx, the stand-in's max_seq_len)


def _empty_beyond_the_window(request: dict, answer: dict) -> dict:
    asked = request.get("max_tokens", request.get("max_completion_tokens"))
    if isinstance(asked, int) and asked > WINDOW:
        for choice in answer.get("choices", []):
            if "text" in choice:
                choice["text"] = ""
            else:
                choice.setdefault("message", {})["content"] = ""
            choice["finish_reason"] = "length"
        usage = answer.get("usage")
        if isinstance(usage, dict) and "prompt_tokens" in usage:
            usage.update(completion_tokens=0, total_tokens=usage["prompt_tokens"])
    return answer


UNARY_FAULTS: dict[str, Callable[[dict, dict], dict]] = {
    "max_tokens_beyond_the_window_answered_empty": _empty_beyond_the_window,
    "finish_reason_always_stop": _always_stop,
    "stop_string_kept": _keep_stop_string,
    "response_names_another_model": _name_the_checkpoint,
    "completion_tokens_always_one": _one_completion_token,
}


def _keep_last_quarter(text):
    return text[-(len(text) // 4) :] if isinstance(text, str) and len(text) >= 4 else text


def _truncate_from_the_left(request: dict) -> dict:
    if "prompt" in request:
        request["prompt"] = _keep_last_quarter(request["prompt"])
    for message in request.get("messages") or []:
        if isinstance(message, dict):
            message["content"] = _keep_last_quarter(message.get("content"))
    return request


# the request fields the /v1 suites send, all a server that drops what it does not know keeps
KNOWN_FIELDS = {
    "model", "prompt", "messages", "max_tokens", "max_completion_tokens", "temperature", "top_p", "top_k", "seed", "stop",
    "stream", "stream_options", "logprobs", "top_logprobs", "n", "ignore_eos", "min_tokens", "repeat_penalty",
    "response_format", "add_generation_prompt",
}  # fmt: skip


def _schema_not_enforced(request: dict) -> dict:
    """A response_format with a JSON schema served as plain JSON mode: the answer is JSON, the schema not applied."""
    fmt = request.get("response_format")
    if isinstance(fmt, dict) and (fmt.get("type") in ("json_schema", "json") or "schema" in fmt):
        request["response_format"] = {"type": "json_object"}
    return request


# what a fault does to the request on its way to the server
REQUEST_FAULTS: dict[str, Callable[[dict], dict]] = {
    "ignore_eos_dropped": lambda request: {k: v for k, v in request.items() if k != "ignore_eos"},
    "min_tokens_dropped": lambda request: {k: v for k, v in request.items() if k != "min_tokens"},
    "min_p_dropped": lambda request: {k: v for k, v in request.items() if k != "min_p"},
    "unknown_fields_dropped": lambda request: {k: v for k, v in request.items() if k in KNOWN_FIELDS},
    "seed_ignored": lambda request: {k: v for k, v in request.items() if k != "seed"},
    # temperature 0 taken for "not given": the server's own default temperature samples instead
    "temperature_zero_ignored": lambda request: {k: v for k, v in request.items() if (k, v) != ("temperature", 0.0)},
    "prompt_truncated_from_the_left": _truncate_from_the_left,
    "response_format_schema_not_enforced": _schema_not_enforced,
    # a chat request (it carries messages) loses its response_format on the way: the answer is unguided
    "response_format_dropped_on_chat": lambda request: {
        k: v for k, v in request.items() if k != "response_format" or "messages" not in request
    },
    # the chat template's flags not passed on: the server's defaults (a generation prompt) apply
    "chat_template_flags_dropped": lambda request: {
        k: v for k, v in request.items() if k not in ("add_generation_prompt", "continue_final_message")
    },
    "max_tokens_plus_one": lambda request: {
        k: v + 1 if k in ("max_tokens", "max_completion_tokens") and isinstance(v, int) else v for k, v in request.items()
    },
}
# a non-streamed chat request sent on as a completion whose prompt is the messages in a generic ROLE: template, not
# the model's own chat template; its answer comes back as a chat answer
GENERIC_TEMPLATE = {"chat_rendered_without_the_models_template"}
CHAT, COMPLETIONS = "/chat/completions", "/completions"


def _generic_prompt(request: dict) -> dict:
    messages = [m for m in request.pop("messages", None) or [] if isinstance(m, dict)]
    lines = [f"{str(m.get('role', 'user')).upper()}: {m.get('content')}" for m in messages]
    return dict(request, prompt="\n".join([*lines, "ASSISTANT:"]))


def _as_chat_answer(answer: dict) -> dict:
    for choice in answer.get("choices", []):
        choice["message"] = {"role": "assistant", "content": choice.pop("text", "")}
    return dict(answer, object="chat.completion")


def _arrival_at_first_token(entries):
    for entry in entries if isinstance(entries, list) else []:
        timing = (entry.get("perf_metrics") or {}).get("timing_metrics") or {}
        if "first_token_time" in timing:
            timing["arrival_time"] = timing["first_token_time"]
    return entries


# what a fault does to the answer of a GET beside /v1 (a server's own endpoints), by path
SERVER_PATH_FAULTS: dict[str, tuple[str, Callable]] = {
    "perf_metrics_arrival_at_first_token": ("/perf_metrics", _arrival_at_first_token),
}
DRAINS = {"keeps_generating_for_a_gone_client"}  # the upstream stream is read to its end after the client left
NO_DONE = {"stream_without_done"}  # the stream ends without its data: [DONE] event
# added before each event, cumulatively: a stream's k-th event goes on k x the delay after the server sent it, as from
# a generation loop that much slower a step, on a machine of any speed (a fixed gap between events hid behind a slow
# machine's own); one stream at a time waits, as in a server's one loop, so concurrent streams wait for each other's
# delays. The upstream is read unpaced, each event timed as it comes (_arrivals).
EVENT_DELAY_S = {"stream_slowed_down": 0.05}


def _stream_rewrite(fault: str, request: dict) -> Callable[[Events], Events] | None:
    if fault in STREAM_FAULTS:
        return STREAM_FAULTS[fault]
    if fault in tracker.STREAM_FAULTS:
        return lambda events: tracker.STREAM_FAULTS[fault](request, events)
    return None


def _arrivals(events: Iterator[str]) -> Iterator[tuple[float, str]]:
    """Each event with the monotonic time the upstream sent it, read by a thread of its own: holding an event back
    must not hold back the reading of the next (its time is the server's, not the proxy's)."""
    arrived: queue.Queue[tuple[float, str] | None] = queue.Queue()

    def read() -> None:
        try:
            for data in events:
                arrived.put((time.monotonic(), data))
        finally:
            arrived.put(None)

    threading.Thread(target=read, daemon=True).start()
    while (item := arrived.get()) is not None:
        yield item


def _json_object(raw: bytes | None) -> dict | None:
    """`raw` as a JSON object, or None (no body, not JSON, or JSON of another kind: passed on as it came)."""
    try:
        parsed = json.loads(raw) if raw else None
    except ValueError:
        return None
    return parsed if isinstance(parsed, dict) else None


# POST a fault's name (an empty body: none) to the proxy's root plus this path to switch its fault: one session runs
# many faults' checks (tests/integration/test_openai_faults.py)
SWITCH_PATH = "/_fault_proxy/fault"
SWITCH_WAIT_S = 300  # for the requests of the previous fault to end (a drained stream runs to its max_tokens)


def _checked(fault: str | None) -> str | None:
    known = fault_names() + fault_names(TRACKER_FILE)
    if fault is not None and fault not in known:
        raise ValueError(f"no /v1 fault {fault!r} in {FAULTS_FILE.name} or {TRACKER_FILE.name} (faults: {', '.join(known)})")
    return fault


class FaultProxy:
    """`FaultProxy(upstream_url, fault).start()` -> the proxy's /v1 URL; `stop()` ends it. fault None: no fault.
    `switch(fault)` (or a POST to SWITCH_PATH) changes it once every request the proxy is serving has ended, so that
    no request runs under one fault while the checks of the next one run, a stream drained for a gone client included."""

    def __init__(self, upstream_url: str, fault: str | None, tokenizer: Path | None = None):
        parts = urlsplit(upstream_url)
        # the served model's tokenizer.json, for faults sized in prompt tokens (else estimated from characters)
        self.tokenizer = Tokenizer.from_file(str(tokenizer / "tokenizer.json")) if tokenizer is not None else None
        self.upstream = (parts.hostname or "127.0.0.1", parts.port or 80)
        self.fault = _checked(fault)
        self.loop = threading.Lock()  # the server's one generation loop, for EVENT_DELAY_S
        self._serving = 0  # requests forwarded and not yet answered in full
        self._idle = threading.Condition()
        self._server = ThreadingHTTPServer(("127.0.0.1", 0), self._handler())
        self._server.daemon_threads = True
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)
        self.url = f"http://127.0.0.1:{self._server.server_address[1]}{parts.path.rstrip('/')}"
        self.switch_url = f"http://127.0.0.1:{self._server.server_address[1]}{SWITCH_PATH}"

    def start(self) -> str:
        self._thread.start()
        return self.url

    def stop(self) -> None:
        self._server.shutdown()
        self._server.server_close()

    def switch(self, fault: str | None) -> None:
        fault = _checked(fault)
        with self._idle:
            if not self._idle.wait_for(lambda: self._serving == 0, timeout=SWITCH_WAIT_S):
                raise TimeoutError(f"the fault proxy still serves {self._serving} requests after {SWITCH_WAIT_S} s")
            self.fault = fault

    @contextmanager
    def serving(self) -> Iterator[str | None]:
        """One forwarded request, until it is answered in full; yields the fault it came under, which it keeps."""
        with self._idle:
            self._serving += 1
            fault = self.fault
        try:
            yield fault
        finally:
            with self._idle:
                self._serving -= 1
                self._idle.notify_all()

    def alone(self) -> bool:
        """Whether the request asking is the only one the proxy serves."""
        with self._idle:
            return self._serving <= 1

    def _handler(self) -> type[BaseHTTPRequestHandler]:
        return type("Handler", (_Handler,), {"proxy": self})


class _Handler(BaseHTTPRequestHandler):
    """What the proxy does with one request: forwards it, and rewrites what comes back as its fault says."""

    proxy: FaultProxy  # set by FaultProxy._handler
    fault: str | None = None  # the proxy's fault when this request came: it stays for the whole answer

    protocol_version = "HTTP/1.0"  # the answer ends when the connection closes: no lengths to rewrite

    def log_message(self, *args):
        pass

    def do_GET(self):
        with self.proxy.serving() as self.fault:
            if self.fault not in tracker.NEVER_ANSWERS:
                self._forward(None)

    def do_POST(self):
        body = self.rfile.read(int(self.headers.get("Content-Length", 0)))
        if self.path == SWITCH_PATH:
            self._switch(body.decode().strip() or None)
            return
        with self.proxy.serving() as self.fault:
            if self.fault not in tracker.NEVER_ANSWERS:  # the connection closes unanswered
                self._forward(body)

    def _switch(self, fault: str | None) -> None:
        try:
            self.proxy.switch(fault)
        except (ValueError, TimeoutError) as e:
            self._head(409, "text/plain", None)
            self.wfile.write(str(e).encode())
            return
        self._head(200, "text/plain", None)
        self.wfile.write(f"fault: {fault}".encode())

    def _forward(self, body: bytes | None) -> None:
        request, path = _json_object(body), self.path
        strip = REQUEST_FAULTS.get(self.fault or "") or tracker.REQUEST_FAULTS.get(self.fault or "")
        if self.fault in tracker.BESIDE_OTHERS and self.proxy.alone():
            strip = None
        if strip is not None and request is not None:
            request = strip(request)
            body = json.dumps(request).encode()
        if self._answered_here(path, request or {}):
            return
        as_chat = False  # a chat request sent on as a completion: its answer goes back as a chat answer
        if self.fault in GENERIC_TEMPLATE and path.endswith(CHAT) and request and not request.get("stream"):
            path, request, as_chat = path.removesuffix(CHAT) + COMPLETIONS, _generic_prompt(request), True
            body = json.dumps(request).encode()
        upstream = http.client.HTTPConnection(*self.proxy.upstream, timeout=600)
        headers = {k: v for k, v in self.headers.items() if k.lower() not in ("host", "connection", "content-length")}
        upstream.request(self.command, path, body=body, headers=headers)
        answer = upstream.getresponse()
        try:
            if "text/event-stream" in (answer.getheader("Content-Type") or ""):
                self._stream(answer, request or {})
            else:
                self._unary(answer, request, as_chat)
        finally:
            upstream.close()

    def _answered_here(self, path: str, request: dict) -> bool:
        """A tracker fault's own answer (an error the server never gave, a stream cut before its first event)."""
        answer = tracker.ANSWERED_HERE.get(self.fault or "", lambda path, request: None)(path, request)
        if answer is not None:
            self._head(answer[0], "application/json", None)
            self.wfile.write(json.dumps(answer[1]).encode())
            return True
        aborted = tracker.STREAM_ABORTED.get(self.fault or "")
        if aborted is not None and aborted(path, request, tracker.prompt_tokens(request, self.proxy.tokenizer)):
            self._head(200, "text/event-stream", None)
            return True
        return False

    def _head(self, status: int, content_type: str, stand_in: str | None) -> None:
        self.send_response(status)
        self.send_header("Content-Type", content_type)
        if stand_in is not None:  # the proxy stands in front of the project's stand-in: still the stand-in
            self.send_header(STAND_IN_HEADER, stand_in)
        self.end_headers()

    def _unary(self, answer, request: dict | None, as_chat: bool) -> None:
        raw = answer.read()
        rewrite = UNARY_FAULTS.get(self.fault or "") or tracker.UNARY_FAULTS.get(self.fault or "")
        path, rewrite_path = SERVER_PATH_FAULTS.get(self.fault or "", ("", None))
        if rewrite_path is not None and self.path == path and answer.status == 200:
            raw = json.dumps(rewrite_path(json.loads(raw))).encode()
        reply = _json_object(raw) if answer.status == 200 else None
        if as_chat and reply is not None:
            raw = json.dumps(_as_chat_answer(reply)).encode()
        if rewrite is not None and request is not None and reply is not None:
            raw = json.dumps(rewrite(request, reply)).encode()
        self._head(answer.status, answer.getheader("Content-Type") or "application/json", answer.getheader(STAND_IN_HEADER))
        self.wfile.write(raw)

    def _stream(self, answer, request: dict) -> None:
        self._head(answer.status, "text/event-stream", answer.getheader(STAND_IN_HEADER))
        rewrite = _stream_rewrite(self.fault or "", request)
        held: Events = []
        gone, sent = False, 0
        delay = EVENT_DELAY_S.get(self.fault or "")
        events = _arrivals(sse_events(answer)) if delay else ((0.0, data) for data in sse_events(answer))
        for k, (arrival, data) in enumerate(events, 1):
            if rewrite is not None:
                if data != DONE:
                    held.append(json.loads(data))
                    if (self.fault or "") not in tracker.STREAM_FAULTS:
                        continue  # the written catalog's rewrites see the whole stream first
                    # the tracker's rewrite the stream so far, sent as it comes: all but its last event, which
                    # the next may still change (a usage moved onto it, a finish-only chunk dropped)
                    done = rewrite(json.loads(json.dumps(held)))
                    data_lines, sent = [json.dumps(e) for e in done[sent:-1]], max(sent, len(done) - 1)
                else:
                    data_lines = [json.dumps(e) for e in rewrite(held)[sent:]] + [DONE]
            else:
                data_lines = [] if data == DONE and self.fault in NO_DONE else [data]
            if gone:
                continue  # draining: the upstream generates on for nobody
            if delay:
                with self.proxy.loop:
                    time.sleep(max(0.0, arrival + k * delay - time.monotonic()))
            try:
                for item in data_lines:
                    self.wfile.write(f"data: {item}\r\n\r\n".encode())
                self.wfile.flush()
            except OSError:
                if self.fault not in DRAINS:
                    return  # closing the upstream connection tells the server the client went
                gone = True
