"""`pytest-triton-llm faults`: run each fault of the catalog on its deployment beside clean runs, and say what caught it.

Each run is its own `python -m pytest` of the suites (own basetemp, own --triton-llm-report). The clean runs of a
deployment start first: together they select everything its faults' runs select, without a fault, and must pass; the
tests that time nothing run beside other runs, those that do (perf, batching) alone. A fault run selects its row's
markers (`-m`), `keyword` (`-k`) and `pytest_args` on its row's deployment with `--stand-in-fault NAME`, and is judged
once its clean runs have ended: the fault is caught when a test failed or errored that a clean run ran without a
failure (so that what the harness or the host broke in both runs never passes for a catch). The runs share warm
servers (runtimes/warm.py): a fault run switches its fault on in a clean one while it holds it, unless its row gives it
a server of its own (own_server).

Baselines: a row whose pytest_args hold `{accuracy_baseline}` compares with a baseline that the clean run of its
deployment saves (--accuracy-save into OUT/baselines/). A clean run passes its rows' arguments (a workload, a dataset)
so that both runs measure the same thing, leaving out the options that read a baseline; two rows of one deployment that
give an option different values are refused, except a repeatable one (--perf-compare-fail), whose values add up. The
perf rows judge against a clean reference measured in the same rounds (--perf-against), not a saved baseline: on a
shared machine a clean rerun measured 23.7% below a baseline saved minutes before (2026-11-26); their clean run is
the A/A check, the deployment against its own clean twin, which must pass every rule of its rows.
"""

from __future__ import annotations

import argparse
import datetime as _dt
import json
import os
import re
import shutil
import signal
import statistics
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Protocol

from .faults import CATALOG, Fault, load_catalog
from .files import write_json
from .runtimes.server import cores_shared_by
from .schema import SchemaError, load_toml

REASONS = CATALOG.parent / "fault_reasons.toml"
DEFAULT_OUT = Path("out") / "faults"
FAILED = ("failed", "error")
# their tests measure speed: nothing else of the campaign runs beside such a run
TIMED_MARKERS = ("perf", "batching")
STOP_GRACE_S = 60  # a stopped pytest gets this long to stop its servers before its group is killed
POLL_S = 0.2
NO_KILL = "kills no fault yet"


@dataclass(frozen=True)
class Baseline:
    """A placeholder of a row's pytest_args: the option that saves the file in the clean run, those that read it."""

    name: str
    save: str
    reads: tuple[str, ...]  # each takes one value (--opt VALUE or --opt=VALUE); left out of the clean run


BASELINES = (
    Baseline(
        "accuracy_baseline",
        "--accuracy-save",
        ("--accuracy-baseline", "--accuracy-max-drop", "--accuracy-min-exact-match", "--accuracy-min-rouge-l"),
    ),
)
REPEATABLE = ("--perf-compare-fail",)  # a clean run takes every value its rows give


class CampaignError(Exception):
    """The catalog or the options cannot make a campaign; one line."""


def slug(text: str) -> str:
    return re.sub(r"[^A-Za-z0-9_.-]+", "_", text)


# -- the plan ---------------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Run:
    """One pytest subprocess: a fault's run, or a deployment's clean run."""

    label: str  # the fault's name, or "clean <deployment>"
    deployment: str
    markers: tuple[str, ...]
    keyword: str  # pytest's -k expression ("" selects by markers only)
    args: tuple[str, ...]  # the rest of pytest's arguments, placeholders filled
    fault: Fault | None = None
    cleans: tuple[str, ...] = ()  # a fault's: the labels of its deployment's clean runs, which judge it
    baseline: str | None = None  # a fault's: the clean run that saves the baseline it reads (starts after it; not if it failed)
    alone: bool = False  # nothing runs beside it: its tests measure speed

    def argv(self, base: list[str], out: Path) -> list[str]:
        selection = ["-m", " or ".join(self.markers), "--deployment", self.deployment]
        selection += ["-k", self.keyword] if self.keyword else []
        selection += ["--stand-in-fault", self.fault.name] if self.fault else []
        return [
            sys.executable,
            "-m",
            "pytest",
            *base,
            *selection,
            "-p",
            "no:cacheprovider",
            "-q",
            "--basetemp",
            str(out / "basetemp" / slug(self.label)),
            "--triton-llm-report",
            str(report_path(out, self.label)),
            *self.args,
        ]


