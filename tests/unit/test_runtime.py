import json
import os
import signal
import socket
import subprocess
import threading
import sys
import sysconfig
import time
from pathlib import Path

import pytest

from pytest_triton_llm.host.images import parse_image
from pytest_triton_llm.plugin.options import runtime_name
from pytest_triton_llm.common.progress import Progress
from pytest_triton_llm.stack.runtimes import RUNTIMES, ServerOptions
from pytest_triton_llm.stack.runtimes.local import tritonserver_command
from pytest_triton_llm.stack.runtimes.remote import remote_options
from pytest_triton_llm.host.processes import (
    PID_NAMESPACE,
    SHARED_MEMORY,
    ManagedProcess,
    reap_orphans,
    remove_shared_memory,
    start_until_ready,
)
from pytest_triton_llm.host.endpoints import Endpoints
from pytest_triton_llm.stack.runtimes.server import TritonServer, serving_environment
from pytest_triton_llm.stack.runtimes.tritonserver_wheel import server_environment


def test_every_endpoint_binds_loopback_only():
    argv = tritonserver_command(Path("/bin/tritonserver"), Path("/repo"), Path("/backends"), 1, 2, 3, "p_")
    pairs = dict(arg.split("=", 1) for arg in argv[1:] if "=" in arg)
    assert pairs["--http-address"] == pairs["--grpc-address"] == pairs["--metrics-address"] == "127.0.0.1"
    assert (pairs["--http-port"], pairs["--grpc-port"], pairs["--metrics-port"]) == ("1", "2", "3")
    assert pairs["--model-repository"] == "/repo" and pairs["--backend-directory"] == "/backends"
    assert pairs["--backend-config"] == "python,shm-region-prefix-name=p_"  # the regions its stop removes


def test_server_environment_hides_tokens_and_points_the_stub_at_this_python():
    base = {"HF_TOKEN": "hf_secret", "HUGGING_FACE_HUB_TOKEN": "x", "PATH": "/usr/bin", "LD_LIBRARY_PATH": "/opt/lib"}
    env = server_environment(Path("/w/libs"), serving_environment(base))
    assert "HF_TOKEN" not in env and "HUGGING_FACE_HUB_TOKEN" not in env
    assert env["HF_HUB_OFFLINE"] == "1"
    assert env["PATH"].split(os.pathsep)[0] == str(Path(sys.executable).parent)
    libs = env["LD_LIBRARY_PATH"].split(os.pathsep)
    assert libs[:2] == [sysconfig.get_config_var("LIBDIR"), "/w/libs"] and libs[-1] == "/opt/lib"


@pytest.mark.parametrize(
    ("image", "url", "chosen"),
    [(None, None, "local"), ("24.09-trtllm", None, "container"), (None, "grpc://triton:8001", "remote")],
)
def test_exactly_one_runtime_is_chosen_by_the_options_where_triton_runtime_names_none(image, url, chosen):
    options = ServerOptions(
        image=parse_image(image) if image else None,
        remote=remote_options(url, None, None, [], None, None, False) if url else None,
    )
    assert [name for name, runtime in RUNTIMES.items() if runtime.default_for(options)] == [chosen]
    assert runtime_name(options) == chosen


def test_only_a_shared_server_refuses_load_and_allow_load_lifts_it():
    shared = remote_options("grpc://triton:8001", None, None, [], None, None, False)
    allowed = remote_options("grpc://triton:8001", None, None, [], None, None, True)
    refusals = {
        name: [runtime.refuses_load(ServerOptions(remote=remote)) for remote in (None, shared, allowed)]
        for name, runtime in RUNTIMES.items()
    }
    assert refusals["remote"][0] is None and refusals["remote"][2] is None
    assert "--triton-allow-load" in refusals["remote"][1] and "grpc://triton:8001" in refusals["remote"][1]
    assert all(refused == [None, None, None] for name, refused in refusals.items() if name != "remote")


