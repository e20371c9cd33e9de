"""The campaign's verdicts: a fault caught, missed or a harness error, judged against its deployment's clean runs; a
clean run passed or not."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from ..catalog import Fault
from .plan import Run, log_path
from .schedule import FAILED, Result, exit_words


CAUGHT, MISSED, HARNESS = "caught", "missed", "harness error"


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
    """The run's session stopped because its deployment's server died or hung before it was ready (stack/runtimes/server.py)."""
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
        return FaultOutcome(result, HARNESS, f"{exit_words(code)} without a report: {log_path(out, run.label)}")
    if code not in (0, 1):
        return FaultOutcome(result, HARNESS, f"{exit_words(code)}: {log_path(out, run.label)}")
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
        return False, f"{exit_words(code)} without a report: {log_path(out, result.run.label)}"
    counts = ", ".join(f"{n} {outcome}" for outcome, n in sorted(result.counts().items()))
    failed = result.failed()
    if failed:
        return False, f"{counts}; first: {failed[0]}"
    if code != 0:
        return False, f"{exit_words(code)}: {log_path(out, result.run.label)}"
    return True, counts
