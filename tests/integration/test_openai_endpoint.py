"""The OpenAI endpoint path through a real /v1 server: llama-cpp-python's, on the embedded default's GGUF, behind
a bearer token and TLS (a self-signed certificate made here), and `pytest-triton-llm serve-llama-cpp` as users and
CI start it (skipped, failed under TRITON_LLM_CI_TOOLS=1, where the llama-cpp extra is not installed); and
`pytest-triton-llm serve-trtllm-stand-in`, the project's trtllm-serve stand-in, started the same way."""

from __future__ import annotations

import contextlib
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from pytest_triton_llm.openai import llama_cpp as llama_cpp_server
from pytest_triton_llm.openai.client import OpenAIEndpoint, OpenAIRequestError
from pytest_triton_llm.openai.target import OpenAITarget, openai_options
from pytest_triton_llm.common.progress import Progress
from pytest_triton_llm.common.prompts import load_prompts
from pytest_triton_llm.stack.repository.stand_in import version

from ..conftest import BUILT_CACHE
from .conftest import ROOT

pytestmark = [pytest.mark.integration, pytest.mark.timeout(600)]


def _self_signed(tmp_path: Path) -> tuple[Path, Path]:
    cert, key = tmp_path / "cert.pem", tmp_path / "key.pem"
    subprocess.run(
        [
            "openssl",
            "req",
            "-x509",
            "-newkey",
            "rsa:2048",
            "-nodes",
            "-days",
            "1",
            "-subj",
            "/CN=127.0.0.1",
            "-addext",
            "subjectAltName=IP:127.0.0.1",
            "-keyout",
            str(key),
            "-out",
            str(cert),
        ],
        check=True,
        capture_output=True,
    )
    return cert, key


def test_an_endpoint_behind_a_token_and_tls_is_reached_with_openai_header_and_ca_file(gguf, tmp_path):
    cert, key = _self_signed(tmp_path)
    server = llama_cpp_server.start(
        gguf, tmp_path / "llama.log", tmp_path / "run", Progress(), api_key="s3cret", tls=(cert, key), ca_file=str(cert)
    )
    try:
        target = OpenAITarget(openai_options(server.url, ["Authorization: Bearer s3cret"], str(cert), None, None))
        assert (target.model, target.family_name) == (str(gguf), "llama-cpp-python")
        answer = target.endpoint.complete(target.completion("The capital of France is", 4))
        assert answer.usage["completion_tokens"] == 4
        with pytest.raises(OpenAIRequestError) as refused:
            OpenAIEndpoint(server.url, {}, str(cert)).complete(target.completion("The capital of France is", 4))
        assert refused.value.status == 401
        assert "s3cret" not in (tmp_path / "llama.log").read_text()
    finally:
        server.stop()


@contextlib.contextmanager
def _served(command: str, *options: str):
    """`pytest-triton-llm COMMAND` as a user starts it: yields the options its `ready:` line prints ({"--openai-url":
    URL, ...}); then SIGTERM, and the command must exit 0 with its server gone."""
    argv = [sys.executable, "-m", "pytest_triton_llm.cli", command, "--engines-lock", str(ROOT / "engines.lock")]
    proc = subprocess.Popen(
        [*argv, "--engines-cache", str(BUILT_CACHE), *options], stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True
    )
    lines: list[str] = []
    try:
        for line in proc.stdout:
            lines.append(line)
            if line.startswith("ready: "):
                break
        assert lines and lines[-1].startswith("ready: "), "".join(lines)  # it exited without serving
        words = lines[-1].split()
        yield {word: words[i + 1] for i, word in enumerate(words[:-1]) if word.startswith("--")}
    finally:
        proc.send_signal(signal.SIGTERM)
        output, _ = proc.communicate(timeout=60)
    assert proc.returncode == 0, "".join(lines) + output


def test_serve_llama_cpp_prints_the_url_to_test_and_stops_on_sigterm(gguf):
    with _served("serve-llama-cpp", "--threads", "1") as printed:
        target = OpenAITarget(openai_options(printed["--openai-url"], [], None, None, None))
        assert target.family_name == "llama-cpp-python"
    with pytest.raises(OSError):
        target.endpoint.models()  # the server went with it


