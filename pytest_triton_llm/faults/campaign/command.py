"""`pytest-triton-llm faults`: its options, its progress lines, and the command that plans, runs, judges and writes
the tables and campaign.json."""

from __future__ import annotations

import argparse
import datetime as _dt
import shutil
import signal
import statistics
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

from ...common.files import write_json
from ...common.schema import SchemaError
from ..catalog import CATALOGS, Fault, load_catalog
from .plan import CampaignError, Run, log_path, plan, report_path, select
from .schedule import PytestProcess, Result, Start, collect, execute
from .tables import REASONS, fault_table, load_reasons, function_of, reverse_rows, reverse_table, stale_reasons
from .verdicts import CAUGHT, HARNESS, MISSED, FaultOutcome, host_broke_the_start, judge_clean, judge_fault

DEFAULT_OUT = Path("out") / "faults"


# two at once: four small fault-sized runs took 138 s instead of 190 s on 2 shared cores (a run waits for its server
# to load and stop for some 20 s of its 25 to 40; the second run computes meanwhile)
DEFAULT_JOBS = 2


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--list",
        action="store_true",
        help="one line per fault (name, kind, issue, title, model, markers) and a count; run nothing",
    )
    parser.add_argument(
        "--catalog",
        choices=(*CATALOGS, "tracker-openai"),
        default="faults",
        help="faults: fixtures/faults.toml, written beside the suites; tracker: fixtures/tracker_faults.toml, chosen "
        "from upstream's trackers by docs/tracker-catalog.md's rule and run through the whole gate; tracker-openai: "
        "its /v1 rows (fixtures/tracker_openai_faults.toml), through the fault proxy in front of the trtllm-serve "
        "stand-in (default: faults)",
    )
    which = parser.add_mutually_exclusive_group()
    which.add_argument("--smoke", action="store_true", help="the faults whose row says smoke = true (and the clean runs)")
    which.add_argument("--only", action="append", default=[], metavar="NAME", help="run this fault (repeatable)")
    parser.add_argument(
        "--out",
        type=Path,
        default=None,
        metavar="DIR",
        help=f"fault-table.md, reverse-table.md, campaign.json and each run's report and log (default: {DEFAULT_OUT}, "
        "out/<catalog>-faults with another --catalog)",
    )
    parser.add_argument(
        "--jobs",
        type=int,
        default=DEFAULT_JOBS,
        metavar="N",
        help=f"pytest runs at once; a perf or batching run always runs alone (default: {DEFAULT_JOBS})",
    )


def out_dir(args: argparse.Namespace) -> Path:
    """--out, else out/faults for the main catalog and out/<catalog>-faults for the others."""
    return (args.out or (DEFAULT_OUT if args.catalog == "faults" else Path("out") / f"{args.catalog}-faults")).resolve()


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


def _fresh(out: Path) -> None:
    for mine in ("runs", "baselines", "basetemp"):  # a file left by an earlier campaign must not pass for this one's
        shutil.rmtree(out / mine, ignore_errors=True)
        (out / mine).mkdir(parents=True)  # pytest makes its --basetemp, not the folders above it


def campaign(
    args: argparse.Namespace,
    base: list[str],
    cwd: Path,
    start: Start = PytestProcess,
    catalog: Path | None = None,
    reasons: Path = REASONS,
) -> int:
    """The command: `base` is pytest's arguments for the suites (their path first), run from `cwd`. Exit 0: every
    fault caught and every clean run passed; 1: otherwise; 2: the catalog or the options; 130: Ctrl-C."""
    try:
        faults = select(load_catalog(catalog or CATALOGS[args.catalog]), args.only, args.smoke)
        if args.list:
            print("\n".join(list_lines(faults)))
            return 0
        if args.jobs < 1:
            raise CampaignError(f"--jobs must be >= 1, got {args.jobs}")
        out = out_dir(args)
        runs = plan(faults, out)
        reason_of = load_reasons(reasons)
    except (CampaignError, SchemaError) as exc:
        print(f"pytest-triton-llm faults: error: {exc}", file=sys.stderr)
        return 2
    _fresh(out)
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
    _write_results(progress, runs, results, functions, reason_of, reasons, base, started, args.jobs, out)
    return 0 if progress.ok else 1


def _write_results(
    progress: Campaign,
    runs: list[Run],
    results: list[Result],
    functions: list[str],
    reason_of: dict[str, str],
    reasons: Path,
    base: list[str],
    started: str,
    jobs: int,
    out: Path,
) -> None:
    """The fault and reverse tables, campaign.json, and the summary lines."""
    faults = [run for run in runs if run.fault is not None]
    order = {run.label: number for number, run in enumerate(runs)}  # the tables keep the catalog's order
    progress.faults.sort(key=lambda o: order[o.fault.name])
    progress.cleans.sort(key=lambda clean: order[clean[0].run.label])
    rows = reverse_rows(functions, progress.faults, reason_of)
    stale = stale_reasons(rows, reason_of)
    wall = time.monotonic() - progress.began
    header = f"{progress.counts()}. Wall {_clock(wall)} ({wall:.0f} s), {jobs} run(s) at once; started {started}."
    (out / "fault-table.md").write_text(fault_table(progress.faults, progress.cleans, header))
    killers = sum(1 for row in rows if row["kills"])
    (out / "reverse-table.md").write_text(
        reverse_table(rows, f"{len(functions)} test functions of the suites, {killers} kill a fault; {len(faults)} faults run.")
    )
    write_json(out / "campaign.json", _document(progress, base, started, jobs, rows, stale, results))
    overhead = _overhead(results)
    print(progress.counts())
    if overhead:
        print(
            f"per run (median of {overhead['runs']}): {overhead['median_overhead_s']} s besides the tests (interpreter, "
            f"collection, taking or starting a server and letting it go; ready after {overhead['median_server_ready_s']} s), "
            f"{overhead['median_tests_s']} s of tests"
        )
    if stale:
        print(f"{reasons.name}: no longer true of {', '.join(stale)} (no such test, or it kills a fault)")
    print(f"wall time {_clock(wall)}; tables: {out / 'fault-table.md'}, {out / 'reverse-table.md'}")
