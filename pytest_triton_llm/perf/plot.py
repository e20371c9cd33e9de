"""Latency vs throughput over each deployment's concurrency sweep (PNG).

Closed-loop points (concurrency=N) are joined in order of N, p50 solid and p99 dashed; open-loop
points (rate=R) are marked apart, since they are not on the sweep. Deployments of dummy-weight engines say so in the
legend and the title.
"""

from __future__ import annotations

from pathlib import Path

from ..stack.lock import DUMMY_LABEL


def _sweep(points: dict) -> tuple[list, list]:
    sweep: list[tuple[float, str, dict]] = []  # (concurrency or rate, load point, its perf entry)
    rates: list[tuple[float, str, dict]] = []
    for name, p in points.items():
        if not p.get("latency_ms"):
            continue
        kind, _, value = name.partition("=")
        (sweep if kind == "concurrency" else rates).append((float(value), name, p))
    return sorted(sweep), rates


def plot_latency_vs_throughput(
    results: dict, path: Path, dummy: frozenset[str] = frozenset(), sweeps: dict | None = None
) -> Path | None:
    """results: {deployment: {load point: perf entry}}; `dummy`: deployments of dummy-weight engines; `sweeps`:
    {deployment: its --perf-sweep result}, drawn with its knee marked; returns the PNG written, or None if nothing to
    plot."""
    sweeps = {d: s for d, s in (sweeps or {}).items() if any(step.get("latency_ms") for step in s["steps"])}
    import matplotlib

    matplotlib.use("Agg")  # no display: render to a file
    import matplotlib.pyplot as plt

    series = {f"{d} ({DUMMY_LABEL})" if d in dummy else d: _sweep(points) for d, points in results.items()}
    if not any(sweep or rates for sweep, rates in series.values()) and not sweeps:
        return None
    fig, ax = plt.subplots(figsize=(8, 5), dpi=120)
    for deployment, (sweep, rates) in series.items():
        color = None
        if sweep:
            x = [p["output_tokens_per_s"] for _, _, p in sweep]
            (line,) = ax.plot(x, [p["latency_ms"]["p50"] for _, _, p in sweep], marker="o", label=f"{deployment} p50")
            color = line.get_color()
            ax.plot(
                x,
                [p["latency_ms"]["p99"] for _, _, p in sweep],
                marker="^",
                linestyle="--",
                color=color,
                label=f"{deployment} p99",
            )
            for (value, _, p), xi in zip(sweep, x, strict=True):
                ax.annotate(f"c={value:g}", (xi, p["latency_ms"]["p50"]), textcoords="offset points", xytext=(4, -10), fontsize=7)
        for _, name, p in rates:
            ax.scatter(
                [p["output_tokens_per_s"]], [p["latency_ms"]["p50"]], marker="x", color=color, label=f"{deployment} {name} p50"
            )
    for deployment, sweep in sweeps.items():
        _plot_sweep(ax, f"{deployment} ({DUMMY_LABEL})" if deployment in dummy else deployment, sweep)
    ax.set_xlabel("output tokens/s")
    ax.set_ylabel("end-to-end latency (ms)")
    marked = " (dummy weights: speed only)" if dummy & set(results) else ""
    ax.set_title(f"Latency vs throughput over the concurrency sweep{marked}")
    ax.grid(True, alpha=0.3)
    ax.legend(fontsize=8)
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path)
    plt.close(fig)
    return path


def _plot_sweep(ax, label: str, sweep: dict) -> None:
    """A --perf-sweep's steps (p50 latency over output tokens/s) and its knee, starred and named."""
    steps = [s for s in sweep["steps"] if s.get("latency_ms")]
    x = [s["output_tokens_per_s"] for s in steps]
    (line,) = ax.plot(x, [s["latency_ms"]["p50"] for s in steps], marker="s", linestyle=":", label=f"{label} sweep p50")
    for step, xi in zip(steps, x, strict=True):
        ax.annotate(
            f"c={step['concurrency']}", (xi, step["latency_ms"]["p50"]), textcoords="offset points", xytext=(4, 4), fontsize=7
        )
    knee = next((s for s in steps if s["concurrency"] == sweep["knee"]), None)
    if knee is not None:
        at = (knee["output_tokens_per_s"], knee["latency_ms"]["p50"])
        ax.scatter([at[0]], [at[1]], marker="*", s=260, color=line.get_color(), zorder=5, label=f"{label} knee")
        ax.annotate(f"knee c={knee['concurrency']}", at, textcoords="offset points", xytext=(6, 10), fontsize=9, weight="bold")
