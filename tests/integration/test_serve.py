"""`pytest-triton-llm serve`: one deployment served by hand, as the fixtures serve it, until SIGTERM or Ctrl-C."""

import argparse
import json
import signal
import subprocess
import sys
import threading
import time
import urllib.request
from http.server import BaseHTTPRequestHandler, HTTPServer

import pytest

from pytest_triton_llm.cli.serve import add_arguments, serve
from pytest_triton_llm.common.progress import Progress
from pytest_triton_llm.stack.runtimes import local

from ..conftest import ROOT, processes_mentioning, seed_engine_cache
from .serving import start_serving

pytestmark = [pytest.mark.integration, pytest.mark.timeout(600)]


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGINT])
def test_serve_prints_three_urls_answers_text_and_stops_leaving_nothing(signum):
    proc, urls, repository = start_serving("smollm2-135m:v1")
    try:
        assert sorted(urls) == ["grpc", "http", "metrics"] and all("127.0.0.1" in u for u in urls.values())
        body = json.dumps({"text_input": "The capital of France is", "max_tokens": 4}).encode()
        request = urllib.request.Request(f"{urls['http']}/v2/models/ensemble/generate", data=body, method="POST")
        with urllib.request.urlopen(request, timeout=60) as reply:
            assert json.loads(reply.read())["text_output"].strip()
        with urllib.request.urlopen(urls["metrics"], timeout=10) as reply:
            assert b"nv_trt_llm_request_metrics" in reply.read()
        assert processes_mentioning(str(repository))
    finally:
        proc.send_signal(signum)
        code = proc.wait(timeout=60)
    assert code == 0
    assert processes_mentioning(str(repository)) == []
    assert not repository.exists()


def test_serve_names_an_unknown_deployment_in_one_line():
    done = subprocess.run(
        [sys.executable, "-m", "pytest_triton_llm.cli", "serve", "nope:v1", "--engines-lock", str(ROOT / "engines.lock")],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 2
    assert done.stderr.strip().splitlines() == [
        f"pytest-triton-llm serve: error: {ROOT / 'engines.lock'}: no deployment named 'nope:v1' (known: "
        "smollm2-135m:inflight, smollm2-135m:llmapi, smollm2-135m:v1)"
    ]


class _NotFound(BaseHTTPRequestHandler):
    def do_GET(self):
        self.send_response(404)
        self.end_headers()

    def log_message(self, *args):
        pass


@pytest.mark.parametrize("keep_warm", ["0", "1"], ids=["started", "kept-warm"])
def test_a_port_another_program_bound_while_the_models_loaded_is_given_up_for_new_ones(keep_warm, tmp_path, monkeypatch, capsys):
    """CI, 2026-12-01: a server's metrics port, free when it was handed out, was bound by another program while the
    models loaded; health said ready and the metrics URL answered 404. Now the server is ready only once its own
    metrics answer, and one that exits "already in use" is started again on new ports, kept warm or not."""
    squatter = HTTPServer(("127.0.0.1", 0), _NotFound)
    threading.Thread(target=squatter.serve_forever, daemon=True).start()
    handed, calls = local.free_ports, []

    def free_ports(count: int) -> list[int]:
        ports = handed(count)
        calls.append(ports)
        if len(calls) == 1:  # the first server's metrics port: the squatter's
            ports[2] = squatter.server_address[1]
        return ports

    said: list[str] = []
    monkeypatch.setattr(local, "free_ports", free_ports)
    seed_engine_cache(tmp_path)
    parser = argparse.ArgumentParser()
    add_arguments(parser)
    args = parser.parse_args(
        [
            "smollm2-135m:v1",
            "--engines-lock",
            str(ROOT / "engines.lock"),
            "--triton-keep-warm",
            keep_warm,
            "--engines-cache",
            str(tmp_path / ".cache" / "pytest-triton-llm"),
        ]
    )
    stop = threading.Event()
    serving = threading.Thread(target=serve, args=(args, Progress(said.append), stop))
    serving.start()
    try:
        printed = ""
        while "ready:" not in printed and serving.is_alive():
            time.sleep(0.2)
            printed += capsys.readouterr().out
        [metrics] = [line.split()[1] for line in printed.splitlines() if line.startswith("metrics:")]
        with urllib.request.urlopen(metrics, timeout=10) as reply:
            assert b"nv_inference_request_success" in reply.read()
    finally:
        stop.set()
        serving.join(timeout=120)
        squatter.shutdown()
    assert any("a port was taken meanwhile; retrying on new ports" in line for line in said), said
