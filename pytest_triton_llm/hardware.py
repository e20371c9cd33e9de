"""What the run measures on: the GPU's name as nvidia-smi prints it, or "cpu"; and its class for perf budgets."""

from __future__ import annotations

import os
import re
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


_GPU_MODEL = re.compile(r"^[A-Z]{1,3}\d{1,4}[A-Z]?$")  # H200, H100, A100, L4, L40S, GH200, B200, T4


def hardware_class(name: str, cores: int | None = None) -> str:
    """The class perf budgets are kept per: the GPU model in nvidia-smi's name ("NVIDIA H100 80GB HBM3" -> h100,
    "NVIDIA A100-SXM4-80GB" -> a100), "cpu-<cores>" on a CPU (this machine's count by default), else the name
    in lower case with dashes."""
    if name == "cpu":
        return f"cpu-{cores or os.cpu_count() or 1}"
    for token in re.split(r"[\s_-]+", name.upper()):
        if _GPU_MODEL.match(token):
            return token.lower()
    return re.sub(r"[^a-z0-9]+", "-", name.lower()).strip("-")
