"""Ports handed to servers: reserved across sessions until the server has had time to bind them, and a server is
ready only once its metrics endpoint, the last it starts, answers."""

import os
import socket
import threading
import time
from http.server import BaseHTTPRequestHandler, HTTPServer

import pytest

from pytest_triton_llm.host.endpoints import Endpoints
from pytest_triton_llm.stack.runtimes import ports
from pytest_triton_llm.stack.runtimes.server import TritonServer


@pytest.fixture
def folder(tmp_path, monkeypatch):
    monkeypatch.setattr(ports, "reservations", lambda: tmp_path / "ports")
    return tmp_path / "ports"


def test_a_port_another_session_was_handed_is_not_handed_again(folder, monkeypatch):
    """The OS reports a port free until a server binds it: the second session asking is given another."""
    offered = iter([40001, 40002, 40001, 40003, 40002, 40004])
    monkeypatch.setattr(ports, "_unbound_port", lambda host: next(offered))
    assert ports.free_ports(2) == [40001, 40002]
    assert ports.free_ports(2) == [40003, 40004]
    assert sorted(p.name for p in folder.iterdir()) == ["40001", "40002", "40003", "40004"]


def test_a_reservation_expires_after_the_longest_server_start(folder, monkeypatch):
    offered = iter([40001, 40001])
    monkeypatch.setattr(ports, "_unbound_port", lambda host: next(offered))
    assert ports.free_ports(1) == [40001]
    long_ago = time.time() - ports.RESERVED_S - 1
    os.utime(folder / "40001", (long_ago, long_ago))
    assert ports.free_ports(1) == [40001]


def test_free_ports_are_bindable_and_distinct(folder):
    found = ports.free_ports(3)
    assert len(set(found)) == 3
    for port in found:
        with socket.create_server(("127.0.0.1", port)):
            pass


class _Answer(BaseHTTPRequestHandler):
    status = 200

    def do_GET(self):
        self.send_response(self.status)
        self.end_headers()

    def log_message(self, *args):
        pass


def _serve(status: int) -> HTTPServer:
    handler = type("Answer", (_Answer,), {"status": status})
    server = HTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server


def _at(server: HTTPServer) -> str:
    return f"127.0.0.1:{server.server_address[1]}"


def test_a_server_whose_metrics_port_another_program_answers_is_not_ready(tmp_path):
    """CI, 2026-12-01: health said ready, and the metrics port, bound by another server meanwhile, answered 404."""
    health, other, metrics = _serve(200), _serve(404), _serve(200)
    try:
        taken, serving = (
            TritonServer("m", Endpoints(_at(health), "127.0.0.1:1", _at(server)), tmp_path / "log", None, "t")
            for server in (other, metrics)
        )
        assert (taken.ready(), serving.ready()) == (False, True)
    finally:
        for server in (health, other, metrics):
            server.shutdown()
