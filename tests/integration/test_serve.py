"""`pytest-triton-llm serve`: one deployment served by hand, as the fixtures serve it, until SIGTERM or Ctrl-C."""

import json
import signal
import subprocess
import sys
import urllib.request

import pytest

from ..conftest import ROOT, processes_mentioning
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
