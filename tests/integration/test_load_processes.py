"""The load engine in several processes against a real tritonserver: every request once, Triton's own count equal to
what the clients claim, one clock for all records, the open loop's one arrival schedule."""

import json
import urllib.request
from pathlib import Path

import pytest

from pytest_triton_llm.triton.load import Target, arrival_offsets, run_load
from pytest_triton_llm.common.progress import Progress
from pytest_triton_llm.stack.runtimes import RUNTIMES, Launch, ServerOptions
from pytest_triton_llm.triton.tensor_contract import ensemble_inputs

from ..conftest import ROOT

ECHO = ROOT / "benchmarks" / "echo_repository"


@pytest.fixture(scope="module")
def echo_server(tmp_path_factory):
    """The embedded tritonserver serving benchmarks/echo_repository's echo model (a python model that does no work)."""
    runtime = RUNTIMES["local"].create(ServerOptions(), Path("~/.cache/pytest-triton-llm").expanduser(), Progress())
    server = runtime.start(Launch("echo", ECHO, ECHO, "echo", tmp_path_factory.mktemp("echo") / "tritonserver.log", 120.0))
    yield server
    server.stop()


def served(server) -> int:
    with urllib.request.urlopen(f"http://{server.endpoints.http}/v2/models/echo/stats", timeout=10) as resp:  # noqa: S310
        return int(json.loads(resp.read())["model_stats"][0]["inference_stats"]["success"]["count"])


def test_three_processes_send_every_request_once_and_triton_counts_them_all(echo_server):
    work = [ensemble_inputs(f"request {i}", 4) for i in range(90)]
    before = served(echo_server)
    records, seconds = run_load(Target(echo_server.endpoints, "echo"), work, work[:6], concurrency=6, workers=3)
    assert [r.index for r in records] == list(range(90))
    assert [r.error for r in records] == [None] * 90
    assert served(echo_server) - before == 96  # 90 measured + 6 warm-up
    assert {r.worker for r in records} == {0, 1, 2}
    assert records.workers == 3 and records.client_cpu_s > 0
    # one clock: every record lies inside the measured interval that ends with the last answer
    start = max(r.done for r in records) - seconds
    assert all(start <= r.sent <= r.done for r in records)


def test_processes_keep_the_open_loops_one_arrival_schedule(echo_server):
    work = [ensemble_inputs(f"request {i}", 4) for i in range(40)]
    records, seconds = run_load(Target(echo_server.endpoints, "echo", "generate"), work, request_rate=80.0, seed=3, workers=2)
    assert [r.error for r in records] == [None] * 40
    start = max(r.done for r in records) - seconds
    offsets = arrival_offsets(40, 80.0, "poisson", 3)
    # each request left at its own arrival time or after it, never before: the schedule is the one-process schedule
    assert all(r.sent - start >= offset - 1e-3 for r, offset in zip(records, offsets, strict=True))
    assert {r.worker for r in records[0::2]} == {0} and {r.worker for r in records[1::2]} == {1}


def test_more_processes_than_clients_start_one_process_a_client(echo_server):
    work = [ensemble_inputs("hello", 4)] * 4
    records, _ = run_load(Target(echo_server.endpoints, "echo"), work, concurrency=2, workers=8)
    assert records.workers == 2 and [r.error for r in records] == [None] * 4