def report_path(out: Path, label: str) -> Path:
    return out / "runs" / f"{slug(label)}.json"


def log_path(out: Path, label: str) -> Path:
    return out / "runs" / f"{slug(label)}.log"


def baseline_path(out: Path, baseline: Baseline, deployment: str) -> Path:
    return out / "baselines" / f"{baseline.name.replace('_', '-')}-{slug(deployment)}.json"


def _uses(fault: Fault, baseline: Baseline) -> bool:
    return any(f"{{{baseline.name}}}" in arg for arg in fault.pytest_args)


def _fill(args: tuple[str, ...], out: Path, deployment: str) -> tuple[str, ...]:
    for baseline in BASELINES:
        path = str(baseline_path(out, baseline, deployment))
        args = tuple(arg.replace(f"{{{baseline.name}}}", path) for arg in args)
    return args


def _options(args: tuple[str, ...]) -> list[tuple[str, str | None, tuple[str, ...]]]:
    """A row's arguments as (option, value, its words): --opt=VALUE, --opt VALUE, or a --flag alone (value None)."""
    options: list[tuple[str, str | None, tuple[str, ...]]] = []
    for arg in args:
        if options and options[-1][1] is None and not arg.startswith("-"):
            option, _, words = options[-1]
            options[-1] = (option, arg, (*words, arg))
        else:
            option, equals, value = arg.partition("=")
            options.append((option, value if equals else None, (arg,)))
    return options


def _clean_args(deployment: str, faults: list[Fault]) -> tuple[str, ...]:
    """The clean run's share of its rows' arguments: all but the options that read a baseline; an option that two
    rows give different values cannot be both, unless it is repeatable."""
    reads = {option for baseline in BASELINES for option in baseline.reads}
    chosen: dict[str, tuple[str | None, str, tuple[str, ...]]] = {}  # option -> (value, the row that gave it, words)
    for fault in faults:
        for option, value, words in _options(fault.pytest_args):
            if option in reads:
                continue
            if option in REPEATABLE:
                option = f"{option}={value}"
            if option in chosen and chosen[option][0] != value:
                raise CampaignError(
                    f"faults {chosen[option][1]} and {fault.name} of {deployment} give {option} different "
                    f"values ({chosen[option][0]} / {value}): its clean run can run only one"
                )
            chosen.setdefault(option, (value, fault.name, words))
    return tuple(word for _, _, words in chosen.values() for word in words)


def _timed(markers) -> bool:
    return any(m in TIMED_MARKERS for m in markers)


def _clean_run(label: str, deployment: str, rows: list[Fault], markers: tuple[str, ...], out: Path, alone: bool) -> Run:
    keyword = ""
    if any(f.keyword for f in rows):  # a marker name in -k matches the tests that carry it
        keyword = " or ".join(dict.fromkeys(f"({f.keyword or ' or '.join(f.markers)})" for f in rows))
    saves = tuple(
        a for b in BASELINES if any(_uses(f, b) for f in rows) for a in (b.save, str(baseline_path(out, b, deployment)))
    )
    return Run(label, deployment, markers, keyword, (*_clean_args(deployment, rows), *saves), alone=alone)


def _reads_a_baseline(fault: Fault) -> bool:
    return any(_uses(fault, b) for b in BASELINES)


def _clean_runs(deployment: str, faults: list[Fault], out: Path) -> list[Run]:
    """The deployment's clean runs: the tests that time nothing, beside other runs, those that save a baseline apart
    (the faults that read it start as soon as it is saved), and those that time something (perf, batching), alone.
    Each fault is judged against them all."""
    untimed = [f for f in faults if any(not _timed((m,)) for m in f.markers)]
    groups = (
        ("", [f for f in untimed if not _reads_a_baseline(f)], False),
        (" (baselines)", [f for f in untimed if _reads_a_baseline(f)], False),
        (" (timed)", [f for f in faults if _timed(f.markers)], True),
    )
    return [
        _clean_run(
            f"clean {deployment}{suffix}",
            deployment,
            rows,
            tuple(dict.fromkeys(m for f in rows for m in f.markers if _timed((m,)) == timed)),
            out,
            alone=timed,
        )
        for suffix, rows, timed in groups
        if rows
    ]