def _group_members(pgid: int) -> list[int]:
    out = subprocess.run(["ps", "-eo", "pid=,pgid="], capture_output=True, text=True).stdout
    return [int(p) for p, g in (line.split() for line in out.splitlines()) if int(g) == pgid]


def test_stop_takes_the_whole_process_group(tmp_path):
    # a parent that ignores SIGTERM and a child of its own: both must go
    script = "trap '' TERM; sleep 300 & wait"
    proc = ManagedProcess(["bash", "-c", script], dict(os.environ), tmp_path / "log", tmp_path / "run", "test")
    proc.start()
    time.sleep(0.3)
    assert len(_group_members(proc.pid)) >= 2
    assert proc.pidfile == tmp_path / "run" / f"{PID_NAMESPACE}-{proc.pid}.json" and proc.pidfile.is_file()
    proc.stop(grace_s=0.5)
    assert _group_members(proc.pid) == []
    assert not proc.pidfile.exists()


def test_stop_removes_the_shared_memory_named_with_its_prefix_and_no_other(tmp_path):
    # as tritonserver's python stubs leave their regions when it exits before unloading them (its exit timeout)
    prefix, other = f"triton_llm_test_{os.getpid()}_", SHARED_MEMORY / f"triton_llm_other_{os.getpid()}_a"
    other.write_bytes(b"x")
    script = f"echo a > {SHARED_MEMORY}/{prefix}a; echo b > {SHARED_MEMORY}/{prefix}b; echo ready; sleep 300"
    proc = ManagedProcess(["bash", "-c", script], dict(os.environ), tmp_path / "log", tmp_path / "run", "shm", prefix)
    try:
        proc.start()
        deadline = time.monotonic() + 5
        while "ready" not in (tmp_path / "log").read_text() and time.monotonic() < deadline:
            time.sleep(0.05)
        assert sorted(p.name for p in SHARED_MEMORY.glob(f"{prefix}*")) == [f"{prefix}a", f"{prefix}b"]
        proc.stop(grace_s=1)
        assert list(SHARED_MEMORY.glob(f"{prefix}*")) == [] and other.exists()
    finally:
        remove_shared_memory(prefix)
        other.unlink()


def test_orphans_of_a_dead_session_are_reaped(tmp_path):
    # a "session" that starts a server group and dies without cleaning up (like SIGKILL)
    prefix = f"triton_llm_orphan_{os.getpid()}_"
    code = (
        "import os, sys, time; from pathlib import Path;"
        "from pytest_triton_llm.host.processes import PID_NAMESPACE, ManagedProcess;"
        f"d = Path({str(tmp_path)!r});"
        f"p = ManagedProcess(['sleep', '300'], dict(os.environ), d / 'log', d / 'run', 'orphan', {prefix!r});"
        "p.start(); print(p.pid, flush=True); os._exit(0)"
    )
    region = SHARED_MEMORY / f"{prefix}stub"  # what its stubs left in shared memory goes with it
    region.write_bytes(b"x")
    try:
        out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
        orphan = int(out.split()[0])
        assert _group_members(orphan) == [orphan]
        lines = []
        assert reap_orphans(tmp_path / "run", Progress(lines.append)) == 1
        deadline = time.monotonic() + 5
        while _group_members(orphan) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert _group_members(orphan) == []
        assert "left behind" in lines[0]
        assert list((tmp_path / "run").iterdir()) == []
        assert not region.exists()
    finally:
        region.unlink(missing_ok=True)  # a failed run leaves nothing in /dev/shm


def test_live_sessions_are_not_reaped(tmp_path):
    proc = ManagedProcess(["sleep", "300"], dict(os.environ), tmp_path / "log", tmp_path / "run", "mine")
    proc.start()
    try:
        assert reap_orphans(tmp_path / "run", Progress(lambda _: None)) == 0
        assert proc.alive()
    finally:
        proc.stop(grace_s=1)
    assert proc.returncode == -signal.SIGTERM


