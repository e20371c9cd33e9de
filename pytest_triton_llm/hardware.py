"""What the run measures on: the GPU's name as nvidia-smi prints it, or "cpu"."""

from __future__ import annotations

import shutil
import subprocess
from functools import lru_cache


@lru_cache(maxsize=1)
def hardware() -> str:
    smi = shutil.which("nvidia-smi")
    if smi:
        try:
            out = subprocess.run([smi, "--query-gpu=name", "--format=csv,noheader"], capture_output=True, text=True, timeout=10)
        except (OSError, subprocess.TimeoutExpired):
            return "cpu"
        names = [line.strip() for line in out.stdout.splitlines() if line.strip()]
        if out.returncode == 0 and names:
            return names[0]
    return "cpu"


def compute_capability(gpu: str | None = None) -> str | None:
    """The compute capability (e.g. "9.0") of GPU `gpu` (an index; None: the first), or None without one.
    Engines are built for it: it is part of a tensorrtllm engine's cache key."""
    smi = shutil.which("nvidia-smi")
    if not smi:
        return None
    argv = [smi, "--query-gpu=compute_cap", "--format=csv,noheader"] + (["--id", gpu] if gpu else [])
    try:
        out = subprocess.run(argv, capture_output=True, text=True, timeout=10)
    except (OSError, subprocess.TimeoutExpired):
        return None
    values = [line.strip() for line in out.stdout.splitlines() if line.strip()]
    return values[0] if out.returncode == 0 and values else None
