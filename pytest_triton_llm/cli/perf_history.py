"""`pytest-triton-llm perf-history FILE`: add reports to a perf history, find its change points, fail on a new
regression."""

from __future__ import annotations

import argparse
import dataclasses
import json
import sys
from pathlib import Path

from ..common.tables import table
from ..perf.history.judge import failing, load_settings, regressions
from ..perf.history.otava import MIN_RUNS, OtavaError, change_points, find_otava
from ..perf.history.plot import plot_history
from ..perf.history.store import HistoryError, append, read
from ..perf.history.commit import current_commit


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("history", type=Path, metavar="FILE", help="the perf history (SQLite), as --perf-history writes it")
    parser.add_argument(
        "--add",
        type=Path,
        action="append",
        default=[],
        metavar="REPORT.json",
        help="append this --triton-llm-report's perf load points first (repeatable; a run already there is skipped)",
    )
    parser.add_argument("--commit", help="the commit --add's runs were made at (default: $GITHUB_SHA, else git here)")
    parser.add_argument("--otava", help="Apache Otava's executable (default: otava on PATH, else .venv-otava/bin/otava)")
    parser.add_argument("--plots", type=Path, metavar="DIR", help="write one PNG per series, change points marked")
    parser.add_argument("--newest", type=int, help="fail on a regression among this many newest runs (default: the file's)")
    parser.add_argument("--settings", type=Path, help="metrics and detection settings (default: fixtures/perf_history.toml)")


def perf_history(args: argparse.Namespace) -> int:
    try:
        settings = load_settings(args.settings)
        if args.newest is not None:
            settings = dataclasses.replace(settings, newest=args.newest)
        for report in args.add:
            added = append(args.history, _report(report), settings.metrics, args.commit or current_commit())
            print(f"{report}: {added} run(s) added to {args.history}")
        series = read(args.history, settings.metrics)
        points = change_points(find_otava(args.otava), series, settings.p_value, settings.magnitude)
    except (HistoryError, OtavaError, OSError, ValueError) as exc:
        print(f"pytest-triton-llm perf-history: error: {exc}", file=sys.stderr)
        return 2
    found = regressions(series, points, settings)
    print("\n".join(_summary(series, points, found)))
    if args.plots:
        print(f"plots: {', '.join(str(p) for p in plot_history(series, points, settings.metrics, args.plots))}")
    new = failing(found, settings)
    for regression in found:
        print(("REGRESSION " if regression in new else "older regression ") + regression.line())
    if short := [one.name for one in series if len(one.started) < MIN_RUNS]:  # said, so that no one reads them as judged
        print(f"not analyzed yet, fewer than {MIN_RUNS} runs: {', '.join(short)}")
    print(f"{len(new)} new regression(s) among the newest {settings.newest} runs of {len(series)} series")
    return 1 if new else 0


def _report(path: Path) -> dict:
    try:
        return json.loads(path.read_text())
    except (OSError, json.JSONDecodeError) as exc:
        raise ValueError(f"{path}: not a --triton-llm-report file ({exc})") from None


def _summary(series, points, found) -> list[str]:
    rows = []
    for one in series:
        mine = [p for p in points if p.series == one.name]
        worse = sum(r.series == one.name for r in found)
        rows.append([one.name, len(one.started), one.started[0][:10], one.started[-1][:10], len(mine), worse])
    return table(["series", "runs", "first", "last", "change points", "regressions"], rows)
