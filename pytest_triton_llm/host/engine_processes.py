"""The processes that run a served model's engine, found among a server's descendants by their command lines: what the
health check kills to see whether the server then tells the truth.

A python model (the stand-in's tensorrt_llm, upstream's llmapi model) runs in a python backend stub whose second
argument is its `<model>/1/model.py`: the stub and the processes it started (an llmapi executor's workers) are killed
together. TensorRT-LLM's orchestrator mode runs the engine in `trtllmExecutorWorker` processes, killed alone. In leader
mode the C++ backend runs the engine inside tritonserver: nothing apart from the server to kill, so none is found."""

from __future__ import annotations

import os
import signal
from dataclasses import dataclass
from pathlib import Path

PROC = Path("/proc")
STUB = "triton_python_backend_stub"
ORCHESTRATOR_WORKER = "trtllmExecutorWorker"


@dataclass(frozen=True)
class EngineProcess:
    pid: int
    role: str  # what it is, for the test's message


def _cmdline(pid: int) -> list[str]:
    try:
        raw = (PROC / str(pid) / "cmdline").read_bytes()
    except OSError:
        return []
    return [part.decode(errors="replace") for part in raw.split(b"\0") if part]


def _children_by_parent() -> dict[int, list[int]]:
    children: dict[int, list[int]] = {}
    for entry in PROC.iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
        except OSError:
            continue
        parent = int(stat.rsplit(")", 1)[1].split()[1])
        children.setdefault(parent, []).append(int(entry.name))
    return children


def _descendants(root: int, children: dict[int, list[int]]) -> list[int]:
    found, todo = [], list(children.get(root, ()))
    while todo:
        pid = todo.pop()
        found.append(pid)
        todo.extend(children.get(pid, ()))
    return sorted(found)


def engine_processes(server_pid: int, model: str) -> list[EngineProcess]:
    """The processes running `model`'s engine under the server `server_pid`: orchestrator workers, else the model's
    python stub and whatever it started; [] where the engine runs inside the server."""
    children = _children_by_parent()
    below = _descendants(server_pid, children)
    workers = [p for p in below if any(ORCHESTRATOR_WORKER in part for part in _cmdline(p)[:1])]
    if workers:
        return [EngineProcess(p, f"TensorRT-LLM orchestrator worker {ORCHESTRATOR_WORKER}") for p in workers]
    suffix = f"/{model}/1/model.py"
    stubs = [p for p in below if (argv := _cmdline(p)) and argv[0].endswith(STUB) and argv[1:2] and argv[1].endswith(suffix)]
    workers = [w for s in stubs for w in _descendants(s, children)]
    return [EngineProcess(p, f"{model}'s python backend stub") for p in stubs] + [
        EngineProcess(p, f"a process of {model}'s python stub ({' '.join(_cmdline(p)[:3])})") for p in workers
    ]


def kill_engine(server_pid: int, model: str) -> list[EngineProcess]:
    """SIGKILL `model`'s engine processes (found afresh), each through a pidfd opened before its command line is read
    again: a pid that another process took in between (pid_max is 32,768 on small machines, and a short-lived child
    of a stub is gone in milliseconds) is never signalled. Returns those killed."""
    killed = []
    for victim in engine_processes(server_pid, model):
        try:
            fd = os.pidfd_open(victim.pid)
        except ProcessLookupError:
            continue
        try:
            if _cmdline(victim.pid) and victim.pid in _descendants(server_pid, _children_by_parent()):
                signal.pidfd_send_signal(fd, signal.SIGKILL)
                killed.append(victim)
        except ProcessLookupError:
            pass
        finally:
            os.close(fd)
    return killed
