"""The repeat loop of a load point, shared by the Triton and the /v1 perf tests: each side (a deployment, the
reference measured beside it, an endpoint) runs the same requests in interleaved rounds (A B B A ...: neither side
always goes first), after a round that is not judged where there are two sides (a side's first run came before the
other had ever run: against a twin llama.cpp server it measured up to 1.9x the rounds after it, 2026-12-02). Each run
is summarised, its per-request records written where --perf-records asks, and timed while its monitor samples the
server where it has one."""

from __future__ import annotations

from collections.abc import Callable
from contextlib import AbstractContextManager, nullcontext
from dataclasses import dataclass, field
from typing import Any

from ..triton.load import run_load
from .client_processes import client_figures
from .metrics import summarize
from .records import epoch_offset_ns, write_records


@dataclass
class Side:
    """One thing measured: `label` names it in progress lines ("perf: <deployment>"), `deployment` in the records."""

    label: str
    deployment: str
    target: Any  # a load target: triton.load.Target or openai.load.V1Target
    requests: list
    warmup: list
    workers: int
    monitor: Callable[[], AbstractContextManager] | None = None  # perf.monitor.monitor_load, or none


@dataclass
class Measured:
    """A side's runs: their summaries, every record and the seconds they took, and the monitor's series per run."""

    runs: list[dict] = field(default_factory=list)
    records: list = field(default_factory=list)
    seconds: float = 0.0
    series: list = field(default_factory=list)


def measure_rounds(
    sides: list[Side],
    point_name: str,
    point: dict,
    workload_name: str,
    seed: int,
    options,
    progress,
    undecided: Callable[[list[dict], list[dict]], bool] | None = None,
):
    """`options.repeats` rounds of every side at load point `point` (concurrency or rate): a Measured per side, in
    the order given. Then, while `undecided(the first side's runs, the second's)` says its verdicts cannot be told yet
    (a budget's, a paired comparison's), one more round at a time, up to `options.repeats_max` (--perf-repeats-max:
    adaptive repeats)."""
    measured = [Measured() for _ in sides]
    rounds = list(zip(sides, measured, strict=True))
    if len(sides) > 1:  # paired: a first round, not judged, in which every side has run before any is measured
        for side in sides:
            what = f"{side.label} {point_name} warm-up round, not judged ({len(side.requests)} requests)"
            with progress.step(what):
                run_load(side.target, side.requests, side.warmup, seed=seed, workers=side.workers, **point)
    cap = max(options.repeats, getattr(options, "repeats_max", None) or options.repeats)
    repeat = 0
    reference = measured[1].runs if len(measured) > 1 else []  # the second side's runs, paired round by round
    while repeat < options.repeats or (undecided is not None and repeat < cap and undecided(measured[0].runs, reference)):
        repeat += 1
        label = f" run {repeat}/{options.repeats if repeat <= options.repeats else cap}" if cap > 1 else ""
        for side, into in rounds if repeat % 2 else rounds[::-1]:
            _run_side(side, into, point_name, point, workload_name, seed, options, progress, label, repeat)
    return measured


def _run_side(side, into, point_name, point, workload_name, seed, options, progress, label, repeat) -> None:
    """One run of one side at the load point: its summary, records, seconds and monitor series added to `into`."""
    offset_ns = epoch_offset_ns()  # --perf-records: this load point's perf_counter times onto the epoch
    what = f"{side.label} {point_name}{label} ({len(side.requests)} requests, workload {workload_name})"
    with progress.step(what), (side.monitor or nullcontext)() as watch:
        records, seconds = run_load(side.target, side.requests, side.warmup, seed=seed, workers=side.workers, **point)
    if options.records:
        write_records(
            options.records,
            records,
            offset_ns,
            deployment=side.deployment,
            load_point=point_name,
            workload=workload_name,
            repeat=repeat,
        )
    summary = summarize(records, seconds)
    if watch is not None:  # + server_metrics, gpu_telemetry
        summary = watch.attach(summary, records)
    summary["client"] = client_figures(records, seconds)  # did the load generator keep up
    into.runs.append(summary)
    into.records += records
    into.seconds += seconds
    into.series.append(watch.series if watch is not None else None)
