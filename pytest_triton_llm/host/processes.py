"""Server processes that never outlive the session that started them.

Each server runs in its own process group (its python backend stubs join that group)
and is recorded in a pidfile under <cache>/run/. It is stopped by the session's
teardown (also after Ctrl-C), by an atexit hook, and - if the owning pytest died
without either (SIGKILL) - by `reap_orphans` at the start of the next session. Stopping
is shielded from a second Ctrl-C or SIGTERM (`shielded`): an impatient user cannot cut it
short, and a server gets SIGTERM from the kernel the moment its pytest dies (Linux
PR_SET_PDEATHSIG), so even a SIGKILL leaves none behind for long. The POSIX shared memory a server's python
backend stubs name with its prefix (`shm_prefix`) goes with it: tritonserver exits at its exit timeout without
unloading what is still loaded, and those stubs' regions would stay in /dev/shm for good.
"""

from __future__ import annotations

import atexit
import contextlib
import ctypes
import json
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Callable, Protocol, TypeVar

from ..common.progress import Progress

_RUNNING: set["ManagedProcess"] = set()
SHARED_MEMORY = Path("/dev/shm")


def _pid_namespace() -> str:
    """This process's pid namespace ("4026531836"). An engine cache may be shared with pytest in a
    container (pytest inside the serving image): its pids mean nothing here, and must never be signalled."""
    try:
        return os.readlink("/proc/self/ns/pid").strip("pid:[]")
    except OSError:
        return "unknown"


PID_NAMESPACE = _pid_namespace()


def process_start_time(pid: int) -> str | None:
    """Start time of `pid` in clock ticks since boot (tells a reused pid apart)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    return stat.rsplit(")", 1)[1].split()[19]


def _group_alive(pgid: int) -> bool:
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


_PR_SET_PDEATHSIG = 1


def _die_with_parent() -> None:
    """In the child, before exec: SIGTERM when the process that started it dies (tritonserver then unloads its models
    and stops its stubs). Linux only; elsewhere the pidfiles and reap_orphans remain the backstop."""
    if sys.platform.startswith("linux"):
        ctypes.CDLL(None, use_errno=True).prctl(_PR_SET_PDEATHSIG, signal.SIGTERM)


@contextlib.contextmanager
def shielded():
    """Ctrl-C and SIGTERM held back while the block runs (delivered once it ends): stopping servers finishes even when
    the user presses Ctrl-C again or CI sends SIGTERM after SIGINT. Only the main thread can hold them back."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    held = {signal.SIGINT, signal.SIGTERM}
    previous = signal.pthread_sigmask(signal.SIG_BLOCK, held)
    try:
        yield
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, previous)


class ServerProcess(Protocol):
    """What a server's process is to the harness: a ManagedProcess here, or a container (containers.ContainerProcess)."""

    def start(self) -> None: ...

    def alive(self) -> bool: ...

    @property
    def returncode(self) -> int | None: ...

    def stop(self, grace_s: float = 15.0) -> None: ...


def remove_shared_memory(prefix: str | None) -> None:
    """Unlink the shared memory regions whose names start with `prefix` (none for None)."""
    for region in SHARED_MEMORY.glob(f"{prefix}*") if prefix else ():
        region.unlink(missing_ok=True)