def plan(faults: list[Fault], out: Path) -> list[Run]:
    """The runs in the order they are offered a slot: the clean runs, then the faults."""
    for fault in faults:
        if not fault.markers:
            raise CampaignError(f"fault {fault.name} names no markers: its run would be the whole suite")
    deployments = {f.deployment: [g for g in faults if g.deployment == f.deployment] for f in faults}
    cleans = {d: _clean_runs(d, rows, out) for d, rows in deployments.items()}
    saver = {d: next((c.label for c in runs if c.label.endswith(" (baselines)")), None) for d, runs in cleans.items()}
    runs = [
        Run(
            f.name,
            f.deployment,
            f.markers,
            f.keyword,
            _fill(f.pytest_args, out, f.deployment),
            f,
            cleans=tuple(c.label for c in cleans[f.deployment]),
            baseline=saver[f.deployment] if _reads_a_baseline(f) else None,
            alone=_timed(f.markers),
        )
        for f in faults
    ]
    return [*(c for runs in cleans.values() for c in runs), *runs]


def select(catalog: dict[str, Fault], only: list[str], smoke: bool) -> list[Fault]:
    unknown = [name for name in only if name not in catalog]
    if unknown:
        raise CampaignError(f"--only {', '.join(unknown)}: no such fault (--list names them)")
    if only:
        return [catalog[name] for name in dict.fromkeys(only)]
    return [f for f in catalog.values() if f.smoke or not smoke]


# -- running ----------------------------------------------------------------------------------------------------------


class Child(Protocol):
    def poll(self) -> int | None: ...

    def stop(self) -> None: ...


WARM_BETWEEN_RUNS_S = 120  # a server no run took for this long is stopped by its keeper
Start = Callable[[list[str], Path, Path, dict[str, str]], Child]  # (argv, cwd, log, env additions) -> a started child


def run_env(alone: bool, jobs: int) -> dict[str, str]:
    """What a run's environment adds: its servers' OpenMP threads, the cores shared by the runs at once (all of them
    for a run that goes alone), unless the user set OMP_NUM_THREADS. Two runs of 2 threads each on 2 cores spin
    against each other (runtimes/server.py cpu_share: -n 2 ran 2.6x slower before it gave each worker its share).
    And warm servers (runtimes/warm.py), unless the user chose: a run's clean servers (its clean run's deployments, a
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
    baseline starts once its clean run has ended, and not at all if that one did not pass (`passed`). A run that must
    go alone waits for every slot to be free while the runs behind it fill them (no slot idles behind it). A run that
    `retry` says the host broke runs once more, first in line, its first log kept beside the new one. Ctrl-C stops the
    running children."""
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
                    log = log_path(out, label)
                    log.replace(log.with_suffix(".first.log"))
                    print(
                        f"retrying {label} once: {_exit(result.returncode)}, its server never ready (log: "
                        f"{log.with_suffix('.first.log')})",
                        flush=True,
                    )
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


# -- verdicts ---------------------------------------------------------------------------------------------------------

CAUGHT, MISSED, HARNESS = "caught", "missed", "harness error"
PYTEST_EXITS = {2: "interrupted, or a collection error", 3: "pytest's internal error", 4: "a usage error", 5: "no test selected"}


def _exit(code: int | None) -> str:
    if code is None:
        return "pytest did not run"
    return f"pytest exited {code} ({PYTEST_EXITS.get(code, 'killed' if code < 0 else 'unexpected')})"


@dataclass
class FaultOutcome:
    result: Result
    verdict: str  # caught, missed or harness error
    why: str  # what was seen: the first test that caught it, or why the run says nothing
    caught_by: list[str] = field(default_factory=list)  # node ids that failed or errored here, not on the clean run

    @property
    def fault(self) -> Fault:
        fault = self.result.run.fault
        assert fault is not None, "an outcome is a fault run's"
        return fault


NEVER_READY = "the session's server start"  # what caught a fault that keeps the deployment from loading


def _never_ready(run: Run, out: Path) -> bool:
    """The run's session stopped because its deployment's server died or hung before it was ready (runtimes/server.py)."""
    try:
        log = log_path(out, run.label).read_text(errors="replace")
    except OSError:
        return False
    name = f"tritonserver for {run.deployment} "
    return f"{name}stopped before it was ready" in log or f"{name}not ready after" in log


def host_broke_the_start(result: Result, out: Path) -> bool:
    """The run's server stopped before it was ready although its fault does not keep models from loading: the host's
    doing (tritonserver aborted at start with boost::interprocess::lock_exception in a campaign of 2026-11-26)."""
    fault = result.run.fault
    return result.returncode == 4 and not (fault and fault.stops_loading) and _never_ready(result.run, out)


