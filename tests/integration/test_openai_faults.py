"""Each /v1 check can fail for the stack's reasons: every fault of fixtures/openai_faults.toml, injected by the fault
proxy in front of a real /v1 server (llama-cpp-python on the embedded GGUF), or in front of the project's trtllm-serve
stand-in where a row's checks need trtllm-serve's own fields (its `server`), fails the test its row names, and the
same tests pass through the proxy without a fault. The llama-cpp-python rows are skipped (failed under
TRITON_LLM_CI_TOOLS=1) without the llama-cpp extra."""

from __future__ import annotations

import json
import subprocess
import sys
from dataclasses import dataclass

import pytest

from pytest_triton_llm.openai import llama_cpp as llama_cpp_server
from pytest_triton_llm.openai import trtllm_serve as trtllm_serve_stand_in
from pytest_triton_llm.cache import EngineCache
from pytest_triton_llm.lock import load_lock
from pytest_triton_llm.openai.fault_proxy import FAULTS_FILE, FaultProxy
from pytest_triton_llm.progress import Progress
from pytest_triton_llm.schema import load_toml

from ..conftest import BUILT_CACHE
from .conftest import ROOT

pytestmark = [pytest.mark.integration, pytest.mark.timeout(900)]
FAULTS = load_toml(FAULTS_FILE)["faults"]
MIGRATION_TESTS = "suites/test_v1_migration.py::"
CLEAN_ARTICLES = 4  # the last --accuracy-samples given counts
LLAMA, STAND_IN = "llama-cpp-python", "trtllm-serve-stand-in"  # a row's `server`, llama-cpp-python when it names none


@dataclass(frozen=True)
class Upstream:
    url: str
    options: tuple[str, ...] = ()  # what every run against it needs


@pytest.fixture(scope="module")
def llama(gguf, tmp_path_factory):
    run = tmp_path_factory.mktemp("llama")
    server = llama_cpp_server.start(gguf, run / "llama.log", run / "run", Progress())
    yield Upstream(server.url)
    server.stop()


@pytest.fixture(scope="module")
def stand_in(tmp_path_factory):
    """The trtllm-serve stand-in on the embedded default's reference checkpoint, with /perf_metrics kept."""
    if (why := trtllm_serve_stand_in.installed()) is not None:
        pytest.fail(why)
    run = tmp_path_factory.mktemp("stand-in")
    lock = load_lock(ROOT / "engines.lock")
    server = trtllm_serve_stand_in.serve_engine(
        lock, "smollm2-135m", EngineCache(BUILT_CACHE, Progress()), run, perf_metrics=1000
    )
    yield Upstream(server.url, ("--tokenizer", str(server.tokenizer)))
    server.stop()


def _upstream(request, server: str) -> Upstream:
    return request.getfixturevalue("stand_in" if server == STAND_IN else "llama")


def _run(
    up: Upstream, url: str, *node_ids: str, deployment: str | None = None, options: tuple[str, ...] = ()
) -> subprocess.CompletedProcess:
    """The suites' tests `node_ids` against `url`; with `deployment`, the migration gate's Triton side beside it."""
    argv = [sys.executable, "-m", "pytest", *node_ids, "--openai-url", url, "-p", "no:cacheprovider", "-q", "-rf"]
    argv += ["--deployment", deployment] if deployment else []
    return subprocess.run([*argv, *up.options, *options], cwd=ROOT, capture_output=True, text=True, timeout=600)


def _failed(done: subprocess.CompletedProcess) -> list[str]:
    return sorted(line.split(" - ")[0].removeprefix("FAILED ") for line in done.stdout.splitlines() if line.startswith("FAILED "))


def _v1_nodes(row: dict) -> list[str]:
    """The row's catching tests that need no Triton deployment."""
    return [n for n in row["caught_by"] if not n.startswith(MIGRATION_TESTS)]


