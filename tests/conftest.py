"""Shared helpers for the plugin's own tests."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
# the project's own tests start hundreds of throwaway servers (pytester HOMEs): none may be kept warm after its test,
# whatever the caller's environment says, nor by a fault campaign under test (it keeps its runs' servers warm unless
# told); tests/integration/test_warm_servers.py asks for it by option
os.environ["TRITON_LLM_KEEP_WARM"] = "0"
LOCK = ROOT / "engines.lock"
# a 2-layer, 64-wide engine of random weights: for the tests whose subject is how a server is reached or which code
# serves, not what it answers (its tokens cost about a quarter of the default's)
TINY_LOCK = ROOT / "fixtures" / "engines.tiny.lock"
# the cache this machine's sessions built into (.ci/run's Quickstart builds it first); what seed_engine_cache links from
BUILT_CACHE = Path(os.environ.get("TRITON_LLM_TEST_CACHE", "~/.cache/pytest-triton-llm")).expanduser()


# The modules of the longest tests (seconds on 2 cores, `pytest tests -n 2 --durations`, 2026-12-03), started first:
# collected last by name, they ran at the end, on one worker while the other had run out of tests (a run of 552 s
# used 1.2 of its 2 cores). xdist then hands out tests one at a time (--maxschedchunk 1, unless given): its default
# first chunk, a quarter of each worker's share, would give one worker all of them. (The upstream repository's and the
# remote runtime's, 313 and 271 s on SmolLM2-135M, serve the tiny engine since 2026-12-04: 65 and 30 s.)
LONGEST_FIRST = (
    "integration/test_core_install.py",  # 166
    "integration/test_openai_faults.py",  # 153 + 110 + rows
    "integration/test_accuracy_drift.py",  # 109
    "integration/test_tensorrtllm_end_to_end.py",  # 93
    "integration/test_wheel.py",  # 76
    "integration/test_upstream_repository.py",  # 37 + 28
)


def pytest_configure(config):
    if getattr(config.option, "maxschedchunk", "no xdist") is None:
        config.option.maxschedchunk = 1


def pytest_collection_modifyitems(items):
    def rank(item) -> int:
        path = item.nodeid.removeprefix("tests/")
        return next((i for i, module in enumerate(LONGEST_FIRST) if path.startswith(module)), len(LONGEST_FIRST))

    items.sort(key=rank)  # stable: the rest keep their order


@pytest.fixture
def lock_text() -> str:
    return LOCK.read_text()


@pytest.fixture
def project(pytester: pytest.Pytester) -> pytest.Pytester:
    """A pytester directory holding the project's engines.lock."""
    shutil.copy(LOCK, pytester.path / "engines.lock")
    return pytester


@pytest.fixture
def warm_cache(pytester: pytest.Pytester) -> None:
    """The pytester HOME's engine cache already holds what this machine built (seed_engine_cache)."""
    seed_engine_cache(pytester.path)


def seed_engine_cache(home: Path) -> None:
    """Give a pytester HOME (pytester sets HOME to its directory) the engines and sources this machine has built and
    fetched, as hard links: tests of serving, stopping and reporting need a built engine, not a build (a GGUF
    conversion of 14 s and a 94 MB download each). The harness only adds and renames whole files in a cache, never
    writes into one, so the links leave the shared files as they are. Tests of building, fetching or xdist's
    build-once keep a cold HOME; where links cannot be made (another filesystem), the HOME stays cold too."""
    cache = home / ".cache" / "pytest-triton-llm"
    cache.mkdir(parents=True, exist_ok=True)
    for part in ("sources", "engines"):
        if not (BUILT_CACHE / part).is_dir() or (cache / part).exists():
            continue
        staging = cache / f".{part}-seeding"
        if subprocess.run(["cp", "-al", str(BUILT_CACHE / part), str(staging)], capture_output=True).returncode == 0:
            staging.rename(cache / part)
        else:
            shutil.rmtree(staging, ignore_errors=True)


def run_child(argv: list[str], timeout: float | None = None, **kwargs) -> subprocess.CompletedProcess:
    """A child process (an inner pytest, a build script) that ends with the test run: on Ctrl-C, SIGTERM (the plugin
    turns it into KeyboardInterrupt) or a timeout, the child gets SIGINT and a minute to stop what it started (its
    servers) before SIGKILL, and the outer run stops too. Its own session: a terminal's Ctrl-C reaches it once, from here."""
    proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True, **kwargs)
    try:
        stdout, stderr = proc.communicate(timeout=timeout)
    except BaseException:
        proc.send_signal(signal.SIGINT)
        try:
            proc.communicate(timeout=60)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.communicate()
        raise
    return subprocess.CompletedProcess(argv, proc.returncode, stdout, stderr)


# what `pip wheel`/`pip install` of the project read (pyproject.toml's packages, package-dir and readme)
PACKAGE_SOURCES = ("pyproject.toml", "README.md", "pytest_triton_llm", "suites", "fixtures")


def package_source_copy(dest: Path) -> Path:
    """The project's package sources copied to `dest`: setuptools builds in the source tree (its build/ directory), so
    two builds of one checkout at once (test_wheel and test_core_install on two xdist workers) collide there
    ("File exists: build/bdist.linux-x86_64/wheel/...dist-info", CI 2026-12-03)."""
    skip = shutil.ignore_patterns("__pycache__", "*.egg-info", "build")
    for name in PACKAGE_SOURCES:
        source = ROOT / name
        if source.is_dir():
            shutil.copytree(source, dest / name, ignore=skip)
        else:
            dest.mkdir(parents=True, exist_ok=True)
            shutil.copy2(source, dest / name)
    return dest


def need_tool(reason: str) -> None:
    """A tool a test needs is missing: a skip with the reason, or a failure where CI installed it (TRITON_LLM_CI_TOOLS=1:
    .ci/run's step after it installed docker, debootstrap and nginx), so that the step never passes by skipping."""
    if os.environ.get("TRITON_LLM_CI_TOOLS") == "1":
        pytest.fail(f"{reason} (TRITON_LLM_CI_TOOLS=1: this run installed it)")
    pytest.skip(reason)


def processes_mentioning(text: str) -> list[str]:
    """Command lines of live processes that mention `text` (a path unique to one session)."""
    found = []
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit() or int(proc.name) == os.getpid():
            continue
        try:
            cmdline = (proc / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
        except OSError:
            continue
        if text in cmdline:
            found.append(f"{proc.name}: {cmdline[:200]}")
    return found