def judge_fault(result: Result, cleans: list[Result], out: Path) -> FaultOutcome:
    """Caught: a test that the clean run ran without a failure (passed; or skipped, as the drift test is without a
    baseline) failed or errored with the fault in. A run that cannot tell (no report, not injected, no test, pytest's
    own error, failures the clean run had too or did not run) is a harness error, never a miss."""
    run, code = result.run, result.returncode
    if code is None:
        return FaultOutcome(result, HARNESS, f"not run: {run.baseline} did not pass, so its baseline is not a clean one")
    if (
        code == 4
        and run.fault is not None
        and run.fault.stops_loading
        and cleans
        and all(clean.returncode == 0 for clean in cleans)
        and _never_ready(run, out)
    ):
        # the session stops at once (one line, usage-error exit) when a deployment's models fail to load: the server
        # the clean run served did not come up with the fault in
        return FaultOutcome(result, CAUGHT, f"the session: {run.deployment} never became ready", [NEVER_READY])
    if result.report is None:
        return FaultOutcome(result, HARNESS, f"{_exit(code)} without a report: {log_path(out, run.label)}")
    if code not in (0, 1):
        return FaultOutcome(result, HARNESS, f"{_exit(code)}: {log_path(out, run.label)}")
    record = result.report.get("deployments", {}).get(run.deployment, {}).get("stand_in_fault")
    if record is not None and not record.get("injected"):
        return FaultOutcome(result, HARNESS, f"not injected into {run.deployment}: {record.get('why')}")
    clean_ok = {t["nodeid"] for clean in cleans for t in clean.tests if t["outcome"] not in FAILED}
    failed = result.failed()
    caught_by = [nodeid for nodeid in failed if nodeid in clean_ok]
    if caught_by:
        return FaultOutcome(result, CAUGHT, caught_by[0], caught_by)
    if failed:
        return FaultOutcome(
            result, HARNESS, f"{len(failed)} tests failed, none of which the clean run ran without a failure (first: {failed[0]})"
        )
    if code == 1:
        return FaultOutcome(result, HARNESS, f"pytest exited 1, yet its report names no failed test: {log_path(out, run.label)}")
    if record is None:
        return FaultOutcome(result, HARNESS, f"{run.deployment} was never served: every selected test was skipped")
    counts = result.counts()
    return FaultOutcome(result, MISSED, f"{counts.get('passed', 0)} passed, {counts.get('skipped', 0)} skipped")


def judge_clean(result: Result, out: Path) -> tuple[bool, str]:
    """A clean run passes: pytest exited 0 (tests ran, none failed, nothing failed to collect) with its report."""
    code = result.returncode
    if result.report is None:
        return False, f"{_exit(code)} without a report: {log_path(out, result.run.label)}"
    counts = ", ".join(f"{n} {outcome}" for outcome, n in sorted(result.counts().items()))
    failed = result.failed()
    if failed:
        return False, f"{counts}; first: {failed[0]}"
    if code != 0:
        return False, f"{_exit(code)}: {log_path(out, result.run.label)}"
    return True, counts


# -- tables -----------------------------------------------------------------------------------------------------------


def _cell(text) -> str:
    return str(text).replace("|", "\\|").replace("\n", " ")


def _table(headers: list[str], rows: list[list]) -> list[str]:
    lines = ["| " + " | ".join(headers) + " |", "|" + " --- |" * len(headers)]
    return lines + ["| " + " | ".join(_cell(c) for c in row) + " |" for row in rows]


def function_of(nodeid: str) -> str:
    """A node id's test function: <module file>::<function>, parameters dropped."""
    path, _, rest = nodeid.partition("::")
    return f"{Path(path).name}::{rest.split('[', 1)[0].split('::')[-1]}"


def fault_table(outcomes: list[FaultOutcome], cleans: list[tuple[Result, bool, str]], header: str) -> str:
    rows = []
    for o in outcomes:
        caught = {CAUGHT: "yes", MISSED: "no"}.get(o.verdict, f"{HARNESS}: {o.why}")
        first = f"`{o.caught_by[0]}`" if o.caught_by else "-"
        rows.append([o.fault.name, o.fault.kind, f"[{o.fault.issue}]({o.fault.url})", caught, first, f"{o.result.seconds:.1f}"])
    clean_rows = [
        [r.run.deployment, " or ".join(r.run.markers), r.run.keyword or "-", "yes" if ok else "NO", what, f"{r.seconds:.1f}"]
        for r, ok, what in cleans
    ]
    lines = [
        "# Fault campaign",
        "",
        header,
        "",
        *_table(["fault", "class", "upstream issue", "caught", "first test that failed", "s"], rows),
        "",
        "## Clean runs",
        "",
        *_table(["deployment", "markers", "-k", "passed", "tests", "s"], clean_rows),
    ]
    return "\n".join(lines) + "\n"


