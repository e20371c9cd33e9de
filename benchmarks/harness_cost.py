"""Harness cost: what the harness itself costs around the tests, this checkout against a base revision, side by side.

For one deployment (default `smollm2-135m:inflight`, the embedded default's in-flight deployment on the CPU) and
each revision, in interleaved rounds (base, this checkout, base, ...), so that what the shared machine does in between
hits both alike and the gain is read as a ratio, not a timing:

- start: `pytest-triton-llm serve DEPLOYMENT` as a user runs it; seconds from the command to its `ready:` line, each
  model's load from the server log (its `loading:` to `successfully loaded` lines, from the log's first line), the
  first answered request (`/v2/models/<entry>/generate`, 8 tokens) and the stop (SIGINT to the command's exit);
- suite: `pytest suites -m functional --deployment DEPLOYMENT` (--smoke: three of its tests); the session's own
  "first test ran at" figure, its wall time, the sum of its tests' call times (JUnit XML), the overhead per test
  ((wall - calls) / tests) and how many servers the session started;
- next session: the same session twice with --triton-keep-warm, and when the second one's first test ran, having
  taken the first one's warm server (a revision without warm servers: its usual first test, as each of its sessions
  starts a server).

The base revision (default 5aefc04, the landed main that issue 43 measured) is checked out into a temporary git
worktree and imported through PYTHONPATH with this venv's packages, so both sides run on the same interpreter,
server binary and engine cache (built once before the rounds). Only the project's code differs.

    .venv/bin/python benchmarks/harness_cost.py                 # 2 rounds, results in benchmarks/results/harness_cost.json
    .venv/bin/python benchmarks/harness_cost.py --smoke         # this checkout only, 3 tests, 2 server starts

Exit 1 when a server does not get ready, a request is not answered or a suite run fails.
"""

from __future__ import annotations

import argparse
import os
import platform
import statistics
import subprocess
import sys
import tempfile
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path

from _common import ROOT, BenchmarkFailed, results_path, write_results
from _harness_runs import KEEP_WARM, Revision, measure_reuse, measure_start, measure_suite

DEFAULT_BASE = "5aefc04"
SMOKE_TESTS = (
    "(test_inputs_match_upstream_contract or test_greedy_output_is_deterministic or test_chat_answer_contains_paris)"
    " and not tensorrt_llm"
)


@dataclass
class Side:
    revision: Revision
    rounds: list[dict] = field(default_factory=list)

    def medians(self) -> dict[str, float]:
        keys = sorted({k for r in self.rounds for k, v in r.items() if isinstance(v, (int, float))})
        return {k: round(statistics.median(r[k] for r in self.rounds if k in r), 3) for k in keys}


@contextmanager
def base_worktree(commit: str):
    """`commit` checked out into a temporary worktree, removed afterwards."""
    with tempfile.TemporaryDirectory(prefix="harness-cost-base-") as tmp:
        path = Path(tmp) / "checkout"
        subprocess.run(["git", "-C", str(ROOT), "worktree", "add", "--detach", "-q", str(path), commit], check=True)
        try:
            yield path
        finally:
            subprocess.run(["git", "-C", str(ROOT), "worktree", "remove", "--force", str(path)], check=False)


def run_rounds(sides: list[Side], deployment: str, rounds: int, say) -> None:
    for index in range(1, rounds + 1):
        for side in sides:
            say(f"round {index}/{rounds}, {side.revision.label}: start, first request, stop")
            record = measure_start(side.revision, deployment)
            say(f"round {index}/{rounds}, {side.revision.label}: pytest suites -m functional")
            record.update(measure_suite(side.revision, deployment, None))
            say(f"round {index}/{rounds}, {side.revision.label}: a second session, after one that left its server warm")
            record.update(measure_reuse(side.revision, deployment, SMOKE_TESTS))  # the first test's time is the figure
            side.rounds.append(record)
            say(f"  {side.revision.label}: " + ", ".join(f"{k} {v}" for k, v in record.items() if not isinstance(v, dict)))


