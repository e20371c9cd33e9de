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
