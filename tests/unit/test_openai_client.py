"""The /v1 client and the endpoint's options: URLs, headers, server-sent events, error bodies, family recognition.
A canned HTTP server on 127.0.0.1 stands for the endpoint (the real one, llama-cpp-python's, is in
tests/integration/test_openai_endpoint.py)."""

from __future__ import annotations

import json
import subprocess
import sys
import threading
import urllib.error
import urllib.request
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from pytest_triton_llm.openai.client import STAND_IN_HEADER, OpenAIEndpoint, OpenAIRequestError, OpenAIURLError
from pytest_triton_llm.openai.fault_proxy import FaultProxy
from pytest_triton_llm.openai.target import OpenAITarget, OpenAITargetError, openai_options
from pytest_triton_llm.common.usage import OptionError

from ..conftest import ROOT

CHUNKS = [
    {"choices": [{"index": 0, "text": "Hello", "finish_reason": None}]},
    {"choices": [{"index": 0, "text": " world", "finish_reason": None}]},
    {"choices": [{"index": 0, "text": "", "finish_reason": "length"}]},
    {"choices": [], "usage": {"prompt_tokens": 3, "completion_tokens": 2, "total_tokens": 5}},
]


class _Handler(BaseHTTPRequestHandler):
    owned_by = "me"
    model_id = "m"
    stand_in: str | None = None  # the stand-in header's value, where the canned server plays the project's stand-in
    seen: list = []

    def log_message(self, *args):  # quiet
        pass

    def _json(self, status: int, body) -> None:
        data = json.dumps(body).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        if self.stand_in is not None:
            self.send_header(STAND_IN_HEADER, self.stand_in)
        self.end_headers()
        self.wfile.write(data)

    def do_GET(self):
        self.seen.append((self.path, dict(self.headers)))
        self._json(200, {"object": "list", "data": [{"id": self.model_id, "object": "model", "owned_by": self.owned_by}]})

    def do_POST(self):
        body = self.rfile.read(int(self.headers["Content-Length"]))
        self.seen.append((self.path, dict(self.headers)))
        try:
            request = json.loads(body)
        except ValueError:
            self._json(500, {"error": {"message": "not JSON", "type": "internal_server_error"}})
            return
        if request.get("prompt") == "refuse me":
            self._json(400, {"error": {"message": "refused", "type": "invalid_request_error"}})
            return
        if not request.get("stream"):
            self._json(200, {"choices": [{"text": "Hello world", "finish_reason": "length"}], "usage": CHUNKS[-1]["usage"]})
            return
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        self.end_headers()
        self.wfile.write(b": a comment line, skipped\r\n\r\n")
        for chunk in CHUNKS:
            self.wfile.write(f"data: {json.dumps(chunk)}\r\n\r\n".encode())
            self.wfile.flush()
        self.wfile.write(b"data: [DONE]\r\n\r\n")


@pytest.fixture
def server():
    httpd = ThreadingHTTPServer(("127.0.0.1", 0), _Handler)
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    _Handler.seen = []
    yield f"http://127.0.0.1:{httpd.server_address[1]}/v1"
    httpd.shutdown()


def test_a_stream_is_read_event_by_event_with_its_finish_reason_usage_and_done(server):
    streamed = OpenAIEndpoint(server).stream("/completions", {"model": "m", "prompt": "x"})
    assert (streamed.deltas, streamed.text) == (["Hello", " world"], "Hello world")
    assert (streamed.finish_reason, streamed.usage_chunks, streamed.done, streamed.events) == ("length", 1, True, 4)
    assert streamed.usage == {"prompt_tokens": 3, "completion_tokens": 2, "total_tokens": 5}
    assert len(streamed.times) == 2 and streamed.sent_s <= streamed.times[0] <= streamed.times[1]


def test_a_stream_closed_early_stops_after_that_many_text_chunks(server):
    streamed = OpenAIEndpoint(server).stream("/completions", {"prompt": "x"}, stop_after=1)
    assert (streamed.deltas, streamed.closed_early, streamed.done) == (["Hello"], True, False)


