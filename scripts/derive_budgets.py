"""Perf budgets from a measured run: [[budget]] entries for fixtures/perf_budgets.toml, `slack` away from each load
point's measured mean (of its --perf-repeats runs), with the figures and the date in a comment beside each.

    python scripts/derive_budgets.py report.json [--slack 1.5] >> fixtures/perf_budgets.toml

The hardware key is the report's hardware class (h200, a100, cpu-2 ...), so the entries judge that class only.
Measure on a quiet machine with --perf-repeats 3 or more; read the entries before keeping them.
"""

from __future__ import annotations

import argparse
import datetime
import json
import sys
from pathlib import Path

from pytest_triton_llm.perf.budgets import LIMITS
from pytest_triton_llm.perf.metrics import metric_value

DERIVED = ("min_output_tokens_per_s", "max_latency_p99_ms", "max_ttft_p99_ms")  # of budgets.LIMITS


def measured_mean(point: dict, metric: str) -> float | None:
    """The mean of the repeated runs, else the one run's figure; None where not measured (TTFT of V1)."""
    if metric in point.get("repeats", {}):
        return point["repeats"][metric]["mean"]
    return metric_value(point, metric)


def budget_entries(report: dict, slack: float, today: str) -> list[str]:
    entries = []
    for deployment_id, deployment in sorted(report["deployments"].items()):
        engine, deployment_name = deployment_id.split(":", 1)
        for load_point, point in sorted(deployment.get("metrics", {}).get("perf", {}).items()):
            runs = point.get("repeats", {}).get("output_tokens_per_s", {}).get("n", 1)
            limits, figures = [], []
            for limit in DERIVED:
                metric, floor = LIMITS[limit], limit.startswith("min_")
                mean = measured_mean(point, metric)
                if mean is None:
                    continue
                limits.append(f"{limit} = {round(mean / slack, 1) if floor else round(mean * slack):g}")
                figures.append(f"{metric} {mean:.4g}")
            if not limits:
                continue
            weights = " (dummy weights)" if deployment.get("weights") == "dummy" else ""
            entries.append(
                "\n".join(
                    [
                        f"[[budget]]  # measured {today}, {runs} run(s){weights}: {', '.join(figures)}; slack {slack:g}x",
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
    parser.add_argument("report", type=Path, help="a --triton-llm-report JSON of a perf run")
    parser.add_argument("--slack", type=float, default=1.5, help="how far from the measured mean (default 1.5x)")
    args = parser.parse_args(argv)
    if args.slack < 1:
        parser.error("--slack must be >= 1: a budget tighter than the measurement fails on it")
    entries = budget_entries(json.loads(args.report.read_text()), args.slack, datetime.date.today().isoformat())
    if not entries:
        print(f"{args.report}: no perf load points (run pytest -m perf with --triton-llm-report)", file=sys.stderr)
        return 1
    print("\n" + "\n\n".join(entries))
    return 0


if __name__ == "__main__":
    sys.exit(main())