@pytest.mark.parametrize("server", [LLAMA, pytest.param(STAND_IN, marks=pytest.mark.trtllm_stand_in)])
def test_the_catching_tests_pass_through_the_proxy_without_a_fault(request, server, tmp_path):
    """Every catching test of the server's rows but the migration gate's (those pass without a proxy in CI's migration
    step: a clean proxy in front of them would cost another Triton session), with the options their rows give, on
    CLEAN_ARTICLES articles: the /v1 accuracy test's clean verdict is inconclusive on a dozen as on four (a warning,
    which passes), and the fault's run on its row's articles shows that it can fail. On the stand-in the /v1 perf test
    must have taken its exact path: lengths held by ignore_eos, tokens counted by the streamed usage."""
    up = _upstream(request, server)
    rows = [row for row in FAULTS.values() if row.get("server", LLAMA) == server and _v1_nodes(row)]
    proxy = FaultProxy(up.url, None)
    report = tmp_path / "report.json"
    try:
        nodes = sorted({n for row in rows for n in _v1_nodes(row)})
        given = {tuple(row.get("options", ())): None for row in rows}
        options = (*(o for row_options in given for o in row_options), "--accuracy-samples", str(CLEAN_ARTICLES))
        done = _run(up, proxy.start(), *nodes, options=(*options, "--triton-llm-report", str(report)))
    finally:
        proxy.stop()
    assert done.returncode == 0, done.stdout[-3000:]
    assert done.stdout.splitlines()[-1].startswith(f"{len(nodes)} passed"), done.stdout[-3000:]  # none skipped
    if server == STAND_IN:
        points = json.loads(report.read_text())["v1_perf"]
        exact = {(bool(p["stand_in"]), p["lengths_held_by"], p["tokens_from"].split()[0]) for p in points.values()}
        load_points = [n for n in nodes if "::test_load_point_over_v1[" in n]
        assert (len(points), exact) == (len(load_points), {(True, "ignore_eos", "usage")}), points


def _parts() -> list:
    """Each row as the runs that show it: its /v1 tests alone (CI's fault step runs these), and its migration gate
    tests with the row's Triton deployment beside them (marked triton_side: the full run's)."""
    parts = []
    for name, row in FAULTS.items():
        v1 = _v1_nodes(row)
        migration = [n for n in row["caught_by"] if n.startswith(MIGRATION_TESTS)]
        if v1:
            marks = [pytest.mark.trtllm_stand_in] if row.get("server") == STAND_IN else []
            parts.append(pytest.param(name, tuple(v1), None, marks=marks, id=f"{name}-v1" if migration else name))
        if migration:
            marks = [pytest.mark.triton_side]
            parts.append(
                pytest.param(name, tuple(migration), row["deployment"], marks=marks, id=f"{name}-migration" if v1 else name)
            )
    return parts


@pytest.mark.parametrize("fault, nodes, deployment", _parts())
def test_the_fault_fails_the_tests_that_catch_it(request, fault, nodes, deployment):
    up = _upstream(request, FAULTS[fault].get("server", LLAMA))
    proxy = FaultProxy(up.url, fault)
    try:
        done = _run(up, proxy.start(), *nodes, deployment=deployment, options=tuple(FAULTS[fault].get("options", ())))
    finally:
        proxy.stop()
    assert done.returncode == 1, done.stdout[-3000:]
    assert _failed(done) == sorted(nodes), done.stdout[-3000:]


def test_llama_cpp_pythons_own_default_of_interrupting_streams_fails_the_concurrent_streams_check(gguf, tmp_path):
    """A real server setting, no proxy: llama-cpp-python's default interrupt_requests ends a running stream with
    [DONE] as soon as another request waits for the model."""
    server = llama_cpp_server.start(gguf, tmp_path / "llama.log", tmp_path / "run", Progress(), interrupt=True)
    try:
        node = "suites/test_v1_invariants.py::test_concurrent_streams_are_whole_and_end_as_they_do_alone"
        done = _run(Upstream(server.url), server.url, node)
    finally:
        server.stop()
    assert _failed(done) == [node], done.stdout[-3000:]
