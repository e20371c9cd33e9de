"""A pytest plugin (`-p tests.integration.v1_fault_session --v1-fault-plan PLAN`) that runs many /v1 fault rows in
one session against the fault proxy (tests/integration/test_openai_faults.py): each collected test runs once per
fault the plan gives it, then once with none; the proxy is switched before each run, and every fixture, session-wide
ones included, is torn down after it, so that no run sees what another fault left behind. Each run's outcome is
appended to the plan's results file as a JSON line: {"nodeid", "fault" (null: none), "outcome", "seconds"}.

PLAN is a JSON file: {"switch_url": the proxy's SWITCH_PATH URL, "results": a path, "runs": {nodeid: [fault, ...]}}."""

from __future__ import annotations

import json
import urllib.request
from pathlib import Path

import pytest
from _pytest.runner import runtestprotocol

PLAN = pytest.StashKey[dict]()


def pytest_addoption(parser):
    parser.addoption("--v1-fault-plan", help="the faults each test runs under, and where outcomes go (JSON)")


def pytest_configure(config):
    if path := config.getoption("--v1-fault-plan"):
        config.stash[PLAN] = json.loads(Path(path).read_text())


def _switch(url: str, fault: str | None) -> None:
    request = urllib.request.Request(url, data=(fault or "").encode(), method="POST")
    with urllib.request.urlopen(request, timeout=330) as answer:  # the proxy waits up to 300 s for a drain
        answer.read()


def _outcome(reports) -> str:
    if any(r.failed for r in reports if r.when != "call"):
        return "error"  # not a catch: the row's checks must fail, not their fixtures
    return next((r.outcome for r in reports if r.when == "call"), "skipped")


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_protocol(item, nextitem):
    plan = item.config.stash.get(PLAN, None)
    if plan is None:
        return None
    for fault in [*plan["runs"].get(item.nodeid, []), None]:  # the clean run last: the report keeps its figures
        _switch(plan["switch_url"], fault)
        item.ihook.pytest_runtest_logstart(nodeid=item.nodeid, location=item.location)
        reports = runtestprotocol(item, nextitem=None)  # None: every fixture goes with the run
        item.ihook.pytest_runtest_logfinish(nodeid=item.nodeid, location=item.location)
        seconds = round(sum(r.duration for r in reports), 2)
        record = {"nodeid": item.nodeid, "fault": fault, "outcome": _outcome(reports), "seconds": seconds}
        with open(plan["results"], "a") as results:
            results.write(json.dumps(record) + "\n")
    return True
