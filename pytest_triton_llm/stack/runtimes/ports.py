"""Free TCP ports on the loopback interface, reserved across this user's processes.

A port the OS reports free is bound by the server only later: tritonserver binds its ports after its models load,
seconds on. Meanwhile the OS may report the same port free to another session (an xdist worker, a warm server's
keeper, a stand-in's uvicorn), and whichever binds second exits "already in use" (a CI run on 2026-12-01: a server's
metrics port was another's, and the serve test read a 404 there). So every port handed out is also reserved, as a
file named by the port in a folder all of this user's sessions share, and no session hands out a port reserved by
another within the last RESERVED_S seconds.
"""

from __future__ import annotations

import os
import socket
import tempfile
import time
from pathlib import Path

RESERVED_S = 900.0  # beyond the longest server start (--triton-start-timeout's default is 600 s)


def reservations() -> Path:
    return Path(tempfile.gettempdir()) / f"pytest-triton-llm-ports-{os.getuid()}"


def free_ports(count: int, host: str = "127.0.0.1") -> list[int]:
    """`count` distinct ports the OS reports free now and no session of this user was handed in the last RESERVED_S
    seconds (the caller still retries on new ports if another program binds one meanwhile)."""
    folder = reservations()
    folder.mkdir(mode=0o700, exist_ok=True)
    _forget_expired(folder)
    ports: list[int] = []
    while len(ports) < count:
        port = _unbound_port(host)
        if port not in ports and _reserve(folder / str(port)):
            ports.append(port)
    return ports


def _unbound_port(host: str) -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind((host, 0))
        return s.getsockname()[1]


def _reserve(path: Path) -> bool:
    try:
        os.close(os.open(path, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o600))
    except FileExistsError:
        return False
    return True


def _forget_expired(folder: Path) -> None:
    expired = time.time() - RESERVED_S
    for path in folder.iterdir():
        try:
            if path.stat().st_mtime < expired:
                path.unlink()
        except FileNotFoundError:  # another session forgot it first
            pass
