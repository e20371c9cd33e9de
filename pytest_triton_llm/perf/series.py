"""The load points' time series (server metrics, GPU telemetry): taken out of the perf entries into a side file."""

from __future__ import annotations

import json
import os
import tempfile
from pathlib import Path

SCHEMA = 1
KEY = "series"  # a perf entry's time series, one per run, until the run ends: then the side file holds them
FILE_KEY = "series_file"  # what the entry says instead: the side file's path


def take_series(results: dict) -> dict:
    """{deployment: {load point: [one series per run]}}, removed from `results` ({deployment: {load point: perf
    entry}}): neither the report nor a --perf-save baseline carries them."""
    taken: dict = {}
    for deployment, points in results.items():
        for point, entry in points.items():
            if entry.get(KEY):
                taken.setdefault(deployment, {})[point] = entry.pop(KEY)
            else:
                entry.pop(KEY, None)
    return taken


def _write_compact(path: Path, document: dict) -> None:
    """Atomically, as files.write_json, but without indentation: a series of 4 samples a second over minutes of
    load points is three times the size indented (one number a line)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.")
    try:
        with os.fdopen(fd, "w") as fh:
            json.dump(document, fh, separators=(",", ":"))
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def series_path(report: str | Path) -> Path:
    return Path(report).with_suffix(".series.json")


def write_series(series: dict, results: dict, report: str | Path) -> Path:
    """Write `series` next to the report (`<report>.series.json`); each entry it holds names the file."""
    path = series_path(report)
    document = {
        "schema": SCHEMA,
        "report": str(report),
        "times": "seconds from the run's first request (warm-up before 0); window_s is the measured span",
        "deployments": series,
    }
    _write_compact(path, document)
    for deployment, points in series.items():
        for point in points:
            results[deployment][point][FILE_KEY] = str(path)
    return path
