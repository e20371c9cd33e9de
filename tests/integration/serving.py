"""`pytest-triton-llm serve` in a subprocess, for tests that need a server running beside them."""

import re
import subprocess
import sys
import time
from pathlib import Path

from ..conftest import LOCK, ROOT

READY = re.compile(r"^ready: (\S+) on Triton (\S+) .*; repository (\S+);")


def start_serving(deployment: str, *extra: str, lock: Path = LOCK) -> tuple[subprocess.Popen, dict[str, str], Path]:
    """The serve process, its printed URLs and its repository, once it says ready."""
    argv = [
        sys.executable,
        "-m",
        "pytest_triton_llm.cli",
        "serve",
        deployment,
        "--engines-lock",
        str(lock),
        *extra,
    ]
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
