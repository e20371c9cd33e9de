"""--triton-keep-warm through the real local runtime: a session leaves its server warm, the next session serving the
same repository takes it instead of starting one, a session with a stand-in fault gets a server of its own that stops
with it, and the keeper stops an idle server by itself."""

import json
import subprocess
import sys
import time

import pytest

pytestmark = [pytest.mark.integration, pytest.mark.timeout(600)]

ANSWER = """
def test_answer(triton_llm):
    assert "Paris" in triton_llm.client.generate(triton_llm.chat_prompt("What is the capital of France?"), 24).text
"""
IDLE_S = "4"


def session(project, name: str, *args: str) -> dict:
    report = project.path / f"{name}.json"
    result = project.runpytest_subprocess(
        "-p",
        "no:cacheprovider",
        "--deployment",
        "smollm2-135m:v1",
        "--triton-keep-warm",
        IDLE_S,
        "--triton-llm-report",
        str(report),
        *args,
        timeout=300,
    )
    result.assert_outcomes(passed=1)
    return json.loads(report.read_text())["deployments"]["smollm2-135m:v1"]


def warm_listing(project) -> str:
    cache = project.path / ".cache" / "pytest-triton-llm"
    argv = [sys.executable, "-m", "pytest_triton_llm.cli", "cache", "warm", "--cache-dir", str(cache)]
    return subprocess.run(argv, capture_output=True, text=True, check=True, timeout=60).stdout


@pytest.mark.usefixtures("warm_cache")
def test_a_later_session_takes_the_warm_server_and_an_idle_one_stops(project):
    project.makepyfile(test_answer=ANSWER)
    first = session(project, "first")
    second = session(project, "second")
    assert first["warm"]["reused"] is False and second["warm"]["reused"] is True
    assert second["warm"]["slot"] == first["warm"]["slot"] and second["warm"]["since"] == first["warm"]["since"]
    assert second["server_ready_s"] < first["server_ready_s"]
    faulty = session(project, "faulty", "--stand-in-fault", "stream_drops_leading_space")
    assert "warm" not in faulty  # a server that reproduces a fault is its session's alone, and stops with it
    deadline = time.monotonic() + 60
    while "no warm servers" not in (listing := warm_listing(project)) and time.monotonic() < deadline:
        time.sleep(0.5)
    assert "no warm servers" in listing, listing  # the keeper stopped its idle server
