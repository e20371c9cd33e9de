"""Server metrics (and GPU power) over each deployment's load points, beside their latency: one PNG per deployment."""

from __future__ import annotations

import re
from pathlib import Path

from .monitor import ACTIVE, PENDING, SCHEDULED

GAP_S = 1.0  # between two load points laid end to end on the time axis


def _segments(points: dict, results: dict) -> list[tuple[str, dict, dict]]:
    """(label, series, that run's perf figures) per run, in the order the load points ran."""
    out = []
    for point, runs in points.items():
        entry = results.get(point, {})
        figures = entry.get("runs") or [entry] * len(runs)
        for i, series in enumerate(runs):
            label = point if len(runs) == 1 else f"{point} #{i + 1}"
            out.append((label, series, figures[i] if i < len(figures) else entry))
    return out


def _inside(t: list[float], values: list, end: float) -> tuple[list[float], list]:
    kept = [(ti, v) for ti, v in zip(t, values, strict=True) if 0.0 <= ti <= end and v is not None]
    return [ti for ti, _ in kept], [v for _, v in kept]


def plot_series(series: dict, results: dict, report: str | Path) -> list[Path]:
    """series: {deployment: {load point: [series per run]}} (the side file's); results: {deployment: {load point:
    perf entry}}; writes `<report>.series-<deployment>.png` per deployment and returns them."""
    import matplotlib

    matplotlib.use("Agg")  # no display: render to a file
    import matplotlib.pyplot as plt

    written = []
    for deployment, points in series.items():
        segments = [s for s in _segments(points, results.get(deployment, {})) if s[1].get("window_s")]
        if not segments:
            continue
        gpu = any("gpu" in s for _, s, _ in segments)
        rows = ["latency (ms)", "requests", "KV cache used (%)", "queue share (%)"] + (["GPU power (W)"] if gpu else [])
        fig, axes = plt.subplots(len(rows), 1, figsize=(10, 2.0 * len(rows) + 1), dpi=110, sharex=True)
        offset = 0.0
        for n, (label, s, figures) in enumerate(segments):
            _draw_segment(axes, label, s, figures, offset, first=n == 0, gpu=gpu)
            offset += s["window_s"][1] + GAP_S
        for ax, name in zip(axes, rows, strict=True):
            ax.set_ylabel(name, fontsize=8)
            ax.grid(True, alpha=0.3)
        axes[0].legend(fontsize=7, loc="upper right")
        axes[1].legend(fontsize=7, loc="upper right")
        axes[-1].set_xlabel("seconds (load points end to end, each from its first request)")
        fig.suptitle(f"{deployment}: server metrics over each load point")
        fig.tight_layout()
        path = Path(report).with_suffix(f".series-{re.sub(r'[^A-Za-z0-9.-]+', '_', deployment)}.png")
        path.parent.mkdir(parents=True, exist_ok=True)
        fig.savefig(path)
        plt.close(fig)
        written.append(path)
    return written


def _draw_segment(axes, label: str, s: dict, figures: dict, offset: float, first: bool, gpu: bool) -> None:
    """One load point's window on every row, from `offset` seconds; `first` labels its lines for the legend (one
    entry per line, not one per load point)."""
    end = s["window_s"][1]
    server = s["server"]
    t = server["t_s"]
    latency = figures.get("latency_ms") or {}
    for stat, style in (("p50", "-"), ("p99", "--")):
        if stat in latency:
            axes[0].hlines(
                latency[stat], offset, offset + end, linestyles=style, colors="C0", label=f"latency {stat}" if first else None
            )
    for key, name, color in ((ACTIVE, "active", "C1"), (SCHEDULED, "scheduled", "C2"), (PENDING, "pending", "C3")):
        x, y = _inside(t, server["values"].get(key, [None] * len(t)), end)
        axes[1].step([offset + v for v in x], y, where="post", color=color, label=name if first else None)
    x, y = _inside(t, server.get("kv_cache_utilisation", [None] * len(t)), end)
    axes[2].plot([offset + v for v in x], [100 * v for v in y], color="C4")
    x, y = _inside(t, server.get("queue_share", [None] * len(t)), end)
    # a share per interval in which requests finished: points, not a line across the intervals without any
    axes[3].plot([offset + v for v in x], [100 * v for v in y], marker=".", linestyle="none", color="C5")
    if gpu and "gpu" in s:
        x, y = _inside(s["gpu"]["t_s"], s["gpu"]["values"].get("power_w", []), end)
        axes[4].plot([offset + v for v in x], y, color="C6")
    for ax in axes:
        ax.axvspan(offset, offset + end, color="0.5", alpha=0.06)
    axes[0].annotate(label, (offset, 1.02), xycoords=("data", "axes fraction"), fontsize=7)
