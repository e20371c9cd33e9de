"""Running the plan: up to --jobs pytest processes at once (a timed run alone), each in its own process group with its
output in a log; a run that reads a baseline waits for the clean run that saves it."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

from ...host.hardware import cores_shared_by
from .plan import CampaignError, Run, log_path, report_path

STOP_GRACE_S = 60  # a stopped pytest gets this long to stop its servers before its group is killed
POLL_S = 0.2
FAILED = ("failed", "error")
PYTEST_EXITS = {2: "interrupted, or a collection error", 3: "pytest's internal error", 4: "a usage error", 5: "no test selected"}


def exit_words(code: int | None) -> str:
    if code is None:
        return "pytest did not run"
    return f"pytest exited {code} ({PYTEST_EXITS.get(code, 'killed' if code < 0 else 'unexpected')})"


class Child(Protocol):
    def poll(self) -> int | None: ...

    def stop(self) -> None: ...


WARM_BETWEEN_RUNS_S = 120  # a server no run took for this long is stopped by its keeper
Start = Callable[[list[str], Path, Path, dict[str, str]], Child]  # (argv, cwd, log, env additions) -> a started child


def run_env(alone: bool, jobs: int) -> dict[str, str]:
    """What a run's environment adds: its servers' OpenMP threads, the cores shared by the runs at once (all of them
    for a run that goes alone), unless the user set OMP_NUM_THREADS. Two runs of 2 threads each on 2 cores spin
    against each other (stack/runtimes/server.py cpu_share: -n 2 ran 2.6x slower before it gave each worker its share).
    And warm servers (stack/runtimes/warm.py), unless the user chose: a run's clean servers (its clean run's deployments, a
    perf fault's clean twin) stay up for the next run that serves the same; faulted servers are never kept."""
    added = {} if "TRITON_LLM_KEEP_WARM" in os.environ else {"TRITON_LLM_KEEP_WARM": str(WARM_BETWEEN_RUNS_S)}
    if "OMP_NUM_THREADS" in os.environ:
        return added
    return {"OMP_NUM_THREADS": str(cores_shared_by(1 if alone else jobs)), **added}


class PytestProcess:
    """A pytest in its own process group, its output in a log. stop() sends SIGTERM, which the plugin takes as Ctrl-C
    (its teardown stops the servers); SIGINT could be ignored, as it is in a shell's background jobs."""

    def __init__(self, argv: list[str], cwd: Path, log: Path, env: dict[str, str]):
        log.parent.mkdir(parents=True, exist_ok=True)
        with open(log, "wb") as fh:
            self.popen = subprocess.Popen(
                argv,
                cwd=cwd,
                stdin=subprocess.DEVNULL,
                stdout=fh,
                stderr=subprocess.STDOUT,
                start_new_session=True,
                env={**os.environ, **env},
            )

    def poll(self) -> int | None:
        return self.popen.poll()

    def stop(self) -> None:
        if self.popen.poll() is not None:
            return
        os.killpg(self.popen.pid, signal.SIGTERM)
        try:
            self.popen.wait(timeout=STOP_GRACE_S)
        except subprocess.TimeoutExpired:
            os.killpg(self.popen.pid, signal.SIGKILL)
            self.popen.wait()


@dataclass
class Result:
    run: Run
    returncode: int | None  # None: not run (its baseline's clean run failed)
    seconds: float
    report: dict | None

    @property
    def tests(self) -> list[dict]:
        return (self.report or {}).get("tests", [])

    def failed(self) -> list[str]:
        return [t["nodeid"] for t in self.tests if t["outcome"] in FAILED]

    def counts(self) -> dict[str, int]:
        counts: dict[str, int] = {}
        for test in self.tests:
            counts[test["outcome"]] = counts.get(test["outcome"], 0) + 1
        return counts

    def timing(self) -> dict:
        """Where the run's seconds went: the tests, and the rest (interpreter, collection, server start and stop)."""
        tests_s = round(sum(t.get("duration_s", 0.0) for t in self.tests), 2)
        run = (self.report or {}).get("run", {})
        return {
            "wall_s": round(self.seconds, 2),
            "tests_s": tests_s,
            "overhead_s": round(self.seconds - tests_s, 2),
            "server_ready_s": run.get("startup_s"),
        }


