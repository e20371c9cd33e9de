"""Perf budgets from measured runs of several sessions (one session on one machine: `--perf-calibrate N`): [[budget]]
entries for fixtures/perf_budgets.toml, `slack` away from the worst
of the sessions' means of each load point (each a report's mean of its --perf-repeats runs), with every session's
figure, their spread and the date in a comment beside each.

    python scripts/derive_budgets.py report.json [report2.json ...] [--slack 1.5] >> fixtures/perf_budgets.toml

Give one report per session, each from another machine of the same class where you can: one machine's means say
nothing of how far the next one of its class lies (two H200s differed by 1.3-1.5x in throughput). The hardware key is
the reports' hardware class (h200, a100, cpu-2 ...), so the entries judge that class only. Measure on quiet
machines with --perf-repeats 3 or more; read the entries before keeping them.
"""

from __future__ import annotations

import argparse
import datetime
import json
import sys
from pathlib import Path

from pytest_triton_llm.perf.budgets import LIMITS
from pytest_triton_llm.perf.calibrate import DERIVED
from pytest_triton_llm.perf.metrics import metric_value


def measured_mean(point: dict, metric: str) -> float | None:
    """The mean of the repeated runs, else the one run's figure; None where not measured (TTFT of V1)."""
    if metric in point.get("repeats", {}):
        return point["repeats"][metric]["mean"]
    return metric_value(point, metric)


def _points(report: dict):
    for deployment_id, deployment in sorted(report["deployments"].items()):
        for load_point, point in sorted(deployment.get("metrics", {}).get("perf", {}).items()):
            yield deployment_id, deployment, load_point, point


def budget_entries(reports: list[dict], slack: float, today: str) -> list[str]:
    """One entry per (deployment, load point) of the first report, from every report that measured it."""
    entries = []
    for deployment_id, deployment, load_point, point in _points(reports[0]):
        engine, deployment_name = deployment_id.split(":", 1)
        sessions = [
            p
            for report in reports
            if (p := report["deployments"].get(deployment_id, {}).get("metrics", {}).get("perf", {}).get(load_point))
        ]
        runs = [p.get("repeats", {}).get("output_tokens_per_s", {}).get("n", 1) for p in sessions]
        limits, figures = [], []
        for limit in DERIVED:
            metric, floor = LIMITS[limit], limit.startswith("min_")
            means = [m for p in sessions if (m := measured_mean(p, metric)) is not None]
            if not means:
                continue
            worst = min(means) if floor else max(means)  # the slowest session sets the limit
            limits.append(f"{limit} = {round(worst / slack, 1) if floor else round(worst * slack):g}")
            spread = f" (spread {max(means) / min(means):.2f}x)" if len(means) > 1 and min(means) > 0 else ""
            figures.append(f"{metric} {' / '.join(f'{m:.4g}' for m in means)}{spread}")
        if not limits:
            continue
        weights = " (dummy weights)" if deployment.get("weights") == "dummy" else ""
        measured = f"{len(sessions)} session(s) of {'+'.join(str(n) for n in runs)} run(s)"
        entries.append(
            "\n".join(
                [
                    f"[[budget]]  # derived {today} from {measured}{weights}: {'; '.join(figures)}; slack {slack:g}x "
                    "from the worst",
                    f'engine = "{engine}"',
                    f'deployment = "{deployment_name}"',
                    f'hardware = "{point["hardware_class"]}"',
                    f'image = "{point["image"]}"',
                    f'load_point = "{load_point}"',
                    f'workload = "{point["workload"]}"',
                    *limits,
                ]
            )
        )
    return entries


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("reports", type=Path, nargs="+", help="--triton-llm-report JSONs of perf runs, one per session")
    parser.add_argument("--slack", type=float, default=1.5, help="how far from the measured mean (default 1.5x)")
    args = parser.parse_args(argv)
    if args.slack < 1:
        parser.error("--slack must be >= 1: a budget tighter than the measurement fails on it")
    reports = [json.loads(path.read_text()) for path in args.reports]
    classes = {p["hardware_class"] for report in reports for *_, p in _points(report)}
    if len(classes) > 1:
        parser.error(f"the reports measured {', '.join(sorted(classes))}: derive one hardware class at a time")
    entries = budget_entries(reports, args.slack, datetime.date.today().isoformat())
    if not entries:
        print(f"{args.reports[0]}: no perf load points (run pytest -m perf with --triton-llm-report)", file=sys.stderr)
        return 1
    print("\n" + "\n\n".join(entries))
    return 0


if __name__ == "__main__":
    sys.exit(main())