def test_every_request_carries_the_headers_and_the_stream_asks_for_events(server):
    endpoint = OpenAIEndpoint(server, {"Authorization": "Bearer s3cret"})
    endpoint.models()
    endpoint.stream("/completions", {"prompt": "x"})
    [(get_path, get_headers), (post_path, post_headers)] = _Handler.seen
    assert (get_path, post_path) == ("/v1/models", "/v1/completions")
    assert get_headers["Authorization"] == post_headers["Authorization"] == "Bearer s3cret"
    assert post_headers["Accept"] == "text/event-stream"


def test_a_raw_body_is_sent_as_it_is_and_the_answer_kept_whatever_its_status(server):
    reply = OpenAIEndpoint(server).request("POST", "/completions", "{not json")
    assert (reply.status, reply.body["error"]["message"]) == (500, "not JSON")


def test_an_error_status_raises_with_the_status_and_the_body_the_server_sent(server):
    endpoint = OpenAIEndpoint(server)
    for call in (endpoint.complete, lambda body: endpoint.stream("/completions", body)):
        with pytest.raises(OpenAIRequestError) as caught:
            call({"prompt": "refuse me"})
        assert (caught.value.status, caught.value.body["error"]["message"]) == (400, "refused")


@pytest.mark.parametrize(
    ("url", "says"),
    [
        ("grpc://localhost:8001", "expected http://HOST:PORT/v1"),
        ("http://localhost:8000", "must end in /v1"),
        ("https://user:pw@localhost:8000/v1", "must not hold credentials"),
    ],
)
def test_an_openai_url_that_is_not_a_v1_address_is_refused_saying_what_to_give(url, says):
    with pytest.raises(OpenAIURLError, match=says):
        OpenAIEndpoint(url)
    with pytest.raises(OptionError, match=says):
        openai_options(url, [], None, None, None)


def test_openai_options_are_checked_and_refused_without_a_url(tmp_path):
    with pytest.raises(OptionError, match="apply to --openai-url"):
        openai_options(None, ["Authorization: Bearer x"], None, None, None)
    with pytest.raises(OptionError, match="--openai-engine apply to --openai-url"):
        openai_options(None, [], None, None, None, "smollm2-135m")
    with pytest.raises(OptionError, match="--openai-header number 1: expected 'NAME: VALUE'"):
        openai_options("http://h:1/v1", ["no colon"], None, None, None)
    with pytest.raises(OptionError, match="no such file"):
        openai_options("http://h:1/v1", [], str(tmp_path / "ca.pem"), None, None)
    with pytest.raises(OptionError, match="not a family of openai_families.toml"):
        openai_options("http://h:1/v1", [], None, None, "vllm")
    options = openai_options("http://h:1/v1/", ["Authorization: Bearer x"], None, None, "trtllm-serve")
    assert (options.url, options.family) == ("http://h:1/v1", "trtllm-serve")
    assert "Bearer" not in repr(options)  # a header value may be a secret


def test_the_family_is_recognised_by_owned_by_and_an_unknown_owner_asks_for_openai_family(server):
    _Handler.owned_by = "me"
    target = OpenAITarget(openai_options(server, [], None, None, None))
    assert (target.model, target.family_name) == ("m", "llama-cpp-python")
    assert target.greedy(prompt="x") == {"model": "m", "temperature": 0.0, "repeat_penalty": 1.0, "prompt": "x"}
    _Handler.owned_by = "someone"
    try:
        with pytest.raises(OpenAITargetError, match="pass --openai-family"):
            OpenAITarget(openai_options(server, [], None, None, None))
        assert OpenAITarget(openai_options(server, [], None, None, "trtllm-serve")).greedy() == {"model": "m", "temperature": 0.0}
    finally:
        _Handler.owned_by = "me"