class ManagedProcess:
    def __init__(
        self, argv: list[str], env: dict[str, str], log_path: Path, run_dir: Path, label: str, shm_prefix: str | None = None
    ):
        self.argv, self.env, self.log_path, self.run_dir, self.label = argv, env, log_path, run_dir, label
        self.shm_prefix = shm_prefix  # the names of the shared memory its group creates start with it
        self.popen: subprocess.Popen | None = None
        self.pidfile: Path | None = None

    def start(self) -> None:
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        self.run_dir.mkdir(parents=True, exist_ok=True)
        with open(self.log_path, "ab") as log:
            self.popen = subprocess.Popen(
                self.argv,
                env=self.env,
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,  # own group: stop() takes the stubs too; Ctrl-C reaches pytest only
                preexec_fn=_die_with_parent,  # noqa: PLW1509 - prctl only, no locks taken between fork and exec
            )
        _RUNNING.add(self)
        self.pidfile = self.run_dir / f"{PID_NAMESPACE}-{self.popen.pid}.json"
        owner = os.getpid()
        self.pidfile.write_text(
            json.dumps(
                {
                    "pid": self.popen.pid,
                    "pgid": self.popen.pid,
                    "label": self.label,
                    "argv0": self.argv[0],
                    "owner_pid": owner,
                    "owner_start": process_start_time(owner),
                    "log": str(self.log_path),
                    "pid_namespace": PID_NAMESPACE,
                    "shm_prefix": self.shm_prefix,
                }
            )
        )

    @property
    def pid(self) -> int:
        assert self.popen is not None, "pid of a process not started"
        return self.popen.pid

    def alive(self) -> bool:
        return self.popen is not None and self.popen.poll() is None

    @property
    def returncode(self) -> int | None:
        return None if self.popen is None else self.popen.poll()

    def stop(self, grace_s: float = 15.0) -> None:
        """SIGTERM (tritonserver unloads models and exits), then SIGKILL the whole group."""
        if self.popen is None:
            return
        if self.alive():
            try:
                self.popen.send_signal(signal.SIGTERM)
                self.popen.wait(timeout=grace_s)
            except subprocess.TimeoutExpired:
                pass
        # stubs left behind by a crashed or killed server are still in its group
        try:
            os.killpg(self.popen.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        self.popen.wait()
        deadline = time.monotonic() + 5
        while _group_alive(self.popen.pid) and time.monotonic() < deadline:
            time.sleep(0.05)
        remove_shared_memory(self.shm_prefix)
        _RUNNING.discard(self)
        if self.pidfile is not None:
            self.pidfile.unlink(missing_ok=True)


def reap_orphans(run_dir: Path, progress: Progress) -> int:
    """Kill server groups whose owning session is gone; returns how many were reaped."""
    reaped = 0
    for pidfile in sorted(run_dir.glob("*.json")) if run_dir.is_dir() else []:
        try:
            info = json.loads(pidfile.read_text())
        except (OSError, json.JSONDecodeError):
            pidfile.unlink(missing_ok=True)
            continue
        if info.get("pid_namespace", PID_NAMESPACE) != PID_NAMESPACE:
            continue  # a session in another pid namespace (a container) reaps its own
        owner_start = info.get("owner_start")
        if owner_start is not None and process_start_time(info["owner_pid"]) == owner_start:
            continue  # its session is still running
        if _group_alive(info["pgid"]):
            progress.say(f"reaping {info['label']} (pid {info['pid']}) left behind by a session that died")
            try:
                os.killpg(info["pgid"], signal.SIGKILL)
            except ProcessLookupError:
                pass
            reaped += 1
        remove_shared_memory(info.get("shm_prefix"))
        pidfile.unlink(missing_ok=True)
    return reaped


@atexit.register
def _stop_all() -> None:
    with shielded():
        for proc in list(_RUNNING):
            proc.stop(grace_s=5)


def log_tail(log_path: Path, lines: int = 5) -> str:
    """The last lines of a server's log on one line, for an error that says why it did not start."""
    try:
        return " | ".join(log_path.read_text(errors="replace").strip().splitlines()[-lines:]) or "(its log is empty)"
    except OSError:
        return "(no log)"


Ready = TypeVar("Ready")


def start_until_ready(
    process: ManagedProcess,
    ready: Callable[[], Ready],
    *,
    what: str,
    log_path: Path,
    timeout_s: float,
    unavailable: Callable[[str], Exception],
    retry_on: tuple[type[Exception], ...],
) -> Ready:
    """Start `process` and return what `ready()` first returns without raising one of `retry_on`. If the process exits
    first, or `timeout_s` passes (the process then stopped), `unavailable(why)` is raised with the log's tail."""
    process.start()
    deadline = time.monotonic() + timeout_s
    while True:
        if not process.alive():
            raise unavailable(f"{what} exited ({process.returncode}) before it served: {log_tail(log_path)}")
        try:
            return ready()
        except retry_on:
            if time.monotonic() > deadline:
                process.stop()
                raise unavailable(f"{what} did not answer within {timeout_s:.0f} s: {log_tail(log_path)}") from None
            time.sleep(0.25)
