"""Upstream's own speculative-decoding clients (tensorrtllm_backend v0.19.0), unmodified, against the embedded
draft-target deployment (fixtures/engines.variants.lock `smollm2-135m:v1-draft-target`: tensorrt_llm and
tensorrt_llm_draft, the draft engine the target's checkpoint without six of its layers, so that drafts are partly
refused): the client-side loop of e2e_grpc_speculative_decoding_client.py prints the text end_to_end_grpc_client.py
prints without drafts, and speculative_decoding_test.py finds the ensemble's answers equal to the speculative ones,
coordinated by itself or by the BLS, with and without draft logits.

The scripts are not in this repository: TRITON_LLM_UPSTREAM_CLIENTS names a checkout of that tag (e.g. `git clone
--branch v0.19.0 https://github.com/triton-inference-server/tensorrtllm_backend`), whose files are checked against
tests/data/upstream_speculative_clients.toml first. Without it the test skips, saying so."""

import hashlib
import json
import os
import sys
from pathlib import Path

import pytest

from ..conftest import ROOT, run_child
from .serving import start_serving
from pytest_triton_llm.common.schema import load_toml

PINS = load_toml(ROOT / "tests" / "data" / "upstream_speculative_clients.toml")
CHECKOUT = Path(os.environ.get("TRITON_LLM_UPSTREAM_CLIENTS", "/nonexistent"))
pytestmark = [
    pytest.mark.integration,
    pytest.mark.timeout(900),
    pytest.mark.skipif(
        not CHECKOUT.is_dir(),
        reason=f"upstream's clients: set TRITON_LLM_UPSTREAM_CLIENTS to a tensorrtllm_backend checkout at {PINS['tag']}",
    ),
]
# three requests in the script's dataset format: it asks for as many tokens as `output` has
DATASET = [
    {"input": "What is the capital of France?", "instruction": "Answer in two sentences.",
     "output": "The capital of France is Paris. Paris is known for the Eiffel Tower and for its museums and history."},
    {"input": "Name three colours of the rainbow.", "instruction": "Answer the question shortly.",
     "output": "Red, orange and yellow are three of the seven colours that make up a rainbow in the sky after rain."},
    {"input": "The quick brown fox jumps over the lazy dog.", "instruction": "Copy this sentence twice.",
     "output": "The quick brown fox jumps over the lazy dog. The quick brown fox jumps over the lazy dog."},
]  # fmt: skip
BLS = "--execute-bls-speculative-decoding"  # the BLS speculates; without it the script coordinates draft and target
MODES = ([], ["--use-draft-logits"], [BLS], [BLS, "--use-draft-logits"])


def unmodified() -> None:
    for path, sha256 in PINS["files"].items():
        got = hashlib.sha256((CHECKOUT / path).read_bytes()).hexdigest() if (CHECKOUT / path).is_file() else "absent"
        assert got == sha256, f"{CHECKOUT / path}: not upstream's {PINS['tag']} file (sha256 {got}, pinned {sha256})"


def script(path: str, *args: str) -> str:
    done = run_child([sys.executable, str(CHECKOUT / path), *args], timeout=300, cwd=CHECKOUT / Path(path).parent)
    assert done.returncode == 0, f"{path} {' '.join(args)}: exit {done.returncode}\n{done.stdout[-2000:]}{done.stderr[-2000:]}"
    return done.stdout


def test_upstreams_speculative_clients_pass_against_the_draft_target_deployment(tmp_path):
    unmodified()
    proc, urls, _ = start_serving("smollm2-135m:v1-draft-target", lock=ROOT / "fixtures" / "engines.variants.lock")
    try:
        grpc = urls["grpc"].removeprefix("grpc://")
        prompt, names = "The capital of France is", ["--draft-tensorrt-llm-model-name", "tensorrt_llm_draft"]
        plain = script("inflight_batcher_llm/client/end_to_end_grpc_client.py", "-u", grpc, "-o", "40", "-p", prompt)
        speculative = script(
            "inflight_batcher_llm/client/e2e_grpc_speculative_decoding_client.py",
            *("--url-target", grpc, "--url-draft", grpc, *names, "--output-len", "40", "--num-draft-tokens", "4"),
            *("--end-id", "2", "--pad-id", "2", "--prompt", prompt),
        )
        greedy = plain.split("0: ", 1)[-1].strip()
        assert speculative.split("Final text:", 1)[-1].strip() == greedy, f"speculative:\n{speculative}\nwithout drafts:\n{plain}"
        dataset = tmp_path / "dataset.json"
        dataset.write_text(json.dumps(DATASET))
        urls_args = ["--url-control", grpc, "--url-target", grpc, "--url-draft", grpc, *names]
        for mode in MODES:
            out = script(
                "tools/inflight_batcher_llm/speculative_decoding_test.py",
                *("--max-input-len", "500", "--dataset", str(dataset), *urls_args, "--num-draft-tokens", "4"),
                *("--end-id", "2", "--pad-id", "2", *mode),
            )
            assert f"failed/total: 0/{len(DATASET)}" in out, f"speculative_decoding_test.py {' '.join(mode)}:\n{out[-3000:]}"
    finally:
        proc.terminate()
        proc.wait(timeout=120)
