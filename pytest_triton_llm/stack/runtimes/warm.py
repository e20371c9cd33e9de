"""Warm servers: a local tritonserver that outlives its session, for the next session that serves the same thing.

With --triton-keep-warm SECONDS a session does not stop the local servers it starts. Each is left in the engine
cache's `warm/` folder, in a slot named by a digest of what it serves: the rendered repository's files, the server
binary and backends, and the serving environment (threads, visible GPUs). A keeper process (warm_keeper.py) owns the
server and stops it once no session has held it for SECONDS. A later session whose deployment renders the same digest
takes the slot's server instead of starting one: no start, its first test seconds sooner.

A slot serves one session at a time (a lease: `holder.json`), so two sessions at once (pytest-xdist's workers) never
share a server: the second starts a slot of its own. A session that changes what a deployment serves (other
options, another engine or image) renders another digest and gets its own server. A session with a stand-in fault
takes a clean server and switches the fault on for as long as it holds it (`fault`, read by the stand-in at each
check); a fault the catalog gives its own server (read at load, or it leaves the model changed) renders its own
repository, never kept warm (LocalRuntime.start). What a reused server
keeps from earlier sessions is what a long-running deployment keeps: its metrics counters, KV-cache and LoRA-cache
contents; the report says which server served and since when (`warm`), so a result that depends on it can be read.
"""

from __future__ import annotations

import hashlib
import itertools
import json
import os
import shutil
import signal
import subprocess
import sys
import time
from dataclasses import dataclass
from datetime import datetime, timezone
from importlib import resources
from pathlib import Path

from filelock import FileLock

from ...host.endpoints import Endpoints
from ...host.processes import process_start_time
from ...common.progress import Progress
from .server import TritonServer

WARM = "warm"
LEASE, HOLDER, LAUNCH = "lease.json", "holder.json", "launch.json"
# the stand-in's fault switch (stand_ins/triton_models/common/stand_in_faults.py): the file and its variable
FAULT, FAULT_SWITCH = "fault", "TRITON_LLM_FAULT_SWITCH"
SERVING_ENV = ("OMP_NUM_THREADS", "CUDA_VISIBLE_DEVICES", "LD_LIBRARY_PATH")


def repository_digest(repository: Path, binary: str, backends: str | None, manifest: Path, env: dict[str, str]) -> str:
    """What a server serves, as one digest: every file of the repository (its path in it and its bytes), the engine
    build's manifest (a rebuilt engine in the same folder is another server), the binary, the backends and the
    environment settings that change answers or speed."""
    digest = hashlib.sha256()
    for path in sorted(p for p in repository.rglob("*") if p.is_file() and "__pycache__" not in p.parts):
        digest.update(str(path.relative_to(repository)).encode() + b"\0" + path.read_bytes() + b"\0")
    digest.update(manifest.read_bytes() if manifest.is_file() else b"no manifest")
    digest.update(b"fault switch 1\0")  # servers started before the stand-in read the switch never match
    for value in (binary, backends or "", *(f"{k}={env.get(k, '')}" for k in SERVING_ENV)):
        digest.update(value.encode() + b"\0")
    return digest.hexdigest()[:20]


def _me() -> dict:
    return {"pid": os.getpid(), "start": process_start_time(os.getpid())}


