"""How many load processes send a perf load point (--perf-workers), and whether they kept up with the server."""

from __future__ import annotations

import math
import os

from ..triton.load import LoadRecords

# streams one load process keeps well under its ceiling (26k streamed responses/s from one process on a 16-core
# host, benchmarks/results/harness_fidelity.16-core.json)
CLIENTS_PER_PROCESS = 16
# an event loop busy this share of the measured time delays responses by its own queue: the figures are the client's
BUSY_LOOP = 0.7


def load_processes(requested: int | None, point: dict, free_cores: int) -> int:
    """--perf-workers N, else one process per CLIENTS_PER_PROCESS closed-loop clients (open loop: as for that many),
    within the cores the server leaves this host (at least one)."""
    if requested is not None:
        return requested
    clients = point.get("concurrency") or CLIENTS_PER_PROCESS
    return max(1, min(free_cores, math.ceil(clients / CLIENTS_PER_PROCESS)))


def free_cores(served_on_cpu: bool, cores: int | None = None) -> int:
    """The cores a load generator may take: one where the server computes on CPUs (its OpenMP pool takes every core
    it is given, and a CPU-served model is slow enough for one process), else all of this process's but one (the
    serving loop of a GPU server on this host)."""
    cores = cores or len(os.sched_getaffinity(0))
    return 1 if served_on_cpu else max(1, cores - 1)


def client_figures(records: LoadRecords, seconds: float) -> dict:
    """The report's word on the load generator of one run: its processes and how busy their event loops were."""
    busy = records.loop_cpu_s / seconds / records.workers if seconds else 0.0
    return {"processes": records.workers, "loop_busy": round(busy, 3), "kept_up": busy < BUSY_LOOP}