def ran_in(outcomes: list[FaultOutcome]) -> dict[str, int]:
    """Test function -> how many fault runs that tell (caught or missed) ran it (skipped or not selected: not run)."""
    runs: dict[str, int] = {}
    for o in (o for o in outcomes if o.verdict in (CAUGHT, MISSED)):
        for key in {function_of(t["nodeid"]) for t in o.result.tests if t["outcome"] != "skipped"}:
            runs[key] = runs.get(key, 0) + 1
    return runs


def kills(outcomes: list[FaultOutcome]) -> dict[str, list[str]]:
    """Test function -> the faults it caught (it failed with the fault in, not on the clean run)."""
    killed: dict[str, list[str]] = {}
    for o in outcomes:
        for key in dict.fromkeys(function_of(n) for n in o.caught_by):
            killed.setdefault(key, []).append(o.fault.name)
    return killed


def load_reasons(path: Path = REASONS) -> dict[str, str]:
    """fixtures/fault_reasons.toml: test function -> why no stand-in fault can fail it."""
    data = load_toml(path)
    wrong = [k for k, v in data.items() if not isinstance(v, str)]
    if wrong:
        raise SchemaError(f"{path}: {wrong[0]!r}: expected a string (why no stand-in fault can fail the test)")
    return data


def reverse_rows(functions: list[str], outcomes: list[FaultOutcome], reasons: dict[str, str]) -> list[dict]:
    """One row per test function: the faults it kills, or why it kills none (its module::name's reason, its name's),
    and how many fault runs ran it."""
    killed, ran = kills(outcomes), ran_in(outcomes)
    rows = []
    for key in functions:
        names = killed.get(key, [])
        why = "" if names else reasons.get(key, reasons.get(key.split("::")[-1], NO_KILL))
        rows.append({"test": key, "kills": names, "why": why, "fault_runs": ran.get(key, 0)})
    return rows


def stale_reasons(rows: list[dict], reasons: dict[str, str]) -> list[str]:
    """Reasons that name no collected test, or a test that killed a fault after all."""
    names = {row["test"] for row in rows} | {row["test"].split("::")[-1] for row in rows}
    killers = {row["test"] for row in rows if row["kills"]} | {row["test"].split("::")[-1] for row in rows if row["kills"]}
    return sorted(k for k in reasons if k not in names or k in killers)


def reverse_table(rows: list[dict], header: str) -> str:
    cells = [[r["test"], ", ".join(r["kills"]) or "-", r["why"], r["fault_runs"]] for r in rows]
    lines = [
        "# Tests and the faults they kill",
        "",
        header,
        "",
        *_table(["test", "faults it kills", "why none", "fault runs that ran it"], cells),
    ]
    return "\n".join(lines) + "\n"


# -- the command ------------------------------------------------------------------------------------------------------

# two at once: four small fault-sized runs took 138 s instead of 190 s on 2 shared cores (a run waits for its server
# to load and stop for some 20 s of its 25 to 40; the second run computes meanwhile)
DEFAULT_JOBS = 2


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--list",
        action="store_true",
        help="one line per fault (name, kind, issue, title, model, markers) and a count; run nothing",
    )
    which = parser.add_mutually_exclusive_group()
    which.add_argument("--smoke", action="store_true", help="the faults whose row says smoke = true (and the clean runs)")
    which.add_argument("--only", action="append", default=[], metavar="NAME", help="run this fault (repeatable)")
    parser.add_argument(
        "--out",
        type=Path,
        default=DEFAULT_OUT,
        metavar="DIR",
        help=f"fault-table.md, reverse-table.md, campaign.json and each run's report and log (default: {DEFAULT_OUT})",
    )
    parser.add_argument(
        "--jobs",
        type=int,
        default=DEFAULT_JOBS,
        metavar="N",
        help=f"pytest runs at once; a perf or batching run always runs alone (default: {DEFAULT_JOBS})",
    )