def _read_report(path: Path) -> dict | None:
    try:
        return json.loads(path.read_text())
    except (OSError, json.JSONDecodeError):
        return None


def execute(
    runs: list[Run],
    jobs: int,
    start: Start,
    base: list[str],
    cwd: Path,
    out: Path,
    done: Callable[[Result], None],
    passed: Callable[[Result], bool],
    retry: Callable[[Result], bool] = lambda result: False,
) -> list[Result]:
    """Runs up to `jobs` at once (a run marked alone by itself); `done` hears of each as it ends. A run that reads a
    baseline starts once the clean run that saves it has ended, and not at all if that one did not pass (`passed`). A
    run that must go alone waits for every slot to be free while the runs behind it fill them (no slot idles behind
    it). A run that `retry` says the host broke runs once more, first in line, its first log kept beside the new one.
    Ctrl-C stops the running children."""
    retried: set[str] = set()
    pending = list(runs)
    running: dict[str, tuple[Run, float, Child]] = {}
    results: dict[str, Result] = {}
    try:
        while pending or running:
            for run in list(pending):
                saver = results.get(run.baseline or "")
                if run.baseline and saver is None:
                    continue
                if saver is not None and not passed(saver):
                    pending.remove(run)
                    results[run.label] = Result(run, None, 0.0, None)
                    done(results[run.label])
                    continue
                if len(running) >= jobs or any(r.alone for r, _, _ in running.values()):
                    break
                if run.alone and running:
                    continue
                pending.remove(run)
                report_path(out, run.label).unlink(missing_ok=True)
                child = start(run.argv(base, out), cwd, log_path(out, run.label), run_env(run.alone, jobs))
                running[run.label] = run, time.monotonic(), child
            finished = [label for label, (_, _, child) in running.items() if child.poll() is not None]
            for label in finished:
                run, began, child = running.pop(label)
                result = Result(run, child.poll(), time.monotonic() - began, _read_report(report_path(out, label)))
                if label not in retried and retry(result):
                    retried.add(label)
                    _keep_first_log(result, out)
                    pending.insert(0, run)
                    continue
                results[label] = result
                done(result)
            if not finished and running:
                time.sleep(POLL_S)
    except KeyboardInterrupt:
        for _, _, child in running.values():
            child.stop()
        raise
    return [results[run.label] for run in runs if run.label in results]


def _keep_first_log(result: Result, out: Path) -> None:
    """A run the host broke runs once more: its first log is kept beside the new one."""
    log = log_path(out, result.run.label)
    log.replace(log.with_suffix(".first.log"))
    print(
        f"retrying {result.run.label} once: {exit_words(result.returncode)}, its server never ready (log: "
        f"{log.with_suffix('.first.log')})",
        flush=True,
    )


def _wait(child: Child) -> int:
    try:
        while (code := child.poll()) is None:
            time.sleep(POLL_S)
    except KeyboardInterrupt:
        child.stop()
        raise
    return code


def collect(start: Start, base: list[str], cwd: Path, out: Path) -> list[str]:
    """Every test of the suites, once (`--collect-only -q`): its node ids."""
    log = log_path(out, "collect")
    argv = [
        sys.executable,
        "-m",
        "pytest",
        *base,
        "--collect-only",
        "-q",
        "-p",
        "no:cacheprovider",
        "--basetemp",
        str(out / "basetemp" / "collect"),
    ]
    code = _wait(start(argv, cwd, log, {}))
    if code != 0:
        raise CampaignError(f"collecting the suites failed (pytest exited {code}): {log}")
    return [line for line in log.read_text().splitlines() if re.match(r"\S+\.py::\S", line)]
