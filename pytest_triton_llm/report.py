"""The run report (--triton-llm-report PATH): one JSON document per pytest session.

{
  "schema": 1,
  "run": {plugin, pytest, python, platform, hardware, started, duration_s, startup_s, options},
  "deployments": {"<engine>:<name>": {engine, backend, batching, engine_digest, server_version,
                                       server_ready_s, server_log, ..., "metrics": {...}}},
  "tests": [{nodeid, outcome, duration_s, deployment, markers, message}],
  "summary": {"passed": n, "failed": n, "skipped": n, "error": n}
}
Suites add their measurements with `record(deployment_id, key, value)` (under
"metrics") or `record_run(key, value)` (top level).
"""

from __future__ import annotations

import datetime as _dt
import json
import os
import platform
import tempfile
from collections import Counter
from importlib import metadata
from pathlib import Path

SCHEMA = 1


def _version(dist: str) -> str | None:
    try:
        return metadata.version(dist)
    except metadata.PackageNotFoundError:
        return None


class RunReport:
    def __init__(self, options: dict):
        self.started = _dt.datetime.now(_dt.timezone.utc)
        self.run = {
            "plugin": _version("pytest-triton-llm"),
            "pytest": _version("pytest"),
            "python": platform.python_version(),
            "platform": platform.platform(),
            "hardware": "cpu",  # GPU runtimes set the GPU name
            "started": self.started.isoformat(timespec="seconds"),
            "options": options,
        }
        self.deployments: dict[str, dict] = {}
        self.tests: list[dict] = []
        self.extra: dict = {}

    def record(self, deployment_id: str, key: str, value) -> None:
        self.deployments.setdefault(deployment_id, {}).setdefault("metrics", {})[key] = value

    def record_run(self, key: str, value) -> None:
        self.extra[key] = value

    def add_deployment(self, deployment_id: str, info: dict) -> None:
        self.deployments.setdefault(deployment_id, {}).update(info)

    def add_test(self, nodeid: str, outcome: str, duration_s: float, deployment: str | None,
                 markers: list[str], message: str | None) -> None:  # fmt: skip
        self.tests.append({
            "nodeid": nodeid, "outcome": outcome, "duration_s": round(duration_s, 3),
            "deployment": deployment, "markers": markers, "message": message,
        })  # fmt: skip

    def document(self, startup_s: float | None, first_test_s: float | None) -> dict:
        now = _dt.datetime.now(_dt.timezone.utc)
        duration = round((now - self.started).total_seconds(), 2)
        run = dict(self.run, duration_s=duration, startup_s=startup_s, first_test_s=first_test_s)
        return {
            "schema": SCHEMA,
            "run": run,
            "deployments": self.deployments,
            "tests": self.tests,
            "summary": dict(Counter(t["outcome"] for t in self.tests)),
            **self.extra,
        }

    def write(self, path: Path, startup_s: float | None, first_test_s: float | None) -> None:
        """Atomic: a reader never sees a half-written report, and a failed write keeps the old one."""
        path = Path(path)
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.")
        try:
            with os.fdopen(fd, "w") as fh:
                json.dump(self.document(startup_s, first_test_s), fh, indent=2, sort_keys=False, default=str)
                fh.write("\n")
            os.replace(tmp, path)
        except BaseException:
            Path(tmp).unlink(missing_ok=True)
            raise
