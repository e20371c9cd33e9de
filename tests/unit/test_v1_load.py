"""The load engine's /v1 target and the perf workload's /v1 bodies: how a streamed answer becomes a timed record (tokens
by usage where asked, else content chunks), what fails a request, and which fields hold an answer's length per family.
A canned SSE server on 127.0.0.1 stands for the endpoint (the real one is in the /v1 perf suite's CI run)."""

from __future__ import annotations

import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from pytest_triton_llm.triton.load import run_load
from pytest_triton_llm.openai.contract import load_families
from pytest_triton_llm.perf.workload import PerfRequest
from pytest_triton_llm.openai.load import V1Target, v1_bodies

TEXTS = ["Hel", "lo", "", " world"]  # an empty delta (a held-back piece) is not a content chunk
USAGE = {"prompt_tokens": 3, "completion_tokens": 5, "total_tokens": 8}


class _Handler(BaseHTTPRequestHandler):
    usage, done, seen = True, True, []

    def log_message(self, *args):
        pass

    def do_POST(self):
        request = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        self.seen.append((self.path, request, self.headers.get("Authorization")))
        if request.get("max_tokens") == 0:
            data = b'{"error": {"message": "max_tokens must be at least 1"}}'
            self.send_response(400)
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)
            return
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        self.end_headers()
        chat = self.path.endswith("/chat/completions")
        for text in TEXTS:
            choice = {"index": 0, "delta": {"content": text}} if chat else {"index": 0, "text": text}
            self.wfile.write(f"data: {json.dumps({'choices': [choice]})}\n\n".encode())
        if self.usage:
            self.wfile.write(f"data: {json.dumps({'choices': [], 'usage': USAGE})}\n\n".encode())
        if self.done:
            self.wfile.write(b"data: [DONE]\n\n")


@pytest.fixture
def url():
    _Handler.usage, _Handler.done, _Handler.seen = True, True, []
    httpd = ThreadingHTTPServer(("127.0.0.1", 0), _Handler)
    threading.Thread(target=httpd.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{httpd.server_address[1]}/v1"
    httpd.shutdown()


def _one(target: V1Target, body: dict):
    [record], seconds = run_load(target, [body], concurrency=1)
    return record, seconds


def test_a_streamed_answer_is_timed_per_content_chunk_and_counted_by_its_usage_when_asked(url):
    body = {"model": "m", "prompt": "p", "max_tokens": 5, "stream": True, "stream_options": {"include_usage": True}}
    record, seconds = _one(V1Target(url, (("Authorization", "Bearer t"),)), body)
    assert (record.error, record.streamed, len(record.token_times), record.tokens) == (None, True, 3, 5)
    assert record.sent < record.token_times[0] <= record.token_times[-1] <= record.done and seconds > 0
    assert _Handler.seen == [("/v1/completions", body, "Bearer t")]


def test_without_usage_asked_the_tokens_are_the_content_chunks_on_chat_too(url):
    body = {"model": "m", "messages": [{"role": "user", "content": "p"}], "max_tokens": 5, "stream": True}
    record, _ = _one(V1Target(url, path="/chat/completions"), body)
    assert (record.error, len(record.token_times), record.tokens) == (None, 3, 3)


def test_usage_asked_for_and_not_sent_fails_the_request(url):
    _Handler.usage = False
    record, _ = _one(V1Target(url), {"prompt": "p", "stream": True, "stream_options": {"include_usage": True}})
    assert record.error == "stream_options.include_usage was asked for and no chunk carried usage"


def test_a_stream_that_ends_without_done_fails_the_request(url):
    _Handler.done = False
    record, _ = _one(V1Target(url), {"prompt": "p", "stream": True})
    assert record.error == "the stream ended without data: [DONE]"


def test_an_error_status_fails_the_request_with_the_status_and_the_body(url):
    record, _ = _one(V1Target(url), {"prompt": "p", "max_tokens": 0, "stream": True})
    assert record.error == f"POST {url}/completions: HTTP 400: " + '{"error": {"message": "max_tokens must be at least 1"}}'


def test_a_target_path_other_than_the_two_completions_is_refused():
    with pytest.raises(ValueError, match=r"^path must be /completions or /chat/completions, not '/responses'$"):
        V1Target("http://127.0.0.1:1/v1", path="/responses")


REQUESTS = [PerfRequest([101, 102], 4), PerfRequest([103], 6)]


def _bodies(family: str, fixed_output: bool = True):
    return v1_bodies(REQUESTS, {"model": "m", "temperature": 0.0}, lambda ids: f"ids{ids}", load_families()[family], fixed_output)


def test_llama_cpp_python_holds_lengths_by_min_tokens_and_is_not_asked_for_usage():
    bodies, held = _bodies("llama-cpp-python")
    assert held == "min_tokens"
    assert bodies == [
        {"model": "m", "temperature": 0.0, "prompt": "ids[101, 102]", "max_tokens": 4, "stream": True, "min_tokens": 4},
        {"model": "m", "temperature": 0.0, "prompt": "ids[103]", "max_tokens": 6, "stream": True, "min_tokens": 6},
    ]


def test_trtllm_serve_holds_lengths_by_ignore_eos_and_is_asked_for_usage():
    bodies, held = _bodies("trtllm-serve")
    assert held == "ignore_eos"
    assert bodies[1] == {
        "model": "m",
        "temperature": 0.0,
        "prompt": "ids[103]",
        "max_tokens": 6,
        "stream": True,
        "stream_options": {"include_usage": True},
        "ignore_eos": True,
    }


def test_a_family_that_honours_neither_field_says_why_the_lengths_are_not_held():
    families = load_families()
    bodies, held = _bodies("triton-openai")
    why = "; ".join(families["triton-openai"].why_not(f) for f in ("ignore_eos", "min_tokens"))
    assert held == f"not held: {why}"
    assert all("ignore_eos" not in b and "min_tokens" not in b for b in bodies)
    assert _bodies("trtllm-serve", fixed_output=False)[1] == "not asked: the workload's fixed_output is false"
