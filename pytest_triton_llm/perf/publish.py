"""What the perf suite leaves behind once a run ends: the --perf-save baseline, the plots and the time series file."""

from __future__ import annotations

from pathlib import Path

from ..stack.lock import DUMMY
from ..common.progress import Progress
from .baseline import save_baseline
from .plot import plot_latency_vs_throughput
from .series import take_series, write_series
from .series_plot import plot_series


def dummy_deployments(records: dict) -> frozenset[str]:
    """The deployments of a run report's records ({id: record}) whose engine has dummy weights."""
    return frozenset(d for d, r in records.items() if r.get("weights") == DUMMY)


def publish(
    results: dict,
    run: dict,
    save: str | None,
    report: str | None,
    progress: Progress,
    dummy: frozenset[str] = frozenset(),
    sweeps: dict | None = None,
    v1: dict | None = None,
) -> list[str]:
    """results: {deployment: {load point: perf entry}}; `dummy`: deployments of dummy-weight engines (marked in the
    plot); `sweeps`: {deployment: its --perf-sweep result} (drawn, the knee marked); `v1`: the /v1 perf suite's load
    points, shaped as results (drawn, not saved: a baseline compares Triton deployments); returns the plots written
    (next to the report)."""
    if save and v1 and not results:
        progress.say(
            f"perf: {save} not written: --perf-save keeps Triton deployments' load points, and this run measured /v1 only"
        )
    if not results and not sweeps and not v1:
        return []
    series = take_series(results)  # a baseline and the report keep figures; the time series go to a side file
    if save and results:
        kept = save_baseline(save, results, run)
        note = f" (the previous file is kept as {kept})" if kept else ""
        progress.say(f"perf: baseline saved to {save}{note}")
    if not report:
        return []
    plots = []
    try:
        drawn = {**results, **(v1 or {})}
        png = plot_latency_vs_throughput(drawn, Path(report).with_suffix(".perf.png"), dummy, sweeps or {})
        plots += [str(png)] if png is not None else []
    except Exception as exc:  # a missing plot must not cost the report
        progress.say(f"WARNING: perf plot not written: {type(exc).__name__}: {exc}")
    if series:
        write_series(series, results, report)
        try:
            plots += [str(png) for png in plot_series(series, results, report)]
        except Exception as exc:  # as above
            progress.say(f"WARNING: server metrics plot not written: {type(exc).__name__}: {exc}")
    return plots