def list_lines(faults: list[Fault]) -> list[str]:
    lines = [" | ".join([f.name, f.kind, f.issue, f.title, f.model, ",".join(f.markers)]) for f in faults]
    deployments = len({f.deployment for f in faults})
    return [*lines, f"{len(faults)} faults ({sum(f.smoke for f in faults)} smoke) on {deployments} deployments"]


def _clock(seconds: float) -> str:
    return f"{int(seconds // 60)}:{int(seconds % 60):02d}"


@dataclass
class Campaign:
    """What one campaign has seen so far, and its progress lines."""

    out: Path
    total: int
    began: float = field(default_factory=time.monotonic)
    faults: list[FaultOutcome] = field(default_factory=list)
    cleans: list[tuple[Result, bool, str]] = field(default_factory=list)
    held: list[Result] = field(default_factory=list)  # fault runs that ended before their clean run: judged after it

    def done(self, result: Result) -> None:
        if result.run.fault is not None:
            self.held.append(result)
        else:
            ok, what = judge_clean(result, self.out)
            self.cleans.append((result, ok, what))
            self._say(f"{result.run.label}: {'passed' if ok else 'FAILED'} ({what})", result)
        cleans = {r.run.label: r for r, _, _ in self.cleans}
        for fault in [r for r in self.held if all(label in cleans for label in r.run.cleans)]:
            self.held.remove(fault)
            outcome = judge_fault(fault, [cleans[label] for label in fault.run.cleans], self.out)
            self.faults.append(outcome)
            verdict = {CAUGHT: f"caught by {outcome.why}", MISSED: f"MISSED ({outcome.why})"}.get(
                outcome.verdict, f"HARNESS ERROR: {outcome.why}"
            )
            self._say(f"{fault.run.label}: {verdict}", fault)

    def _say(self, line: str, result: Result) -> None:
        finished = len(self.faults) + len(self.cleans)
        elapsed = time.monotonic() - self.began
        print(
            f"[{finished:>{len(str(self.total))}}/{self.total}] {line} in {result.seconds:.1f} s; total {_clock(elapsed)}",
            flush=True,
        )

    @property
    def ok(self) -> bool:
        return all(o.verdict == CAUGHT for o in self.faults) and all(ok for _, ok, _ in self.cleans)

    def counts(self) -> str:
        verdicts = [o.verdict for o in self.faults]
        cleans = sum(ok for _, ok, _ in self.cleans)
        return (
            f"{len(verdicts)} faults: {verdicts.count(CAUGHT)} caught, {verdicts.count(MISSED)} missed, "
            f"{verdicts.count(HARNESS)} harness errors; clean runs: {cleans} of {len(self.cleans)} passed"
        )


def _overhead(results: list[Result]) -> dict:
    timings = [r.timing() for r in results if r.report is not None]
    if not timings:
        return {}
    ready = [t["server_ready_s"] for t in timings if t["server_ready_s"] is not None]
    return {
        "runs": len(timings),
        "median_overhead_s": round(statistics.median(t["overhead_s"] for t in timings), 1),
        "median_tests_s": round(statistics.median(t["tests_s"] for t in timings), 1),
        "median_server_ready_s": round(statistics.median(ready), 1) if ready else None,
    }


def _run_record(result: Result, base: list[str], out: Path) -> dict:
    run = result.run
    return {
        "deployment": run.deployment,
        "markers": list(run.markers),
        "keyword": run.keyword,
        "args": list(run.args),
        "returncode": result.returncode,
        "seconds": round(result.seconds, 2),
        "timing": result.timing(),
        "argv": run.argv(base, out),
        "report": str(report_path(out, run.label)),
        "log": str(log_path(out, run.label)),
    }


def _document(
    campaign: Campaign, base: list[str], started: str, jobs: int, rows: list[dict], stale: list[str], results: list[Result]
) -> dict:
    faults = [
        {
            "name": o.fault.name,
            "kind": o.fault.kind,
            "issue": o.fault.issue,
            "url": o.fault.url,
            "title": o.fault.title,
            "verdict": o.verdict,
            "why": o.why,
            "caught_by": o.caught_by,
            **_run_record(o.result, base, campaign.out),
        }
        for o in campaign.faults
    ]
    cleans = [{"passed": ok, "tests": what, **_run_record(r, base, campaign.out)} for r, ok, what in campaign.cleans]
    return {
        "kind": "fault-campaign",
        "schema": 1,
        "started": started,
        "jobs": jobs,
        "wall_s": round(time.monotonic() - campaign.began, 1),
        "ok": campaign.ok,
        "summary": campaign.counts(),
        "overhead": _overhead(results),
        "faults": faults,
        "clean": cleans,
        "reverse": rows,
        "stale_reasons": stale,
    }


