"""The whole path through the real local runtime: lock -> cached engine -> repository ->
tritonserver (from the nvidia-pytriton wheel) -> client, driven as a user drives it.

Uses the default engine cache, so the engine that `pytest suites` built is reused.
"""

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from pytest_triton_llm.stack.runtimes.tritonserver_wheel import locate

from ..conftest import processes_mentioning

pytestmark = [pytest.mark.integration, pytest.mark.timeout(900)]  # a hung server fails the test, not the CI job

SESSION_TESTS = """
from pathlib import Path

def test_answer(triton_llm):
    prompt = triton_llm.chat_prompt("What is the capital of France?")
    assert "Paris" in triton_llm.client.generate(prompt, 24).text
    # the server's python stubs and the shared memory named with its prefix, for the session's caller to look at
    process = triton_llm.server.process
    group = [p for p in Path("/proc").glob("[0-9]*") if p.name != str(process.pid) and _pgid(p) == process.pid]
    stubs = [p for p in group if (p / "comm").read_text().strip().startswith("triton_python")]
    regions = list(Path("/dev/shm").glob(process.shm_prefix + "*"))
    Path(__file__).with_name("shm.txt").write_text(f"{process.shm_prefix} {len(stubs)} {len(regions)}")

def _pgid(proc):
    try:
        return int((proc / "stat").read_text().rsplit(")", 1)[1].split()[2])
    except (OSError, IndexError):
        return None

def test_fails_on_purpose(triton_llm):
    assert triton_llm.client.generate("Hello", 2).text == "this is not what the model says"
"""


V1_ONLY = ("--deployment", "smollm2-135m:v1")  # one server per session keeps these tests short


def run_session(project, *args: str) -> pytest.RunResult:
    return project.runpytest_subprocess("-p", "no:cacheprovider", *V1_ONLY, *args, timeout=600)


@pytest.mark.usefixtures("warm_cache")
def test_a_session_serves_reports_and_cleans_up(project):
    project.makepyfile(test_session=SESSION_TESTS)
    report = project.path / "out" / "r.json"
    result = run_session(project, "--triton-llm-report", str(report))
    result.assert_outcomes(passed=1, failed=1)
    out = result.stdout.str()
    # the failing test carries the server log
    assert "tritonserver log of smollm2-135m:v1 (last 40 lines" in out
    assert "Started GRPCInferenceService at 127.0.0.1:" in out
    # the summary names the engine, the server and the start-up time
    result.stdout.fnmatch_lines(
        [
            "*= triton-llm =*",
            "smollm2-135m:v1 *Triton 2.51.0 (local)*",
            "session start-up: * s until the first deployment was ready; the first test ran at * s",
        ]
    )
    data = json.loads(report.read_text())
    deployment = data["deployments"]["smollm2-135m:v1"]
    assert deployment["server_version"] == "2.51.0" and len(deployment["engine_digest"]) == 64
    assert {t["nodeid"].split("::")[1]: t["outcome"] for t in data["tests"]} == {
        "test_answer[smollm2-135m:v1]": "passed",
        "test_fails_on_purpose[smollm2-135m:v1]": "failed",
    }
    assert data["summary"] == {"passed": 1, "failed": 1}
    assert 0 < data["run"]["startup_s"] <= data["run"]["first_test_s"]
    assert processes_mentioning(str(project.path)) == []
    # one shared memory region a stub while it served, none left once it stopped, though its BLS never unloads in time
    prefix, stubs, regions = (project.path / "shm.txt").read_text().split()
    assert prefix.startswith("triton_llm_") and int(stubs) == int(regions) > 1, (stubs, regions)
    assert list(Path("/dev/shm").glob(prefix + "*")) == []


def test_a_second_session_reuses_the_cached_engine(project):
    project.makepyfile(test_session=SESSION_TESTS.split("def test_fails")[0])
    run_session(project).assert_outcomes(passed=1)  # builds the engine if this machine has none yet
    again = run_session(project)
    again.assert_outcomes(passed=1)
    again.stdout.fnmatch_lines(["*engine smollm2-135m: reusing *", "*smollm2-135m * (cached *"])
    assert "building" not in again.stdout.str()


@pytest.mark.usefixtures("warm_cache")
def test_the_wheels_own_binary_named_by_triton_binary_serves_like_the_default(project):
    project.makepyfile(test_session=SESSION_TESTS.split("def test_fails")[0])
    result = run_session(project, "--triton-binary", str(locate().binary))
    result.assert_outcomes(passed=1)  # its python backend gets this Python's stub, as the default's does
    result.stdout.fnmatch_lines(["triton-llm: local runtime: tritonserver * (nvidia-pytriton 0.7.0 (--triton-binary); *"])


@pytest.mark.usefixtures("warm_cache")
def test_ctrl_c_leaves_no_server_behind(project, tmp_path):
    started = tmp_path / "started"
    project.makepyfile(
        test_wait=f"""
import pathlib, time
def test_wait(triton_llm):
    pathlib.Path({str(started)!r}).write_text("ok")
    time.sleep(300)
"""
    )
    basetemp = project.path / "basetemp"  # repositories and logs: every server process names it
    argv = [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-s", f"--basetemp={basetemp}", *V1_ONLY]
    # a terminal's Ctrl-C: SIGINT must not be inherited as ignored (as in jobs a script sends to the background)
    proc = subprocess.Popen(
        argv,
        cwd=project.path,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
    )
    try:
        deadline = time.monotonic() + 300
        while not started.exists():
            assert proc.poll() is None, proc.stdout.read()
            assert time.monotonic() < deadline, "the server never became ready"
            time.sleep(0.2)
        assert [p for p in processes_mentioning(str(project.path)) if "triton_python_backend_stub" in p]
        proc.send_signal(signal.SIGINT)
        try:
            output, _ = proc.communicate(timeout=240)
        except subprocess.TimeoutExpired:  # SIGABRT: pytest's faulthandler prints where every thread is stuck
            proc.send_signal(signal.SIGABRT)
            output, _ = proc.communicate(timeout=60)
            pytest.fail(f"pytest was still running 240 s after Ctrl-C; its output and threads:\n{output[-20000:]}")
    finally:
        if proc.poll() is None:
            os.kill(proc.pid, signal.SIGKILL)
    assert proc.returncode == pytest.ExitCode.INTERRUPTED, output
    assert "KeyboardInterrupt" in output
    assert processes_mentioning(str(project.path)) == []
