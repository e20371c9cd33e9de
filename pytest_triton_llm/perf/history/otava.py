"""Change points of the history's series, found by Apache Otava (`otava analyze`), run from an environment of its own.

Otava 0.8.0 pins numpy 2.2, which the reference extra's numpy<2 (the python backend stub) cannot share, so it is not a
dependency: `python3 -m venv .venv-otava && .venv-otava/bin/pip install apache-otava==0.8.0`, then `--otava
.venv-otava/bin/otava` (or `otava` on PATH). Each series is written as a CSV file of Otava's CSV importer (a time
column, one column per metric, the runs' attributes), all of them named in one otava.yaml, and analyzed in one call
with JSON output. Otava keeps only rows of the last 365 days unless told: --since and --until span the whole series."""

from __future__ import annotations

import csv
import datetime as dt
import json
import os
import shutil
import subprocess
import tempfile
from dataclasses import dataclass
from pathlib import Path

from .store import ATTRIBUTES, Series

OTAVA_VERSION = "0.8.0"
MIN_RUNS = 3  # the fewest runs of a series Otava is asked about
TIMEOUT_S = 600  # thousands of series take seconds; a hang must not hold a nightly
INSTALL = f"python3 -m venv .venv-otava && .venv-otava/bin/pip install apache-otava=={OTAVA_VERSION}"


class OtavaError(RuntimeError):
    """Otava is missing or failed: one line that says what to do."""


@dataclass(frozen=True)
class ChangePoint:
    series: str
    metric: str
    index: int  # the first run after the change
    change_percent: float  # mean after over mean before, minus 1, in percent
    p_value: float
    mean_before: float
    mean_after: float


def find_otava(given: str | None) -> str:
    """--otava's path, else `otava` on PATH, else .venv-otava/bin/otava here; OtavaError with the install line."""
    for candidate in (given, shutil.which("otava"), ".venv-otava/bin/otava"):
        if candidate and Path(candidate).is_file() and os.access(candidate, os.X_OK):
            return str(Path(candidate).resolve())
    where = f"--otava {given} is not an executable" if given else "no otava on PATH or in .venv-otava"
    raise OtavaError(f"{where}: install Apache Otava in a venv of its own ({INSTALL}) and pass --otava .venv-otava/bin/otava")


def change_points(otava: str, series: list[Series], p_value: float, magnitude: float) -> list[ChangePoint]:
    """Every change point Otava finds in `series` (improvements too), each metric on its own."""
    analyzable = [s for s in series if len(s.started) >= MIN_RUNS]
    if not analyzable:
        return []
    with tempfile.TemporaryDirectory(prefix="perf-history-") as work:
        names = {f"s{i}": s for i, s in enumerate(analyzable)}
        tests = {name: _write_csv(Path(work) / f"{name}.csv", s) for name, s in names.items()}
        (Path(work) / "otava.yaml").write_text(json.dumps({"tests": tests}))  # YAML reads JSON
        times = [_time(t) for s in analyzable for t in s.started]
        argv = [otava, "analyze", *names, "--output", "json", "-P", str(p_value), "-M", str(magnitude)]
        argv += ["--since", _day(min(times), -1), "--until", _day(max(times), 1)]
        env = {**os.environ, "OTAVA_CONFIG": "otava.yaml"}
        try:
            done = subprocess.run(argv, cwd=work, capture_output=True, text=True, env=env, timeout=TIMEOUT_S)
        except subprocess.TimeoutExpired:
            raise OtavaError(f"{otava} analyze did not answer within {TIMEOUT_S} s") from None
    if done.returncode != 0:
        raise OtavaError(f"{otava} analyze exited {done.returncode}: {done.stderr.strip()[-500:]}")
    found = [json.loads(line) for line in done.stdout.splitlines() if line.startswith("{")]
    results = {name: groups for each in found for name, groups in each.items()}
    if set(results) != set(names):
        raise OtavaError(f"{otava} analyze answered for {sorted(results)}, not {sorted(names)}: {done.stderr.strip()[-500:]}")
    return [_change_point(names[name], c) for name, groups in results.items() for group in groups for c in group["changes"]]


def _change_point(series: Series, change: dict) -> ChangePoint:
    """Otava's rounded JSON: its percent is a whole number, so the change is computed from the two means."""
    before, after = float(change["mean_before"]), float(change["mean_after"])
    percent = 100.0 * (after / before - 1.0) if before else float(change["forward_change_percent"])
    return ChangePoint(series.name, change["metric"], int(change["index"]), percent, float(change["pvalue"]), before, after)


def _write_csv(path: Path, series: Series) -> dict:
    """The series as Otava's CSV importer reads it; returns its test's entry in otava.yaml."""
    metrics = sorted(m for m, values in series.values.items() if None not in values)  # Otava drops a test with a gap
    with path.open("w", newline="") as handle:
        writer = csv.writer(handle)
        writer.writerow(["time", *ATTRIBUTES, *metrics])
        for i, started in enumerate(series.started):
            attributes = [series.attributes[i].get(a) or "" for a in ATTRIBUTES]
            writer.writerow([started, *attributes, *(repr(series.values[m][i]) for m in metrics)])
    return {"type": "csv", "file": path.name, "time_column": "time", "attributes": list(ATTRIBUTES), "metrics": metrics}


def _time(started: str) -> dt.datetime:
    return dt.datetime.fromisoformat(started)


def _day(when: dt.datetime, days: int) -> str:
    return (when + dt.timedelta(days=days)).date().isoformat()
