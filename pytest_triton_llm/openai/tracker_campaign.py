"""The tracker catalog's /v1 campaign (`pytest-triton-llm faults --catalog tracker-openai`): the whole /v1 gate a user
runs (the README's --openai-url command), through the fault proxy in front of the project's trtllm-serve stand-in,
once clean and once under each row of fixtures/tracker_openai_faults.toml. A row is caught when a test fails (or the
session ends in error) that passed in the clean run; nothing names a test, so the rate measures the gate as it is."""

from __future__ import annotations

import json
import subprocess
import sys
import tempfile
import threading
import time
import xml.etree.ElementTree as ET
from dataclasses import dataclass, field
from pathlib import Path

from ..common.progress import Progress
from ..common.schema import load_toml
from ..stack.cache import EngineCache
from ..stack.lock import load_lock
from . import trtllm_serve
from .fault_proxy import TRACKER_FILE, FaultProxy

GATE = "functional or streaming or invariants or early_stop or robustness"  # README.md's /v1 command
ENGINE = "smollm2-135m"
SESSION_TIMEOUT_S = 900
TARGET_DOES_IT = "the_campaign_target_does_it"  # a row whose symptom is trtllm-serve's own design: listed, not run
JOBS = 2  # gate runs at once, each through its own proxy and server: no session sees another's load or /perf_metrics


@dataclass
class GateRun:
    label: str
    returncode: int
    seconds: float
    failed: list[str] = field(default_factory=list)  # node ids that failed or errored
    passed: int = 0
    skipped: int = 0


def _node_id(classname: str, name: str) -> str:
    """pytest's node id from a JUnit testcase: its classname holds the module's dotted path, then any test class
    (suites.test_robustness.TestOverV1 -> suites/test_robustness.py::TestOverV1)."""
    parts = classname.split(".")
    classes = next((i for i, part in enumerate(parts) if part[:1].isupper()), len(parts))
    return "::".join(["/".join(parts[:classes]) + ".py", *parts[classes:], name])


def _outcomes(junit: Path) -> tuple[list[str], int, int]:
    if not junit.is_file():
        return [], 0, 0
    failed, passed, skipped = [], 0, 0
    for case in ET.parse(junit).getroot().iter("testcase"):
        node = _node_id(case.get("classname", ""), case.get("name", ""))
        kinds = {child.tag for child in case}
        if kinds & {"failure", "error"}:
            failed.append(node)
        elif "skipped" in kinds:
            skipped += 1
        else:
            passed += 1
    return sorted(set(failed)), passed, skipped


def run_gate(label: str, url: str, tokenizer: str, root: Path, out: Path, first_failure: bool = False) -> GateRun:
    """The gate against `url`; with `first_failure`, it stops at the first failing test (a fault's run: one failure
    decides it; the clean run goes through)."""
    junit = out / f"{label}.xml"
    argv = [sys.executable, "-m", "pytest", "suites", "-m", GATE, "--openai-url", url, "--tokenizer", tokenizer]
    argv += ["-p", "no:cacheprovider", "-q", "--junitxml", str(junit), "--timeout", "300", *(["-x"] if first_failure else [])]
    began = time.monotonic()
    with open(out / f"{label}.log", "w") as log:
        done = subprocess.run(argv, cwd=root, stdout=log, stderr=subprocess.STDOUT, timeout=SESSION_TIMEOUT_S)
    failed, passed, skipped = _outcomes(junit)
    return GateRun(label, done.returncode, round(time.monotonic() - began, 1), failed, passed, skipped)


def verdict(clean: GateRun, run: GateRun) -> tuple[bool, list[str]]:
    """(caught, what caught it): tests that failed here and passed clean, or a session that ended in error."""
    new = [node for node in run.failed if node not in clean.failed]
    if new:
        return True, new
    if run.returncode not in (0, 1) and clean.returncode == 0:
        return True, [f"the session ended in error (pytest exit {run.returncode})"]
    return False, []


def campaign(root: Path, out: Path, only: list[str], cache: Path | str) -> int:
    rows = load_toml(TRACKER_FILE)["faults"]
    if unknown := sorted(set(only) - set(rows)):
        print(f"pytest-triton-llm faults: error: no /v1 tracker fault {', '.join(unknown)}", file=sys.stderr)
        return 2
    out.mkdir(parents=True, exist_ok=True)
    progress, lock = Progress(), load_lock(root / "engines.lock")
    servers, proxies = [], []
    try:
        for _ in range(JOBS):
            work = Path(tempfile.mkdtemp())
            servers.append(trtllm_serve.serve_engine(lock, ENGINE, EngineCache(cache, progress), work, perf_metrics=1000))
            proxies.append(FaultProxy(servers[-1].url, None, servers[-1].tokenizer))
            proxies[-1].start()
        tokenizer = str(servers[0].tokenizer)
        clean = run_gate("clean", proxies[0].url, tokenizer, root, out)
        said = f"{clean.passed} passed, {len(clean.failed)} failed in {clean.seconds} s"
        print(f"clean: exit {clean.returncode}, {said}", flush=True)
        chosen = [n for n in rows if (not only or n in only) and not rows[n].get(TARGET_DOES_IT)]
        results = _run_faults(chosen, proxies, clean, tokenizer, root, out)
    finally:
        for proxy in proxies:
            proxy.stop()
        for server in servers:
            server.stop()
    not_run = {n: row for n, row in rows.items() if (not only or n in only) and row.get(TARGET_DOES_IT)}
    return _report(rows, clean, results, not_run, out)


def _run_faults(names: list[str], proxies: list[FaultProxy], clean: GateRun, tokenizer: str, root: Path, out: Path) -> dict:
    began, results, queue, lock = time.monotonic(), {}, list(names), threading.Lock()

    def work(proxy: FaultProxy) -> None:
        while True:
            with lock:
                if not queue:
                    return
                name = queue.pop(0)
            proxy.switch(name)
            run = run_gate(name, proxy.url, tokenizer, root, out, first_failure=True)
            proxy.switch(None)
            caught, by = verdict(clean, run)
            with lock:
                results[name] = (run, caught, by)
                said = f"caught by {by[0]}" if caught else "MISSED"
                total = time.monotonic() - began
                print(f"[{len(results)}/{len(names)}] {name}: {said} in {run.seconds} s; total {total:.0f} s", flush=True)

    workers = [threading.Thread(target=work, args=(proxy,)) for proxy in proxies]
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join()
    return {name: results[name] for name in names if name in results}


def _report(rows: dict, clean: GateRun, results: dict, not_run: dict, out: Path) -> int:
    caught = sum(1 for _, hit, _ in results.values() if hit)
    lines = ["| fault | issue | caught | by |", "|---|---|---|---|"]
    record = {}
    for name, (run, hit, by) in results.items():
        lines.append(f"| {name} | {rows[name]['issue']} | {'yes' if hit else 'no'} | {'; '.join(by[:3])} |")
        record[name] = {"caught": hit, "by": by, "seconds": run.seconds, "exit": run.returncode}
    for name, row in not_run.items():
        lines.append(f"| {name} | {row['issue']} | not run | trtllm-serve answers so by design: {row[TARGET_DOES_IT]} |")
    lines.append(f"\n{caught} of {len(results)} caught; clean run: exit {clean.returncode}, {clean.passed} passed")
    (out / "fault-table.md").write_text("\n".join(lines) + "\n")
    (out / "campaign.json").write_text(json.dumps({"clean": clean.__dict__, "faults": record}, indent=1))
    print("\n".join(lines), flush=True)
    return 0 if clean.returncode == 0 and caught == len(results) else 1