def _alive(owner: dict | None) -> bool:
    """The process `owner` names (pid and start time) still runs: not gone, not another one with its pid, no zombie."""
    if not owner or process_start_time(owner["pid"]) != owner.get("start"):
        return False
    try:
        return Path(f"/proc/{owner['pid']}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


def _read(path: Path) -> dict | None:
    try:
        return json.loads(path.read_text())
    except (OSError, json.JSONDecodeError):
        return None


@dataclass
class Lease:
    """This session's hold on a warm slot: the server's process for TritonServer, whose stop() only lets go."""

    slot: Path
    keeper: dict  # pid and start time of the slot's keeper

    def start(self) -> None:  # the keeper started it
        pass

    def alive(self) -> bool:
        return _alive(self.keeper)

    @property
    def returncode(self) -> int | None:
        return None if self.alive() else -1

    @property
    def pid(self) -> int:
        """The server's pid, once its keeper started it (what reads its resident memory needs)."""
        server = (_read(self.slot / LEASE) or {}).get("server")
        if server is None:
            raise AttributeError("pid: the keeper has not started the server")
        return server["pid"]

    def stop(self, grace_s: float = 15.0) -> None:
        holder = _read(self.slot / HOLDER)
        if holder is not None and holder.get("pid") == os.getpid():
            switch_fault(self.slot, None)  # clean again before the next session can take it
            (self.slot / HOLDER).unlink(missing_ok=True)  # the keeper's idle clock starts


def switch_fault(slot: Path, fault: str | None) -> None:
    """Switch the slot's server to reproduce `fault`, or to clean (None). The file is replaced, never rewritten in
    place: a model that reads it sees one name or the other."""
    path = slot / FAULT
    if fault is None:
        path.unlink(missing_ok=True)
        return
    staged = slot / f"{FAULT}.new"
    staged.write_text(fault)
    staged.replace(path)


def _free_slot(root: Path, digest: str) -> tuple[Path, dict | None]:
    """A slot of `digest` whose server is up, not being stopped and held by nobody, with its lease; else the first slot
    no keeper runs in, to start one there (lease None). A keeper still stopping its server keeps its slot: its clean-up
    must not meet a new server's files."""
    start_in = None
    for index in itertools.count():
        slot = root / f"{digest}-{index}"
        if not slot.exists():
            return start_in or slot, None
        lease = _read(slot / LEASE)
        if lease is None or not _alive(lease.get("keeper")):
            start_in = start_in or slot
        elif not lease.get("withdrawn") and not _alive(_read(slot / HOLDER)):
            return slot, lease
    raise AssertionError("unreachable")


def take(
    cache_root: Path,
    digest: str,
    name: str,
    repository: Path,
    launch: dict,
    timeout_s: float,
    progress: Progress,
    fault: str | None = None,
) -> TritonServer:
    """A warm server of `digest` held for this session: a free one as it is, else one started from `repository` with
    `launch` (argv, env, shm_prefix, endpoints), kept for launch["idle_s"] after its last session lets go. `fault`: the
    stand-in fault it reproduces while this session holds it (switched off when it lets go); else it is clean, whatever
    a session that died holding it had switched on."""
    root = cache_root / WARM
    root.mkdir(parents=True, exist_ok=True)
    with FileLock(str(root / f"{digest}.lock")):
        slot, lease = _free_slot(root, digest)
        slot.mkdir(parents=True, exist_ok=True)
        (slot / HOLDER).write_text(json.dumps(_me()))
        switch_fault(slot, fault)
        reused = lease is not None
        if lease is None:
            lease = _start_keeper(slot, repository, launch)
    endpoints = Endpoints(**lease["endpoints"])
    server = TritonServer(name, endpoints, slot / "tritonserver.log", Lease(slot, lease["keeper"]), launch["argv"][0])
    server.warm = {"slot": str(slot), "since": lease["since"], "reused": reused, "keep_s": launch["idle_s"]}
    if fault is not None:
        server.warm["fault_switched"] = fault
    try:
        server.wait_ready(timeout_s, progress)
    except BaseException:
        server.stop()
        if not reused:
            stop_slot(slot)
        raise
    return server


def _start_keeper(slot: Path, repository: Path, launch: dict) -> dict:
    shutil.rmtree(slot / "model_repository", ignore_errors=True)
    shutil.copytree(repository, slot / "model_repository", ignore=shutil.ignore_patterns("__pycache__"))
    argv = [a.replace(str(repository), str(slot / "model_repository")) for a in launch["argv"]]
    (slot / LAUNCH).touch(mode=0o600)  # the server's environment: no secrets (serving_environment), yet nobody else's
    env = {**launch["env"], FAULT_SWITCH: str(slot / FAULT)}
    (slot / LAUNCH).write_text(json.dumps({**launch, "argv": argv, "env": env}))
    with open(slot / "keeper.log", "ab") as log:
        keeper = subprocess.Popen(
            [sys.executable, "-m", "pytest_triton_llm.stack.runtimes.warm_keeper", str(slot)],
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,  # outlives this session; its server dies with it (PR_SET_PDEATHSIG)
            env=_keeper_env(),
        )
    lease = {
        "keeper": {"pid": keeper.pid, "start": process_start_time(keeper.pid)},
        "endpoints": launch["endpoints"],
        "since": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        "deployment": launch["label"],
    }
    (slot / LEASE).write_text(json.dumps(lease))
    return lease


def _keeper_env() -> dict[str, str]:
    """This environment, with this copy of the package first on the path: the keeper runs the session's own code."""
    package_root = str(Path(str(resources.files("pytest_triton_llm"))).resolve().parent)
    return {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in (package_root, os.environ.get("PYTHONPATH")) if p)}


def stop_slot(slot: Path, wait_s: float = 30.0) -> bool:
    """Stop a slot's keeper (it stops its server and clears the slot); True if one was running."""
    lease = _read(slot / LEASE)
    if lease is None or not _alive(lease.get("keeper")):
        return False
    os.kill(lease["keeper"]["pid"], signal.SIGTERM)
    deadline = time.monotonic() + wait_s
    while _alive(lease["keeper"]) and time.monotonic() < deadline:
        time.sleep(0.05)
    return True


def slots(cache_root: Path) -> list[tuple[Path, dict, bool]]:
    """Every warm slot with a live keeper: (slot, lease, held by a session)."""
    root = cache_root / WARM
    found = []
    for slot in sorted(p for p in root.iterdir() if p.is_dir()) if root.is_dir() else []:
        lease = _read(slot / LEASE)
        if lease is not None and _alive(lease.get("keeper")):
            found.append((slot, lease, _alive(_read(slot / HOLDER))))
    return found


def render_slots(cache_root: Path, stop: bool) -> str:
    """`pytest-triton-llm cache warm [--stop]`: the warm servers, one line each; with `stop`, stopped first."""
    found = slots(cache_root)
    if not found:
        return f"no warm servers in {cache_root / WARM}\n"
    lines = []
    for slot, lease, held in found:
        state = "stopping" if lease.get("withdrawn") else "held by a session" if held else "idle"
        if stop:
            state = "stopped" if stop_slot(slot) else "already gone"
        lines.append(f"{lease['deployment']}  http {lease['endpoints']['http']}  since {lease['since']}  {state}  {slot}")
    return "\n".join(lines) + "\n"
