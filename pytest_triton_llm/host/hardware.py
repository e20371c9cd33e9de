"""What the run measures on: the GPU's name as nvidia-smi prints it, or "cpu"; and its class for perf budgets."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from functools import lru_cache


@lru_cache(maxsize=8)
def gpu_details(gpu: str | None = None) -> dict | None:
    """GPU `gpu` (an nvidia-smi index; None: the first) as {index, name, memory_mib, compute_capability},
    or None without nvidia-smi or that GPU, and for "none" (--triton-gpus none: no GPU)."""
    smi = shutil.which("nvidia-smi")
    if not smi or gpu == "none":
        return None
    argv = [smi, "--query-gpu=index,name,memory.total,compute_cap", "--format=csv,noheader,nounits"]
    try:
        out = subprocess.run(argv + (["--id", gpu] if gpu else []), capture_output=True, text=True, timeout=10)
    except (OSError, subprocess.TimeoutExpired):
        return None
    rows = [[f.strip() for f in line.split(",")] for line in out.stdout.splitlines() if line.strip()]
    if out.returncode != 0 or not rows or len(rows[0]) != 4:
        return None
    index, name, memory, cc = rows[0]
    return {"index": _number(index), "name": name, "memory_mib": _number(memory), "compute_capability": _known(cc)}


def _number(field: str) -> int | None:
    """nvidia-smi's figure ("143771", "81559 MiB"), or None where it prints [N/A] (MIG slices, some boards)."""
    found = re.match(r"\d+", field)
    return int(found.group()) if found else None


def _known(field: str) -> str | None:
    return None if field.startswith("[") else field


REMOTE = "remote (not known from here)"  # a server elsewhere: perf budgets match its hardware only by "*"


def hardware(gpu: str | None = None) -> str:
    """The GPU's name as nvidia-smi prints it (GPU `gpu`, else the first), or "cpu" (also for gpu "none")."""
    details = gpu_details(gpu)
    return details["name"] if details else "cpu"


def first_gpu(gpus: str | None, env: dict[str, str]) -> str | None:
    """The nvidia-smi index of the GPU a server given --triton-gpus `gpus` computes on: the first id named, else the
    first of a numeric CUDA_VISIBLE_DEVICES, else None (the first GPU); "none" has no GPU and gives "none"."""
    for given in (gpus, env.get("CUDA_VISIBLE_DEVICES")):
        if given in (None, "all"):
            continue
        if given in ("none", ""):
            return "none"
        first = given.split(",")[0].strip()
        return first if first.isdigit() else None  # GPU UUIDs: nvidia-smi's first GPU stands for them
    return None


def visible_gpus(gpus: str | None) -> dict[str, str]:
    """A local server's environment for --triton-gpus: its ids as CUDA_VISIBLE_DEVICES, in nvidia-smi's order
    (CUDA's own order is fastest-first); "none" hides every GPU; None and "all" leave the inherited one."""
    if gpus in (None, "all"):
        return {}
    if gpus == "none":
        return {"CUDA_VISIBLE_DEVICES": ""}
    return {"CUDA_VISIBLE_DEVICES": gpus, "CUDA_DEVICE_ORDER": "PCI_BUS_ID"}


def describe_hardware(gpu: str | None) -> str:
    """The report header's line: "NVIDIA H200, 143771 MiB, compute capability 9.0 (GPU 0)" or "cpu, 2 cores"."""
    details = gpu_details(gpu)
    if details is None:
        return f"cpu, {len(os.sched_getaffinity(0))} cores"
    memory = f"{details['memory_mib']} MiB" if details["memory_mib"] is not None else "memory not reported"
    return f"{details['name']}, {memory}, compute capability {details['compute_capability'] or '?'} (GPU {details['index']})"


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


def cores_shared_by(sharers: int) -> int:
    """One of `sharers` processes' share of the cores this process may run on (at least one)."""
    return max(1, len(os.sched_getaffinity(0)) // max(1, sharers))
