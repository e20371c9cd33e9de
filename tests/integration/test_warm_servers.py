"""--triton-keep-warm through the real local runtime: a session leaves its server warm, the next session serving the
same repository takes it instead of starting one, a session with a stand-in fault takes it with the fault switched on
and leaves it clean (or, for a fault the catalog gives a server of its own, starts one that stops with it), and the
keeper stops an idle server by itself."""

import json
import subprocess
import sys
import time

import pytest

pytestmark = [pytest.mark.integration, pytest.mark.timeout(600)]

ANSWER = """
def test_answer(triton_llm):
    assert "Paris" in triton_llm.client.generate(triton_llm.chat_prompt("What is the capital of France?"), 24).text

def test_four_tokens(triton_llm):
    ids = triton_llm.tokenizer.encode("Once upon a time, in a land far away,")
    assert len(triton_llm.client.generate_ids(ids, 4).token_ids) == 4  # max_tokens_off_by_one returns 5
"""
# Long enough that a session starting on a loaded machine (pytest and the plugin imported, tests collected) still
# finds the previous one's server warm: at 4 s a third session on 2 busy cores came too late (2026-12-03).
IDLE_S = "30"


def session(project, name: str, *args: str, failed: int = 0) -> dict:
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
    result.assert_outcomes(passed=1 - failed, failed=failed)
    return json.loads(report.read_text())["deployments"]["smollm2-135m:v1"]


def warm_listing(project) -> str:
    cache = project.path / ".cache" / "pytest-triton-llm"
    argv = [sys.executable, "-m", "pytest_triton_llm.cli", "cache", "warm", "--cache-dir", str(cache)]
    return subprocess.run(argv, capture_output=True, text=True, check=True, timeout=60).stdout


@pytest.mark.usefixtures("warm_cache")
def test_a_later_session_takes_the_warm_server_and_an_idle_one_stops(project):
    project.makepyfile(test_warm=ANSWER)
    first = session(project, "first", "-k", "answer")
    second = session(project, "second", "-k", "answer")
    assert first["warm"]["reused"] is False and second["warm"]["reused"] is True
    assert second["warm"]["slot"] == first["warm"]["slot"] and second["warm"]["since"] == first["warm"]["since"]
    assert second["server_ready_s"] < first["server_ready_s"]
    switched = session(project, "switched", "-k", "four_tokens", "--stand-in-fault", "max_tokens_off_by_one", failed=1)
    assert switched["warm"]["slot"] == first["warm"]["slot"] and switched["warm"]["fault_switched"] == "max_tokens_off_by_one"
    assert switched["stand_in_fault"]["injected"] is True
    after = session(project, "after", "-k", "four_tokens")  # the same server, clean again
    assert after["warm"]["slot"] == first["warm"]["slot"] and "fault_switched" not in after["warm"]
    faulty = session(project, "faulty", "-k", "answer", "--stand-in-fault", "bls_drops_temperature")
    assert "warm" not in faulty  # a fault read while its model loads: a server of its own, which stops with it
    deadline = time.monotonic() + 60
    while "no warm servers" not in (listing := warm_listing(project)) and time.monotonic() < deadline:
        time.sleep(0.5)
    assert "no warm servers" in listing, listing  # the keeper stopped its idle server
