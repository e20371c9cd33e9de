"""The run report (--triton-llm-report PATH): one JSON document per pytest session.

{
  "schema": 1,
  "run": {plugin, pytest, python, platform, hardware, gpu, started, duration_s, startup_s, options},
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
import platform
from collections import Counter
from importlib import metadata

from ..host.hardware import gpu_details, hardware
from ..perf.metrics import V1_PERF

SCHEMA = 1


def _version(dist: str) -> str | None:
    try:
        return metadata.version(dist)
    except metadata.PackageNotFoundError:
        return None


class RunReport:
    def __init__(self, options: dict, gpu: str | None = None, computes_on: str | None = None):
        """`gpu`: the nvidia-smi index the servers compute on (None: the first; "none": no GPU of this host);
        `computes_on`: what they compute on as the runtime knows it (Runtime.hardware), by default `gpu`'s."""
        self.started = _dt.datetime.now(_dt.timezone.utc)
        self.run = {
            "plugin": _version("pytest-triton-llm"),
            "pytest": _version("pytest"),
            "python": platform.python_version(),
            "platform": platform.platform(),
            "hardware": computes_on if computes_on is not None else hardware(gpu),
            "gpu": gpu_details(gpu),  # index, name, memory_mib, compute_capability
            "started": self.started.isoformat(timespec="seconds"),
            "options": options,
        }
        self.deployments: dict[str, dict] = {}
        self.tests: list[dict] = []
        self.extra: dict = {}
        self.worker_times: dict[str, float] = {}  # startup_s / first_test_s merged from xdist workers

    def record(self, deployment_id: str, key: str, value) -> None:
        self.deployments.setdefault(deployment_id, {}).setdefault("metrics", {})[key] = value

    def record_run(self, key: str, value) -> None:
        self.extra[key] = value

    def record_run_entry(self, key: str, name: str, value) -> None:
        """One entry of a run-level table (the /v1 perf suite's load points): workers' tables are merged."""
        self.extra.setdefault(key, {})[name] = value

    def record_perf(self, deployment_id: str, load_point: str, entry: dict) -> None:
        metrics = self.deployments.setdefault(deployment_id, {}).setdefault("metrics", {})
        metrics.setdefault("perf", {})[load_point] = entry

    def merge(self, document: dict) -> None:
        """Fold in a worker's report (pytest-xdist): its deployments, tests and run-level results."""
        for deployment_id, info in document.get("deployments", {}).items():
            mine = self.deployments.setdefault(deployment_id, {})
            metrics = {**mine.get("metrics", {}), **info.get("metrics", {})}
            mine.update(info)
            if metrics:
                mine["metrics"] = metrics
        self.tests.extend(document.get("tests", []))
        skip = {"schema", "run", "deployments", "tests", "summary"}
        for key, value in document.items():
            if key in skip:
                continue
            table = self.extra.get(key)  # a table of entries (record_run_entry) gains the worker's; else replaced
            self.extra[key] = {**table, **value} if isinstance(table, dict) and isinstance(value, dict) else value
        run = document.get("run", {})
        for key in ("startup_s", "first_test_s"):  # the earliest worker's
            if run.get(key) is not None:
                self.worker_times[key] = min(self.worker_times.get(key, run[key]), run[key])

    def perf_results(self) -> dict:
        """{deployment: {load point: perf entry}} for every deployment the perf suite measured."""
        return {d: info["metrics"]["perf"] for d, info in self.deployments.items() if "perf" in info.get("metrics", {})}

    def v1_perf_results(self) -> dict:
        """{"openai URL": {load point: perf entry}} of the /v1 perf suite (a run-level table), shaped as perf_results."""
        points = self.extra.get(V1_PERF) or {}
        return {f"openai {next(iter(points.values()))['url']}": points} if points else {}

    def perf_sweeps(self) -> dict:
        """{deployment: its --perf-sweep result} for every deployment the perf suite swept."""
        return {
            d: info["metrics"]["perf_sweep"] for d, info in self.deployments.items() if "perf_sweep" in info.get("metrics", {})
        }

    def add_deployment(self, deployment_id: str, info: dict) -> None:
        self.deployments.setdefault(deployment_id, {}).update(info)

    def add_test(
        self, nodeid: str, outcome: str, duration_s: float, deployment: str | None, markers: list[str], message: str | None
    ) -> None:
        self.tests.append(
            {
                "nodeid": nodeid,
                "outcome": outcome,
                "duration_s": round(duration_s, 3),
                "deployment": deployment,
                "markers": markers,
                "message": message,
            }
        )

    def document(self, startup_s: float | None, first_test_s: float | None) -> dict:
        now = _dt.datetime.now(_dt.timezone.utc)
        duration = round((now - self.started).total_seconds(), 2)
        run = dict(self.run, duration_s=duration, startup_s=startup_s, first_test_s=first_test_s)
        run.update({k: v for k, v in self.worker_times.items() if run.get(k) is None})
        return {
            "schema": SCHEMA,
            "run": run,
            "deployments": self.deployments,
            "tests": self.tests,
            "summary": dict(Counter(t["outcome"] for t in self.tests)),
            **self.extra,
        }