def test_an_endpoint_that_marks_its_answers_as_the_projects_stand_in_is_named_so_and_the_fault_proxy_keeps_the_mark(server):
    _Handler.owned_by = "tensorrt_llm"
    try:
        real = OpenAITarget(openai_options(server, [], None, None, None))
        assert (real.stand_in, real.deployment) == (None, "openai:trtllm-serve")
        _Handler.stand_in = "0.1.0"
        proxy = FaultProxy(server, None)
        try:
            for url in (server, proxy.start()):
                target = OpenAITarget(openai_options(url, [], None, None, None))
                assert (target.stand_in, target.deployment) == ("0.1.0", "openai:trtllm-serve:stand-in")
                assert target.describe().endswith("; served by the project's stand-in 0.1.0, not by trtllm-serve")
        finally:
            proxy.stop()
    finally:
        _Handler.owned_by, _Handler.stand_in = "me", None


def test_the_tokenizer_is_tokenizers_else_the_model_ids_and_one_not_there_says_what_to_pass(server, tmp_path):
    """No fetch from the Hub here: both names are directories without a tokenizer."""
    empty = tmp_path / "empty"
    empty.mkdir()
    files = "tokenizer.json, tokenizer_config.json or tokenizer.model"
    given = OpenAITarget(openai_options(server, [], None, None, None, None, str(empty)))
    with pytest.raises(OpenAITargetError) as caught:
        _ = given.tokenizer
    assert str(caught.value) == f"--tokenizer {empty}: the directory holds no tokenizer ({files})"
    _Handler.model_id = str(tmp_path)
    try:
        with pytest.raises(OpenAITargetError) as caught:
            _ = OpenAITarget(openai_options(server, [], None, None, None)).tokenizer
    finally:
        _Handler.model_id = "m"
    said = f"the model id {tmp_path}: the directory holds no tokenizer ({files}); pass --tokenizer DIR_OR_HF_ID"
    assert str(caught.value) == said


def test_the_v1_accuracy_test_skips_without_openai_engine_before_loading_any_article(server):
    """No dataset option and no network needed: the skip comes before the CNN/DailyMail fixture would load one."""
    argv = [sys.executable, "-m", "pytest", "suites/test_accuracy.py::TestOverV1", "--openai-url", server]
    argv += ["-p", "no:cacheprovider", "-q", "-rs"]
    done = subprocess.run(argv, cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0 and done.stdout.splitlines()[-1].startswith("1 skipped"), done.stdout[-2000:]
    assert "no --openai-engine: ROUGE thresholds are an engine's of the lock" in done.stdout


def test_an_unreachable_endpoint_is_one_line_naming_the_url():
    with pytest.raises(OpenAITargetError, match=r"--openai-url http://127.0.0.1:9/v1: GET /v1/models failed"):
        OpenAITarget(openai_options("http://127.0.0.1:9/v1", [], None, None, None))


def _post(url: str, body: bytes) -> tuple[int, bytes]:
    request = urllib.request.Request(url, data=body, method="POST", headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(request, timeout=10) as answer:
            return answer.status, answer.read()
    except urllib.error.HTTPError as e:
        return e.code, e.read()


def test_the_fault_proxy_switches_its_fault_by_a_post_and_only_once_the_requests_it_serves_have_ended(server):
    proxy = FaultProxy(server, None)
    url = proxy.start()
    completion = json.dumps({"model": "m", "prompt": "x", "max_tokens": 2}).encode()
    try:
        assert "model" not in json.loads(_post(url + "/completions", completion)[1])  # the canned answer names none
        status, text = _post(proxy.switch_url, b"no_such_fault")
        assert (status, proxy.fault) == (409, None) and b"no /v1 fault 'no_such_fault'" in text
        assert _post(proxy.switch_url, b"response_names_another_model") == (200, b"fault: response_names_another_model")
        assert json.loads(_post(url + "/completions", completion)[1])["model"] == "/checkpoints/m"
        with proxy.serving():  # a request still answering (a stream drained for a gone client): the switch waits
            switch = threading.Thread(target=_post, args=(proxy.switch_url, b""))
            switch.start()
            switch.join(0.5)
            assert switch.is_alive() and proxy.fault == "response_names_another_model"
        switch.join(10)
        assert proxy.fault is None
    finally:
        proxy.stop()
