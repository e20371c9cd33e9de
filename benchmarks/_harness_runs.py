"""harness_cost.py's measurements, each a whole command of a revision's code: `pytest-triton-llm serve` (start, first
request, stop) and a `pytest suites` session (first test, overhead per test, server starts)."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import tempfile
import time
import urllib.request
import xml.etree.ElementTree as ET
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path

from _common import BenchmarkFailed

READY_TIMEOUT_S = 300.0
LOG_STAMP = re.compile(r"^[IWE]\d{4} (\d\d:\d\d:\d\d\.\d+) ")
LOADED = re.compile(r"successfully loaded '([^']+)'")


@dataclass(frozen=True)
class Revision:
    label: str
    root: Path  # its checkout: the command's working directory (engines.lock, suites/)
    commit: str
    pythonpath: Path | None = None  # where its package is imported from, when not this venv's editable install

    def env(self) -> dict[str, str]:
        env = dict(os.environ)
        if self.pythonpath is not None:
            env["PYTHONPATH"] = str(self.pythonpath)
        return env

    def cli(self, *args: str) -> list[str]:
        return [sys.executable, "-c", "from pytest_triton_llm.cli import main; raise SystemExit(main())", *args]


def _clock(stamp: str) -> float:
    return datetime.strptime(stamp, "%H:%M:%S.%f").timestamp()


def model_loads(log: Path) -> dict[str, float]:
    """Seconds from the server log's first line to each model's `successfully loaded` line."""
    first, loaded = None, {}
    for line in log.read_text(errors="replace").splitlines():
        match = LOG_STAMP.match(line)
        if match is None:
            continue
        first = first if first is not None else _clock(match.group(1))
        if found := LOADED.search(line):
            loaded[f"model_{found.group(1)}_s"] = round(_clock(match.group(1)) - first, 3)
    return loaded


def _wait_for(pattern: str, out: Path, process: subprocess.Popen) -> re.Match:
    deadline = time.monotonic() + READY_TIMEOUT_S
    while time.monotonic() < deadline:
        if found := re.search(pattern, out.read_text(errors="replace"), re.MULTILINE):
            return found
        if process.poll() is not None:
            raise BenchmarkFailed(f"serve exited {process.returncode} before {pattern!r}:\n{out.read_text()[-2000:]}")
        time.sleep(0.02)
    raise BenchmarkFailed(f"no {pattern!r} within {READY_TIMEOUT_S:g} s:\n{out.read_text()[-2000:]}")


def _first_answer(http: str, entry: str) -> None:
    body = json.dumps({"text_input": "What is the capital of France?", "max_tokens": 8}).encode()
    request = urllib.request.Request(f"{http}/v2/models/{entry}/generate", body, {"Content-Type": "application/json"})
    with urllib.request.urlopen(request, timeout=120) as response:
        if "text_output" not in json.loads(response.read()):
            raise BenchmarkFailed(f"{entry} answered without text_output")


def measure_start(revision: Revision, deployment: str) -> dict:
    """`serve DEPLOYMENT`: seconds to ready, per model, to the first answered request and to stopped."""
    with tempfile.TemporaryDirectory(prefix="harness-cost-serve-") as tmp:
        out = Path(tmp) / "serve.out"
        with open(out, "wb") as sink:
            start = time.monotonic()
            process = subprocess.Popen(
                revision.cli("serve", deployment), cwd=revision.root, env=revision.env(), stdout=sink, stderr=subprocess.STDOUT
            )
        try:
            ready = _wait_for(r"^ready: .*entry models (\w+)", out, process)
            ready_s = time.monotonic() - start
            http = _wait_for(r"^http: +(\S+)", out, process).group(1)
            _first_answer(http, ready.group(1))
            answered_s = time.monotonic() - start
        finally:
            stopping = time.monotonic()
            process.send_signal(signal.SIGINT)
            process.wait(timeout=120)
        stop_s = time.monotonic() - stopping
        log = re.search(r"log (\S+tritonserver\.log)", out.read_text())
        loads = model_loads(Path(log.group(1))) if log and Path(log.group(1)).is_file() else {}
    return {"ready_s": round(ready_s, 3), "first_answer_s": round(answered_s, 3), "stop_s": round(stop_s, 3), **loads}


def keeps_warm(revision: Revision) -> bool:
    """Whether the revision has --triton-keep-warm (warm servers came after 5aefc04)."""
    package = revision.root / "pytest_triton_llm"
    folders = ("runtimes", "stack/runtimes")  # before and after the package's folders (0.1.0)
    return any((package / folder / "warm.py").is_file() for folder in folders)


# long enough for a second session that starts slowly on a loaded machine (60 s was not, beside CI's suites step);
# measure_reuse stops the warm servers itself
KEEP_WARM = ["--triton-keep-warm", "600"]


def measure_reuse(revision: Revision, deployment: str, keyword: str | None, first: dict | None = None) -> dict:
    """Two `pytest suites -m functional` sessions with --triton-keep-warm (`first`: the first one's figures, when the
    caller ran it with KEEP_WARM): when the second one's first test ran, having taken the first one's server; the warm
    servers are stopped afterwards. A revision without warm servers: its usual first test, since every session of it
    starts a server."""
    if not keeps_warm(revision):
        return {"next_session_first_test_s": measure_suite(revision, deployment, keyword)["first_test_s"]}
    first = first or measure_suite(revision, deployment, keyword, KEEP_WARM)
    second = measure_suite(revision, deployment, keyword, KEEP_WARM)
    stop = revision.cli("cache", "warm", "--stop")
    subprocess.run(stop, cwd=revision.root, env=revision.env(), capture_output=True, timeout=120, check=False)
    if second["warm_slot"] is None or second["warm_slot"] != first["warm_slot"]:
        raise BenchmarkFailed(f"{revision.label}: the second session did not take the first one's warm server: {second}")
    return {"next_session_first_test_s": second["first_test_s"], "next_session_wall_s": second["wall_s"]}


def _pytest_argv(deployment: str, junit: Path, keyword: str | None, extra: list[str]) -> list[str]:
    argv = [sys.executable, "-m", "pytest", "suites", "-m", "functional", "--deployment", deployment]
    argv += ["-p", "no:cacheprovider", "-q", f"--junitxml={junit}", "-o", "junit_duration_report=call"]
    return argv + (["-k", keyword] if keyword else []) + extra


def measure_suite(revision: Revision, deployment: str, keyword: str | None, extra: list[str] | None = None) -> dict:
    """`pytest suites -m functional`: when the first test ran, overhead per test, server starts, the warm slot."""
    with tempfile.TemporaryDirectory(prefix="harness-cost-suite-") as tmp:
        junit = Path(tmp) / "junit.xml"
        start = time.monotonic()
        argv = _pytest_argv(deployment, junit, keyword, extra or [])
        done = subprocess.run(argv, cwd=revision.root, env=revision.env(), capture_output=True, text=True, timeout=1800)
        wall_s = time.monotonic() - start
        if done.returncode != 0:
            tail = done.stdout[-3000:] + done.stderr[-2000:]
            raise BenchmarkFailed(f"{revision.label}: pytest exited {done.returncode}:\n{tail}")
        cases = ET.parse(junit).getroot().iter("testcase")
        ran = [float(c.get("time", 0)) for c in cases if c.find("skipped") is None]
    first = re.search(r"the first test ran at ([\d.]+) s", done.stdout)
    warm = re.search(r"since \S+ \((\S+/warm/[^)]+)\)", done.stdout)
    starts = re.findall(r"^\[triton-llm\] server \S+: starting ", done.stdout + done.stderr, re.MULTILINE)
    return {
        "first_test_s": float(first.group(1)) if first else None,
        "wall_s": round(wall_s, 2),
        "tests": len(ran),
        "overhead_per_test_s": round((wall_s - sum(ran)) / max(1, len(ran)), 3),
        "server_starts": len(starts),
        "warm_slot": warm.group(1) if warm else None,
    }
