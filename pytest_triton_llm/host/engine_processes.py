"""The processes that run a served model's engine, found among a server's descendants by their command lines: what the
health check kills to see whether the server then tells the truth.

A python model (the stand-in's tensorrt_llm, upstream's llmapi model) runs in a python backend stub whose second
argument is its `<model>/1/model.py`; where the stub started workers of its own (an llmapi executor's), those are the
engine and are killed, the stub left alive as the Dynamo worker was. TensorRT-LLM's orchestrator mode runs the engine
in `trtllmExecutorWorker` processes. In leader mode the C++ backend runs the engine inside tritonserver: nothing apart
from the server to kill, so none is found."""

from __future__ import annotations

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
    """The processes running `model`'s engine under the server `server_pid`: orchestrator workers, else the workers
    of the model's python stub, else the stub itself; [] where the engine runs inside the server."""
    children = _children_by_parent()
    below = _descendants(server_pid, children)
    workers = [p for p in below if any(ORCHESTRATOR_WORKER in part for part in _cmdline(p)[:1])]
    if workers:
        return [EngineProcess(p, f"TensorRT-LLM orchestrator worker {ORCHESTRATOR_WORKER}") for p in workers]
    suffix = f"/{model}/1/model.py"
    stubs = [p for p in below if (argv := _cmdline(p)) and argv[0].endswith(STUB) and argv[1:2] and argv[1].endswith(suffix)]
    stub_workers = [w for s in stubs for w in _descendants(s, children)]
    if stub_workers:
        return [EngineProcess(p, f"a worker of {model}'s python stub ({' '.join(_cmdline(p)[:3])})") for p in stub_workers]
    return [EngineProcess(p, f"{model}'s python backend stub") for p in stubs]
