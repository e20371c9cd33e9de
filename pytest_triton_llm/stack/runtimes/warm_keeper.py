"""The keeper of one warm slot (warm.py), run as `python -m pytest_triton_llm.stack.runtimes.warm_keeper SLOT`.

It starts the slot's tritonserver (launch.json) in a process group of its own that dies with the keeper, and stops it
when no session has held the slot for the idle time, when the server exits, or on SIGTERM (`pytest-triton-llm cache
warm --stop`). The decision to stop is taken under the slot's lock with the lease withdrawn first, and the lease is
removed last, so a session never takes a server that is about to stop nor starts one in a slot still being cleaned.
"""

from __future__ import annotations

import json
import shutil
import signal
import sys
import time
from pathlib import Path

from filelock import FileLock

from ...host.processes import ManagedProcess
from .warm import HOLDER, LAUNCH, LEASE, _alive, _read

POLL_S = 0.5


def _held(slot: Path) -> bool:
    holder = _read(slot / HOLDER)
    if holder is not None and not _alive(holder):  # its session died without letting go
        (slot / HOLDER).unlink(missing_ok=True)
        return False
    return holder is not None


def _withdraw(slot: Path) -> None:
    """Mark the lease withdrawn (the caller holds the lock): no session takes the server from now on."""
    (slot / LEASE).write_text(json.dumps({**(_read(slot / LEASE) or {}), "withdrawn": True}))


def _idle_out(slot: Path, lock: FileLock, idle_s: float, stopping: list[bool], process: ManagedProcess) -> None:
    """Wait until the server exits, SIGTERM comes, or nobody held the slot for `idle_s`; then withdraw the lease."""
    idle_since = None
    while not stopping and process.alive():
        if _held(slot):
            idle_since = None
        elif idle_since is None:
            idle_since = time.monotonic()
        elif time.monotonic() - idle_since >= idle_s:
            with lock:
                if not _held(slot):
                    _withdraw(slot)
                    return
            idle_since = None
        time.sleep(POLL_S)
    with lock:
        _withdraw(slot)


def main(slot: Path) -> int:
    launch = json.loads((slot / LAUNCH).read_text())
    lock = FileLock(str(slot.parent / f"{slot.name.rsplit('-', 1)[0]}.lock"))
    stopping: list[bool] = []
    signal.signal(signal.SIGTERM, lambda *_: stopping.append(True))
    process = ManagedProcess(
        launch["argv"], launch["env"], slot / "tritonserver.log", slot / "run", f"warm {launch['label']}", launch["shm_prefix"]
    )
    process.start()
    with lock:
        lease = _read(slot / LEASE) or {}
        (slot / LEASE).write_text(json.dumps({**lease, "server": {"pid": process.pid}}))
    print(f"keeping {launch['label']} warm (pid {process.pid}), {launch['idle_s']:g} s after its last session", flush=True)
    try:
        _idle_out(slot, lock, float(launch["idle_s"]), stopping, process)
    finally:
        process.stop()
        shutil.rmtree(slot / "model_repository", ignore_errors=True)
        (slot / LAUNCH).unlink(missing_ok=True)
        with lock:  # last: from now on a session may start a server in this slot
            (slot / LEASE).unlink(missing_ok=True)
    print(f"stopped {launch['label']} ({'SIGTERM' if stopping else 'idle or exited'})", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main(Path(sys.argv[1])))
