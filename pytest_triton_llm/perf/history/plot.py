"""One PNG per series: each metric over the runs, its change points marked (red: worse, green: better)."""

from __future__ import annotations

import re
from pathlib import Path

from .otava import ChangePoint
from .store import Series


def plot_history(series: list[Series], points: list[ChangePoint], directions: dict[str, int], out: Path) -> list[Path]:
    import matplotlib

    matplotlib.use("Agg")  # no display: render to a file
    import matplotlib.pyplot as plt
    from matplotlib.ticker import MaxNLocator

    out.mkdir(parents=True, exist_ok=True)
    written = []
    for one in series:
        metrics = sorted(one.values)
        if not metrics:
            continue
        figure, axes = plt.subplots(len(metrics), 1, figsize=(9, 2.2 * len(metrics)), sharex=True, squeeze=False)
        runs = list(range(1, len(one.started) + 1))
        for axis, metric in zip(axes[:, 0], metrics, strict=True):
            axis.plot(runs, [float("nan") if v is None else v for v in one.values[metric]], marker="o", markersize=3)
            axis.set_ylabel(metric, fontsize=8)
            for point in (p for p in points if p.series == one.name and p.metric == metric):
                worse = directions.get(metric, 1) * point.change_percent < 0
                axis.axvline(point.index + 0.5, color="tab:red" if worse else "tab:green", linestyle="--")
                axis.annotate(f"{point.change_percent:+.1f}%", (point.index + 0.6, axis.get_ylim()[1]), fontsize=7, va="top")
        axes[-1, 0].set_xlabel("run (oldest first)")
        axes[-1, 0].xaxis.set_major_locator(MaxNLocator(integer=True))
        figure.suptitle(one.name, fontsize=10)
        figure.tight_layout()
        path = out / f"{re.sub(r'[^A-Za-z0-9_.=-]+', '_', one.name).strip('_')}.png"
        figure.savefig(path, dpi=90)
        plt.close(figure)
        written.append(path)
    return written
