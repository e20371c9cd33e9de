"""What the benchmarks share: where their results go (a smoke run never replaces the kept results, a full run keeps
the file it replaces), the embedded runtime, and running aiperf (an optional, separately installed tool)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
RESULTS = ROOT / "benchmarks" / "results"
SMOKE_RESULTS = Path(tempfile.gettempdir()) / "pytest-triton-llm-benchmarks"


class BenchmarkFailed(RuntimeError):
    """A check of the benchmark failed (errors, lost requests, lengths not met): exit 1 with this line."""


# what a benchmark's smoke serves unless --deployment names one: random weights on the embedded default's serving path,
# whose tokens cost a fraction of SmolLM2's; a smoke proves the clients, tables and files, not a model's speed
TINY_LOCK, TINY_DEPLOYMENT = ROOT / "fixtures" / "engines.tiny.lock", "tiny:inflight"


def served_by(lock: Path | None, deployment: str | None, smoke: bool, default: str) -> tuple[Path, str]:
    """(lock, deployment) a benchmark serves: those given; else the tiny engine for a smoke, `default` of engines.lock
    for a full run."""
    tiny = smoke and deployment is None
    return lock or (TINY_LOCK if tiny else ROOT / "engines.lock"), deployment or (TINY_DEPLOYMENT if tiny else default)


def results_path(name: str, smoke: bool, out: Path | None) -> Path:
    """--out, else benchmarks/results/NAME.json, or for a smoke run a scratch file outside the repository."""
    if out is not None:
        return out
    return SMOKE_RESULTS / f"{name}.smoke.json" if smoke else RESULTS / f"{name}.json"


def write_results(path: Path, document: dict, smoke: bool, say) -> None:
    """Write `document` to `path`; an earlier file there is kept aside (files.keep_previous), except the smoke
    run's own scratch file, which is simply replaced."""
    from pytest_triton_llm.common.files import keep_previous, write_json

    path = Path(path)
    scratch = smoke and path.parent == SMOKE_RESULTS
    backup = None if scratch else keep_previous(path)
    write_json(path, document)
    path.chmod(0o644)  # a results file is shared like the rest of the checkout (write_json's temp file is 0600)
    say(f"written to {path}" + (f" (the earlier file kept as {backup})" if backup else ""))


def local_runtime(cache_root: Path, progress):
    """The embedded tritonserver, through the runtime registry (as a pytest session or `serve` creates it)."""
    from pytest_triton_llm.stack.runtimes import RUNTIMES, ServerOptions

    return RUNTIMES["local"].create(ServerOptions(), cache_root, progress)


def check_aiperf(parser, executable: str | None) -> None:
    """--aiperf must name an executable (a usage error, exit 2, before any server starts)."""
    if executable is not None and shutil.which(executable) is None:
        parser.error(f"--aiperf {executable}: no such executable (install aiperf in its own venv, see the docstring)")


def aiperf_version(executable: str) -> str:
    done = subprocess.run([executable, "--version"], capture_output=True, text=True, timeout=120, env=aiperf_env())
    words = (done.stdout + done.stderr).split()
    return words[-1] if done.returncode == 0 and words else "?"


def aiperf_env() -> dict[str, str]:
    # a local tokenizer directory: aiperf 0.13 resolves it as a Hub repo id when HF_HUB_OFFLINE is set
    return {k: v for k, v in os.environ.items() if k not in ("HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE")}


def run_aiperf(executable: str, arguments: list[str], timeout_s: float = 900) -> tuple[dict, list[dict]]:
    """`aiperf profile ARGUMENTS` -> (profile_export_aiperf.json, the profiling phase's per-request records of
    profile_export.jsonl); RuntimeError with the tail of its output when it fails."""
    with tempfile.TemporaryDirectory(prefix="aiperf-") as artifacts:
        argv = [executable, "profile", *arguments, "--artifact-dir", artifacts, "--ui-type", "none"]
        try:
            done = subprocess.run(argv, capture_output=True, text=True, env=aiperf_env(), timeout=timeout_s)
        except FileNotFoundError:
            raise RuntimeError(f"aiperf: no executable {executable}") from None
        exports = sorted(Path(artifacts).glob("profile_export_aiperf.json")) or sorted(
            Path(artifacts).rglob("profile_export_aiperf.json")
        )
        if done.returncode != 0 or not exports:
            tail = "\n".join((done.stdout + done.stderr).strip().splitlines()[-15:])
            raise RuntimeError(f"aiperf failed (exit {done.returncode}):\n{tail}")
        summary = json.loads(exports[0].read_text())
        records = []
        for path in Path(artifacts).glob("profile_export.jsonl"):
            for line in path.read_text().splitlines():
                record = json.loads(line) if line.strip() else {}
                if record.get("metadata", {}).get("benchmark_phase") == "profiling":
                    records.append(record)
    return summary, records


def stat(summary: dict, metric: str, field: str = "avg") -> float | None:
    """One figure of aiperf's summary export, or None when aiperf did not report it."""
    value = (summary.get(metric) or {}).get(field)
    return None if value is None else float(value)
