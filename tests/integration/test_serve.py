"""`pytest-triton-llm serve`: one deployment served by hand, as the fixtures serve it, until SIGTERM or Ctrl-C."""

import json
import re
import signal
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest

from ..conftest import ROOT, processes_mentioning

pytestmark = [pytest.mark.integration, pytest.mark.timeout(600)]
READY = re.compile(r"^ready: (\S+) on Triton (\S+) .*; repository (\S+);")


def start_serving(deployment: str, *extra: str) -> tuple[subprocess.Popen, dict[str, str], Path]:
    """The serve process, its printed URLs and its repository, once it says ready."""
    argv = [sys.executable, "-m", "pytest_triton_llm.cli", "serve", deployment, "--engines-lock", str(ROOT / "engines.lock"),
            *extra]  # fmt: skip
    proc = subprocess.Popen(argv, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    urls, deadline = {}, time.monotonic() + 300
    for line in proc.stdout:
        if ready := READY.match(line):
            return proc, urls, Path(ready.group(3))
        if ":" in line and line.split(":", 1)[0] in ("http", "grpc", "metrics"):
            name, url = line.split(":", 1)
            urls[name] = url.strip()
        assert time.monotonic() < deadline, "serve never said ready"
    raise AssertionError(f"serve exited with {proc.wait()} before it was ready")


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
    done = subprocess.run([sys.executable, "-m", "pytest_triton_llm.cli", "serve", "nope:v1", "--engines-lock",
                           str(ROOT / "engines.lock")], capture_output=True, text=True, timeout=60)  # fmt: skip
    assert done.returncode == 2
    assert done.stderr.strip().splitlines() == [
        f"pytest-triton-llm serve: error: {ROOT / 'engines.lock'}: no deployment named 'nope:v1' (known: "
        "smollm2-135m:inflight, smollm2-135m:v1)"
    ]
