"""The container runtime through real containers of the locally built CPU image (images/build-cpu-image.sh).

Skipped, saying why, where no docker daemon answers; the image is built on first use (minutes)."""

import json
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

pytestmark = pytest.mark.container
ROOT = Path(__file__).resolve().parents[2]
LABEL = "io.github.pytest-triton-llm.owner"


def containers_of(owner_pid: int) -> list[str]:
    out = subprocess.run(
        ["docker", "ps", "-a", "--filter", f"label={LABEL}", "--format", "{{.Names}} {{.Labels}}"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    return [line for line in out.splitlines() if f":{owner_pid}:" in line]


def server_logs(result: pytest.RunResult) -> str:
    """The end of each server log a failed run's output names: pytester's directories do not outlive later runs, and
    a server that died at its start (exit 139 once, 2026-12-03) leaves nothing else to read."""
    tails = []
    for path in sorted(set(re.findall(r"log (\S+tritonserver\.log)", result.stdout.str()))):
        lines = Path(path).read_text(errors="replace").splitlines()[-40:] if Path(path).is_file() else ["(gone)"]
        tails.append(f"--- {path}\n" + "\n".join(lines))
    return "\n".join(tails)


def test_functional_tests_pass_in_a_container_and_it_is_removed(project, cpu_image):
    project.makepyfile(
        test_c="""
def test_answer(triton_llm):
    assert "Paris" in triton_llm.client.generate(triton_llm.chat_prompt("What is the capital of France?"), 16).text

def test_server_is_the_images(triton_llm):
    assert triton_llm.server.version == "2.51.0" and triton_llm.server.endpoints.http.startswith("127.0.0.1:")
"""
    )
    result = project.runpytest_subprocess(
        "--triton-image", cpu_image, "--deployment", "smollm2-135m:v1", "--triton-llm-report", "r.json", timeout=900
    )
    result.assert_outcomes(passed=2)
    result.stdout.fnmatch_lines(["*Triton 2.51.0 (container)*"])
    report = json.loads((project.path / "r.json").read_text())
    assert report["run"]["options"]["image"] == cpu_image
    assert report["deployments"]["smollm2-135m:v1"]["runtime"] == "container"
    log = Path(report["deployments"]["smollm2-135m:v1"]["server_log"]).read_text()
    assert log.startswith("# docker run") and "--publish=127.0.0.1::8000" in log and "--volume=" in log
    # this session's containers only: another xdist worker's test may have one of its own running meanwhile
    owner = re.search(rf"--label={re.escape(LABEL)}=(\S+)", log).group(1)
    assert not subprocess.run(
        ["docker", "ps", "-aq", "--filter", f"label={LABEL}={owner}"], capture_output=True, text=True
    ).stdout.strip()


def test_after_sigkill_the_next_session_removes_the_container(project, cpu_image, tmp_path):
    project.makepyfile(test_wait="def test_wait(triton_llm):\n    import time; time.sleep(600)\n")
    argv = [
        sys.executable,
        "-m",
        "pytest",
        "-p",
        "no:cacheprovider",
        "--triton-image",
        cpu_image,
        "--deployment",
        "smollm2-135m:v1",
        "test_wait.py",
    ]
    proc = subprocess.Popen(argv, cwd=project.path, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        for line in proc.stdout:  # wait until the server is up and the test sleeps
            if "ready in" in line:
                break
        else:
            pytest.fail("the session never served its deployment")
        assert containers_of(proc.pid)
        proc.send_signal(signal.SIGKILL)
        proc.wait(30)
    finally:
        proc.kill()
    time.sleep(1)
    assert containers_of(proc.pid), "SIGKILL leaves the container running: the next session must reap it"
    project.makepyfile(test_next="def test_nothing(triton_llm):\n    pass\n")
    result = project.runpytest_subprocess(
        "--triton-image", cpu_image, "--deployment", "smollm2-135m:v1", "test_next.py", timeout=900
    )
    assert result.parseoutcomes().get("passed") == 1, server_logs(result)
    result.stdout.fnmatch_lines([f"*removed container * left by a killed session (pid {proc.pid})*"])
    assert not containers_of(proc.pid)


def test_a_malformed_image_is_a_usage_error(project):
    result = project.runpytest_subprocess("--triton-image", "latest")
    assert result.ret == 4
    result.stderr.fnmatch_lines(["*--triton-image 'latest': give YY.MM-trtllm*"])