def run_smoke(side: Side, deployment: str, say) -> None:
    """Every figure once, with two server starts instead of the rounds' four: the suite's session leaves its server
    warm and is the first of the two sessions the reuse figure needs (the figures are checked, not compared)."""
    say(f"{side.revision.label}: start, first request, stop")
    record = measure_start(side.revision, deployment)
    say(f"{side.revision.label}: pytest suites -m functional ({SMOKE_TESTS}), its server left warm, then a second session")
    suite = measure_suite(side.revision, deployment, SMOKE_TESTS, KEEP_WARM)
    record.update(suite)
    record.update(measure_reuse(side.revision, deployment, SMOKE_TESTS, first=suite))
    side.rounds.append(record)
    say(f"  {side.revision.label}: " + ", ".join(f"{k} {v}" for k, v in record.items() if not isinstance(v, dict)))


FIGURES = (
    ("ready_s", "start to ready (s)"),
    ("model_tensorrt_llm_s", "tensorrt_llm loaded, from the log's start (s)"),
    ("model_preprocessing_s", "preprocessing loaded (s)"),
    ("model_tensorrt_llm_bls_s", "tensorrt_llm_bls loaded (s)"),
    ("first_answer_s", "start to first answered request (s)"),
    ("stop_s", "stop (s)"),
    ("first_test_s", "suite: first test ran at (s)"),
    ("overhead_per_test_s", "suite: overhead per test (s)"),
    ("wall_s", "suite: wall time (s)"),
    ("server_starts", "suite: server starts"),
    ("next_session_first_test_s", "next session's first test, its server warm where the revision can (s)"),
)


def table(sides: list[Side]) -> tuple[str, dict]:
    """A markdown table of the medians, with this checkout's ratio to the base where both were measured."""
    medians = [side.medians() for side in sides]
    head = ["figure"] + [side.revision.label for side in sides] + (["ratio"] if len(sides) == 2 else [])
    rows, ratios = [], {}
    for key, label in FIGURES:
        values = [m.get(key) for m in medians]
        if all(v is None for v in values):
            continue
        row = [label] + ["-" if v is None else f"{v:g}" for v in values]
        if len(sides) == 2:
            base, head_value = values
            ratio = round(head_value / base, 3) if base and head_value is not None else None
            ratios[key] = ratio
            row.append("-" if ratio is None else f"{ratio:.2f}x")
        rows.append(row)
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)] + ["| " + " | ".join(r) + " |" for r in rows]
    return "\n".join(lines), ratios


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--deployment", default="smollm2-135m:inflight")
    parser.add_argument("--base", default=DEFAULT_BASE, help=f"the revision to compare with (default {DEFAULT_BASE})")
    parser.add_argument("--rounds", type=int, default=2, help="interleaved rounds per revision (default 2)")
    parser.add_argument("--smoke", action="store_true", help="this checkout only, each figure once, three tests")
    parser.add_argument("--out", type=Path, help="results file (default benchmarks/results/harness_cost.json)")
    args = parser.parse_args(argv)

    def say(line: str) -> None:
        print(f"[harness-cost] {line}", flush=True)

    head = Revision(
        "this checkout",
        ROOT,
        subprocess.run(["git", "-C", str(ROOT), "rev-parse", "--short", "HEAD"], capture_output=True, text=True).stdout.strip(),
    )
    try:
        if args.smoke:
            sides = [Side(head)]
            run_smoke(sides[0], args.deployment, say)
        else:
            measure_start(head, args.deployment)  # builds or checks the engine once, outside the rounds
            with base_worktree(args.base) as path:
                sides = [Side(Revision(f"base {args.base}", path, args.base, pythonpath=path)), Side(head)]
                run_rounds(sides, args.deployment, args.rounds, say)
    except BenchmarkFailed as exc:
        print(f"harness_cost: {exc}", file=sys.stderr)
        return 1
    text, ratios = table(sides)
    print(text)
    document = {
        "benchmark": "harness_cost",
        "when": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        "machine": {"cores": len(os.sched_getaffinity(0)), "platform": platform.platform(), "python": platform.python_version()},
        "deployment": args.deployment,
        "sides": [
            {"revision": s.revision.label, "commit": s.revision.commit, "rounds": s.rounds, "medians": s.medians()} for s in sides
        ],
        "ratios": ratios,
        "table": text,
    }
    write_results(results_path("harness_cost", args.smoke, args.out), document, args.smoke, say)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
