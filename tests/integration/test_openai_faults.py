"""Each /v1 check can fail for the stack's reasons: every fault of fixtures/openai_faults.toml, injected by the fault
proxy in front of a real /v1 server (llama-cpp-python on the embedded GGUF), fails the test its row names, and the
same tests pass through the proxy without a fault. Skipped (failed under TRITON_LLM_CI_TOOLS=1) without the llama-cpp
extra."""

from __future__ import annotations

import subprocess
import sys

import pytest

from pytest_triton_llm import llama_cpp_server
from pytest_triton_llm.openai_fault_proxy import FAULTS_FILE, FaultProxy
from pytest_triton_llm.progress import Progress
from pytest_triton_llm.schema import load_toml

from .conftest import ROOT

pytestmark = [pytest.mark.integration, pytest.mark.timeout(900)]
FAULTS = load_toml(FAULTS_FILE)["faults"]
MIGRATION_TESTS = "suites/test_v1_migration.py::"
CLEAN_ARTICLES = 4  # the last --accuracy-samples given counts


@pytest.fixture(scope="module")
def upstream(gguf, tmp_path_factory):
    run = tmp_path_factory.mktemp("llama")
    server = llama_cpp_server.start(gguf, run / "llama.log", run / "run", Progress())
    yield server.url
    server.stop()


def _run(url: str, *node_ids: str, deployment: str | None = None, options: tuple[str, ...] = ()) -> subprocess.CompletedProcess:
    """The suites' tests `node_ids` against `url`; with `deployment`, the migration gate's Triton side beside it."""
    argv = [sys.executable, "-m", "pytest", *node_ids, "--openai-url", url, "-p", "no:cacheprovider", "-q", "-rf"]
    argv += ["--deployment", deployment] if deployment else []
    return subprocess.run([*argv, *options], cwd=ROOT, capture_output=True, text=True, timeout=600)


def _failed(done: subprocess.CompletedProcess) -> list[str]:
    return sorted(line.split(" - ")[0].removeprefix("FAILED ") for line in done.stdout.splitlines() if line.startswith("FAILED "))


def _v1_nodes(row: dict) -> list[str]:
    """The row's catching tests that need no Triton deployment."""
    return [n for n in row["caught_by"] if not n.startswith(MIGRATION_TESTS)]


def test_the_catching_tests_pass_through_the_proxy_without_a_fault(upstream):
    """Every catching test but the migration gate's (those pass without a proxy in CI's migration step: a clean proxy
    in front of them would cost another Triton session), with the options their rows give, on CLEAN_ARTICLES
    articles: the /v1 accuracy test's clean verdict is inconclusive on a dozen as on four (a warning, which passes),
    and the fault's run on its row's articles shows that it can fail."""
    proxy = FaultProxy(upstream, None)
    try:
        nodes = sorted({n for row in FAULTS.values() for n in _v1_nodes(row)})
        given = {tuple(row.get("options", ())): None for row in FAULTS.values() if _v1_nodes(row)}
        options = (*(o for row_options in given for o in row_options), "--accuracy-samples", str(CLEAN_ARTICLES))
        done = _run(proxy.start(), *nodes, options=options)
    finally:
        proxy.stop()
    assert done.returncode == 0, done.stdout[-3000:]
    assert done.stdout.splitlines()[-1].startswith(f"{len(nodes)} passed"), done.stdout[-3000:]  # none skipped


def _parts() -> list:
    """Each row as the runs that show it: its /v1 tests alone (CI's fault step runs these), and its migration gate
    tests with the row's Triton deployment beside them (marked triton_side: the full run's)."""
    parts = []
    for name, row in FAULTS.items():
        v1 = _v1_nodes(row)
        migration = [n for n in row["caught_by"] if n.startswith(MIGRATION_TESTS)]
        if v1:
            parts.append(pytest.param(name, tuple(v1), None, id=f"{name}-v1" if migration else name))
        if migration:
            marks = [pytest.mark.triton_side]
            parts.append(
                pytest.param(name, tuple(migration), row["deployment"], marks=marks, id=f"{name}-migration" if v1 else name)
            )
    return parts


@pytest.mark.parametrize("fault, nodes, deployment", _parts())
def test_the_fault_fails_the_tests_that_catch_it(upstream, fault, nodes, deployment):
    proxy = FaultProxy(upstream, fault)
    try:
        done = _run(proxy.start(), *nodes, deployment=deployment, options=tuple(FAULTS[fault].get("options", ())))
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
        done = _run(server.url, node)
    finally:
        server.stop()
    assert _failed(done) == [node], done.stdout[-3000:]
