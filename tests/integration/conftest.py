"""Fixtures of the integration tests that need docker, or llama-cpp-python (the llama-cpp extra)."""

import os
import subprocess
import sys
from pathlib import Path

import pytest

from pytest_triton_llm.openai import llama_cpp as llama_cpp_server
from pytest_triton_llm.stack.engines.sources import fetch_source
from pytest_triton_llm.stack.lock import load_lock
from pytest_triton_llm.common.progress import Progress

from ..conftest import BUILT_CACHE, need_tool

ROOT = Path(__file__).resolve().parents[2]


def _docker_ok() -> str | None:
    try:
        subprocess.run(["docker", "info"], check=True, capture_output=True, timeout=30)
    except (OSError, subprocess.SubprocessError) as exc:
        return f"no docker daemon answers ({type(exc).__name__}); .ci/run starts one (Debian's docker.io)"
    return None


@pytest.fixture(scope="session")
def cpu_image() -> str:
    reason = _docker_ok()
    if reason:
        need_tool(reason)
    env = {**os.environ, "PYTHON": sys.executable}
    done = subprocess.run(["bash", str(ROOT / "images" / "build-cpu-image.sh")], env=env, capture_output=True, text=True)
    assert done.returncode == 0, done.stderr[-3000:]
    return done.stdout.strip().splitlines()[-1]


@pytest.fixture(scope="session")
def gguf() -> Path:
    if (why := llama_cpp_server.installed()) is not None:
        need_tool(why)
    lock = load_lock(ROOT / "engines.lock")
    return fetch_source(lock.engines["smollm2-135m"].source, BUILT_CACHE / "sources", Progress())