@pytest.mark.trtllm_stand_in
def test_serve_trtllm_stand_in_prints_the_options_to_test_with_and_its_answers_say_it_is_the_stand_in():
    """The reference extra only: no llama-cpp-python needed."""
    with _served("serve-trtllm-stand-in") as printed:
        target = OpenAITarget(openai_options(printed["--openai-url"], [], None, None, None, tokenizer=printed["--tokenizer"]))
        assert (target.family_name, target.model, target.stand_in) == ("trtllm-serve", "smollm2-135m", version())
        answer = target.endpoint.complete(target.completion("Hello there", 1))  # the printed tokenizer is the model's
        assert answer.usage["prompt_tokens"] == len(target.tokenizer.encode("Hello there"))
        # no guided backend by default: a guided request is refused in the executor's words, not answered unguided
        with pytest.raises(OpenAIRequestError, match="GuidedDecoder is not setup") as refused:
            target.endpoint.complete(target.completion("Hello there", 4, response_format={"type": "json_object"}))
        assert refused.value.status == 400
    with pytest.raises(OSError):
        target.endpoint.models()  # the server went with it


GUIDED_CELLS = [
    f"suites/test_properties.py::test_an_input_has_its_effect_over_v1[guided-{e}-unary]" for e in ("completions", "chat")
]


@pytest.mark.trtllm_stand_in
def test_the_stand_in_with_its_guided_backend_passes_the_guided_cells_on_both_endpoints():
    """--guided-decoding-backend xgrammar: every guide of fixtures/guides.toml holds, judged by xgrammar and jsonschema,
    and the unknown response_format type gets the family's 400 (the guided extra; without it, a skip saying so)."""
    pytest.importorskip("xgrammar", reason='the guided extra is not installed: pip install -e ".[guided]"')
    with _served("serve-trtllm-stand-in", "--guided-decoding-backend", "xgrammar") as printed:
        argv = [sys.executable, "-m", "pytest", *GUIDED_CELLS, "-p", "no:cacheprovider", "-q", "-rA"]
        argv += ["--openai-url", printed["--openai-url"], "--tokenizer", printed["--tokenizer"]]
        done = subprocess.run(argv, cwd=ROOT, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0 and "2 passed" in done.stdout, done.stdout[-3000:]


SPECULATIVE_TESTS = [
    f"suites/test_functional.py::TestOverV1::test_draft_counts_add_up_where_the_server_speculates[{e}]"
    for e in ("completions", "chat")
]


@pytest.mark.trtllm_stand_in
def test_the_stand_in_speculating_by_prompt_lookup_answers_as_without_and_reports_its_drafts(tmp_path):
    """--extra-llm-api-options with an NGram speculative_config (as trtllm-serve takes it): greedy answers equal those of
    the stand-in without, and the /v1 suites' draft-count checks pass on both endpoints (they skip without drafts)."""
    options = tmp_path / "speculative.yaml"
    options.write_text("speculative_config:\n  decoding_type: NGram\n  max_draft_len: 4\n  max_matching_ngram_size: 2\n")
    prompts = load_prompts(ROOT / "fixtures" / "prompts.toml")
    asked = [*prompts.copying.values(), *prompts.batch(2)]
    with _served("serve-trtllm-stand-in", "--perf-metrics", "100", "--extra-llm-api-options", str(options)) as printed:
        argv = [sys.executable, "-m", "pytest", *SPECULATIVE_TESTS, "-p", "no:cacheprovider", "-q", "-rA"]
        argv += ["--openai-url", printed["--openai-url"], "--tokenizer", printed["--tokenizer"]]
        done = subprocess.run(argv, cwd=ROOT, capture_output=True, text=True, timeout=600)
        drafting = OpenAITarget(openai_options(printed["--openai-url"], [], None, None, None, tokenizer=printed["--tokenizer"]))
        speculated = [drafting.endpoint.complete(drafting.completion(p, 24)).text for p in asked]
    assert done.returncode == 0 and "2 passed" in done.stdout, done.stdout[-3000:]
    with _served("serve-trtllm-stand-in") as printed:
        plain = OpenAITarget(openai_options(printed["--openai-url"], [], None, None, None, tokenizer=printed["--tokenizer"]))
        assert [plain.endpoint.complete(plain.completion(p, 24)).text for p in asked] == speculated