def test_pidfiles_of_another_pid_namespace_are_never_signalled(tmp_path):
    # a session inside a container shares the engine cache: its pids name other processes here
    (tmp_path / "run").mkdir()
    victim = subprocess.Popen(["sleep", "300"], start_new_session=True)
    try:
        info = {
            "pid": victim.pid,
            "pgid": victim.pid,
            "label": "in a container",
            "owner_pid": 999999,
            "owner_start": "1",
            "pid_namespace": "4026599999",
        }
        (tmp_path / "run" / f"4026599999-{victim.pid}.json").write_text(json.dumps(info))
        assert reap_orphans(tmp_path / "run", Progress(lambda _: None)) == 0
        assert victim.poll() is None and (tmp_path / "run" / f"4026599999-{victim.pid}.json").exists()
    finally:
        victim.kill()
        victim.wait()


class _NotYet(Exception):
    pass


def test_start_until_ready_returns_what_the_first_ready_answer_gave(tmp_path):
    proc = ManagedProcess(["sleep", "300"], dict(os.environ), tmp_path / "log", tmp_path / "run", "ready")
    answers = iter([_NotYet(), _NotYet(), "served"])

    def ready():
        answer = next(answers)
        if isinstance(answer, Exception):
            raise answer
        return answer

    try:
        got = start_until_ready(
            proc, ready, what="it", log_path=proc.log_path, timeout_s=30, unavailable=RuntimeError, retry_on=(_NotYet,)
        )
        assert (got, proc.alive()) == ("served", True)
    finally:
        proc.stop()


def test_start_until_ready_says_the_process_exited_with_its_code_and_log_tail(tmp_path):
    script = "echo loading; echo 'bad weights' >&2; exit 3"
    proc = ManagedProcess(["bash", "-c", script], dict(os.environ), tmp_path / "log", tmp_path / "run", "dies")

    def never():
        raise _NotYet()

    with pytest.raises(RuntimeError) as raised:
        start_until_ready(
            proc, never, what="the server", log_path=proc.log_path, timeout_s=30, unavailable=RuntimeError, retry_on=(_NotYet,)
        )
    assert str(raised.value) == "the server exited (3) before it served: loading | bad weights"


def test_start_until_ready_stops_a_process_that_never_answers_and_says_how_long_it_waited(tmp_path):
    proc = ManagedProcess(["sleep", "300"], dict(os.environ), tmp_path / "log", tmp_path / "run", "silent")

    def never():
        raise _NotYet()

    with pytest.raises(RuntimeError) as raised:
        start_until_ready(
            proc, never, what="the server", log_path=proc.log_path, timeout_s=1, unavailable=RuntimeError, retry_on=(_NotYet,)
        )
    assert (str(raised.value), proc.alive()) == ("the server did not answer within 1 s: (its log is empty)", False)


def test_a_port_answered_by_another_servers_grpc_is_not_ready_yet(tmp_path):
    """Between free_ports and tritonserver binding its ports (after its models load), another server may bind one of
    them: an HTTP/2 listener (a gRPC port) answers the readiness poll with bytes that are no HTTP/1.1 status line."""
    listener = socket.create_server(("127.0.0.1", 0))
    port = listener.getsockname()[1]

    def answer_like_grpc():
        conn, _ = listener.accept()
        with conn:
            conn.recv(4096)
            conn.sendall(b"\x00\x00\x12\x04\x00\x00\x00\x00\x00")  # an HTTP/2 SETTINGS frame's header

    thread = threading.Thread(target=answer_like_grpc, daemon=True)
    thread.start()
    endpoints = Endpoints(f"127.0.0.1:{port}", "127.0.0.1:1", "127.0.0.1:1")
    server = TritonServer("m", endpoints, tmp_path / "log", None, "tritonserver")
    try:
        assert server.ready() is False
    finally:
        thread.join(timeout=5)
        listener.close()