def _interrupt(signum, frame):
    raise KeyboardInterrupt("terminated by SIGTERM")


def campaign(
    args: argparse.Namespace,
    base: list[str],
    cwd: Path,
    start: Start = PytestProcess,
    catalog: Path = CATALOG,
    reasons: Path = REASONS,
) -> int:
    """The command: `base` is pytest's arguments for the suites (their path first), run from `cwd`. Exit 0: every
    fault caught and every clean run passed; 1: otherwise; 2: the catalog or the options; 130: Ctrl-C."""
    try:
        faults = select(load_catalog(catalog), args.only, args.smoke)
        if args.list:
            print("\n".join(list_lines(faults)))
            return 0
        if args.jobs < 1:
            raise CampaignError(f"--jobs must be >= 1, got {args.jobs}")
        out = args.out.resolve()
        runs = plan(faults, out)
        reason_of = load_reasons(reasons)
    except (CampaignError, SchemaError) as exc:
        print(f"pytest-triton-llm faults: error: {exc}", file=sys.stderr)
        return 2
    for mine in ("runs", "baselines", "basetemp"):  # a file left by an earlier campaign must not pass for this one's
        shutil.rmtree(out / mine, ignore_errors=True)
        (out / mine).mkdir(parents=True)  # pytest makes its --basetemp, not the folders above it
    started = _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds")
    progress = Campaign(out, len(runs))
    previous = signal.signal(signal.SIGTERM, _interrupt)  # CI cancelling the job stops the running pytest, as Ctrl-C
    try:
        functions = list(dict.fromkeys(function_of(n) for n in collect(start, base, cwd, out)))
        print(
            f"pytest-triton-llm faults: {len(faults)} faults and {len(runs) - len(faults)} clean runs, {args.jobs} "
            f"at once; {len(functions)} test functions; out: {out}",
            flush=True,
        )
        results = execute(
            runs,
            args.jobs,
            start,
            base,
            cwd,
            out,
            progress.done,
            lambda r: judge_clean(r, out)[0],
            lambda r: host_broke_the_start(r, out),
        )
    except CampaignError as exc:
        print(f"pytest-triton-llm faults: error: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print(
            f"pytest-triton-llm faults: interrupted after {_clock(time.monotonic() - progress.began)}; "
            "every running pytest was stopped",
            file=sys.stderr,
        )
        return 130
    finally:
        signal.signal(signal.SIGTERM, previous)
    order = {run.label: number for number, run in enumerate(runs)}  # the tables keep the catalog's order
    progress.faults.sort(key=lambda o: order[o.fault.name])
    progress.cleans.sort(key=lambda clean: order[clean[0].run.label])
    rows = reverse_rows(functions, progress.faults, reason_of)
    stale = stale_reasons(rows, reason_of)
    wall = time.monotonic() - progress.began
    header = f"{progress.counts()}. Wall {_clock(wall)} ({wall:.0f} s), {args.jobs} run(s) at once; started {started}."
    (out / "fault-table.md").write_text(fault_table(progress.faults, progress.cleans, header))
    killers = sum(1 for row in rows if row["kills"])
    (out / "reverse-table.md").write_text(
        reverse_table(rows, f"{len(functions)} test functions of the suites, {killers} kill a fault; {len(faults)} faults run.")
    )
    write_json(out / "campaign.json", _document(progress, base, started, args.jobs, rows, stale, results))
    overhead = _overhead(results)
    print(progress.counts())
    if overhead:
        print(
            f"per run (median of {overhead['runs']}): {overhead['median_overhead_s']} s besides the tests (interpreter, "
            f"collection, server start and stop; server ready after {overhead['median_server_ready_s']} s), "
            f"{overhead['median_tests_s']} s of tests"
        )
    if stale:
        print(f"{reasons.name}: no longer true of {', '.join(stale)} (no such test, or it kills a fault)")
    print(f"wall time {_clock(wall)}; tables: {out / 'fault-table.md'}, {out / 'reverse-table.md'}")
    return 0 if progress.ok else 1
