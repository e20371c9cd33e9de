"""The perf history: one SQLite file that every perf run appends to and nothing rewrites.

A run is one report's deployment or OpenAI endpoint (`--triton-llm-report`'s document, or the session's own with
`--perf-history`): when it started, what served it (image, server version, backend, engine digest, hardware) and the
commit it was run at; its points are each load point's metrics (fixtures/perf_history.toml). A series is one
deployment's load point on one hardware, in the order the runs started: what change-point detection reads."""

from __future__ import annotations

import sqlite3
from contextlib import closing
from dataclasses import dataclass, field
from pathlib import Path

from ..metrics import metric_value, perf_load_points

SCHEMA = 1
ATTRIBUTES = ("image", "server_version", "backend", "engine_digest", "hardware", "commit")  # what may change between runs
_TABLES = """
CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS runs (
    id INTEGER PRIMARY KEY, started TEXT NOT NULL, deployment TEXT NOT NULL, image TEXT, server_version TEXT,
    backend TEXT, engine_digest TEXT, hardware TEXT, "commit" TEXT, UNIQUE (started, deployment));
CREATE TABLE IF NOT EXISTS points (
    run_id INTEGER NOT NULL REFERENCES runs (id), load_point TEXT NOT NULL, metric TEXT NOT NULL, value REAL NOT NULL,
    PRIMARY KEY (run_id, load_point, metric));
"""


class HistoryError(ValueError):
    """A history file this version cannot read: one line that says which and why."""


@dataclass
class Series:
    """One deployment's load point on one hardware: per metric, its values in run order, and each run's attributes."""

    deployment: str
    load_point: str
    hardware: str
    started: list[str] = field(default_factory=list)
    attributes: list[dict] = field(default_factory=list)
    values: dict[str, list[float | None]] = field(default_factory=dict)

    @property
    def name(self) -> str:
        return f"{self.deployment} {self.load_point} ({self.hardware})"


def _connect(path: Path) -> sqlite3.Connection:
    """The file's connection, its tables made where missing; HistoryError, the file untouched, for another schema."""
    connection = sqlite3.connect(path)
    try:
        has_meta = connection.execute("SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = 'meta'").fetchone()
    except sqlite3.DatabaseError as exc:  # not SQLite at all
        connection.close()
        raise HistoryError(f"{path}: not a perf history ({exc})") from None
    found = has_meta and connection.execute("SELECT value FROM meta WHERE key = 'schema'").fetchone()
    if found and int(found[0]) != SCHEMA:
        connection.close()
        raise HistoryError(f"{path}: perf history schema {found[0]}; this version reads schema {SCHEMA}")
    connection.executescript(_TABLES)
    connection.execute("INSERT OR IGNORE INTO meta VALUES ('schema', ?)", (str(SCHEMA),))
    connection.commit()
    return connection


def check(path: Path) -> None:
    """HistoryError now, not at the session's end, for a history this version cannot append to; nothing is created."""
    if path.exists():
        _connect(path).close()


def append(path: Path, document: dict, metrics: dict[str, int], commit: str | None = None) -> int:
    """Add the report `document`'s perf load points as runs; a run already in the file (same start, same deployment)
    is left as it is. Returns how many runs were added."""
    run, added = document.get("run", {}), 0
    path.parent.mkdir(parents=True, exist_ok=True)
    with closing(_connect(path)) as connection, connection:
        for deployment, info, points in perf_load_points(document):
            served = [info.get(k) for k in ("image", "server_version", "backend", "engine_digest")]
            row = (run["started"], deployment, *served, run.get("hardware"), commit)
            cursor = connection.execute("INSERT OR IGNORE INTO runs VALUES (NULL, ?, ?, ?, ?, ?, ?, ?, ?)", row)
            if cursor.rowcount == 0:
                continue
            added += 1
            values = [
                (cursor.lastrowid, load_point, metric, value)
                for load_point, entry in points.items()
                for metric in metrics
                if (value := metric_value(entry, metric)) is not None
            ]
            connection.executemany("INSERT INTO points VALUES (?, ?, ?, ?)", values)
    return added


def read(path: Path, metrics: dict[str, int]) -> list[Series]:
    """Every series of the file, its runs in the order they started."""
    if not path.is_file():
        raise HistoryError(f"{path}: no perf history here (pytest -m perf --perf-history {path} writes one)")
    with closing(_connect(path)) as connection:
        columns = ", ".join(f'"{a}"' for a in ATTRIBUTES)
        runs = connection.execute(f"SELECT id, started, deployment, {columns} FROM runs")
        by_id = {r[0]: r for r in runs.fetchall()}
        points = connection.execute("SELECT run_id, load_point, metric, value FROM points").fetchall()
    series: dict[tuple, Series] = {}
    for run_id, load_point, metric, value in sorted(points, key=lambda p: (by_id[p[0]][1], p[0])):
        _, started, deployment, *attributes = by_id[run_id]
        hardware = attributes[ATTRIBUTES.index("hardware")] or "unknown"
        one = series.setdefault((deployment, load_point, hardware), Series(deployment, load_point, hardware))
        if not one.started or one.started[-1] != started:
            one.started.append(started)
            one.attributes.append(dict(zip(ATTRIBUTES, attributes, strict=True)))
            for values in one.values.values():
                values.append(None)
        if metric in metrics:
            one.values.setdefault(metric, [None] * len(one.started))[-1] = value
    return list(series.values())
