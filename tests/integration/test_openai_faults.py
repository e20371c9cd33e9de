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
from pytest_triton_llm.stack.cache import EngineCache
from pytest_triton_llm.stack.lock import load_lock
from pytest_triton_llm.openai.fault_proxy import FAULTS_FILE, FaultProxy
from pytest_triton_llm.common.progress import Progress
from pytest_triton_llm.common.schema import load_toml

from ..conftest import BUILT_CACHE
from .conftest import ROOT

pytestmark = [pytest.mark.integration, pytest.mark.timeout(900)]
FAULTS = load_toml(FAULTS_FILE)["faults"]
MIGRATION_TESTS = "suites/test_migration.py::TestOverV1::"
V1_PERF_TESTS = "suites/test_perf.py::TestOverV1::"
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
    # no budget judges the stand-in's speed: its /v1 perf test's rows fail on counts, and its clean run measures
    yield Upstream(server.url, ("--tokenizer", str(server.tokenizer), "--perf-measure-only"))
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


def _timed(row: dict) -> bool:
    """Whether a catching test of the row is the /v1 perf test, which times the server."""
    return any(n.startswith(V1_PERF_TESTS) for n in _v1_nodes(row))


def _options(row: dict, up: Upstream) -> list[str]:
    """The row's pytest options, "{upstream}" the real server's own URL (behind the proxy)."""
    return [o.replace("{upstream}", up.url) for o in row.get("options", ())]


def _sessions(up: Upstream, server: str, timed: bool | None, part: tuple[int, int]) -> list[tuple[dict[str, str], list[str]]]:
    """The server's rows with /v1 tests (only the timed ones, or only the others, unless `timed` is None; of those, the
    k-th of every n for `part` (k, n)), as few sessions as their options allow: (options, fault names) each. Rows whose
    options agree share a session (an option a row does not give leaves its checks as they are: the engine's budgets,
    the dataset's articles); a row that gives an option another value needs a session of its own."""
    sessions: list[tuple[dict[str, str], list[str]]] = []
    rows = [(n, r) for n, r in FAULTS.items() if r.get("server", LLAMA) == server and _v1_nodes(r) and timed in (None, _timed(r))]
    for name, row in rows[part[0] :: part[1]]:
        given = _options(row, up)
        options = dict(zip(given[::2], given[1::2], strict=True))  # each option with its value
        agree = (s for s in sessions if all(s[0].get(k, v) == v for k, v in options.items()))
        if (session := next(agree, None)) is None:
            sessions.append(session := ({}, []))
        session[0].update(options)
        session[1].append(name)
    return sessions


def _one_session(up: Upstream, options: dict[str, str], faults: list[str], tmp_path):
    """Every row of `faults` in one pytest session through one proxy, its fault switched before each run, and each
    catching test once more without a fault: the runs' outcomes, the session's report, and the finished session."""
    proxy = FaultProxy(up.url, None)
    tmp_path.mkdir(parents=True, exist_ok=True)
    plan, results, report = tmp_path / "plan.json", tmp_path / "results.jsonl", tmp_path / "report.json"
    runs: dict[str, list[str]] = {}
    for fault in faults:
        for node in _v1_nodes(FAULTS[fault]):
            runs.setdefault(node, []).append(fault)
    plan.write_text(json.dumps({"switch_url": proxy.switch_url, "results": str(results), "runs": runs}))
    flat = tuple(o for pair in options.items() for o in pair)
    session = ("-p", "tests.integration.v1_fault_session", "--v1-fault-plan", str(plan), "--triton-llm-report", str(report))
    try:
        done = _run(up, proxy.start(), *runs, options=(*flat, *session))
    finally:
        proxy.stop()
    assert results.exists(), done.stdout[-3000:] + done.stderr[-3000:]
    outcomes = [json.loads(line) for line in results.read_text().splitlines()]
    assert len(outcomes) == sum(len(f) + 1 for f in runs.values()), done.stdout[-3000:]  # every planned run ran
    return outcomes, json.loads(report.read_text()), done


# The stand-in's rows in two halves, which xdist runs on two workers: in one they were Quickstart 2's longest test
# (447 s on 2 cores, 2026-12-02; the stand-in decodes about 15 tokens/s there, its float32 weights read per token).
SESSIONS = [
    pytest.param(LLAMA, False, (0, 1), id=LLAMA),
    pytest.param(LLAMA, True, (0, 1), id=f"{LLAMA}-timed"),
    *(
        pytest.param(STAND_IN, None, (k, 2), marks=pytest.mark.trtllm_stand_in, id=f"{STAND_IN}-{k + 1}-of-2")
        for k in range(2)  # no budget judges the stand-in
    ),
]


@pytest.mark.parametrize("server, timed, part", SESSIONS)
def test_each_fault_fails_the_tests_that_catch_it_and_they_pass_without_it(request, server, timed, part, tmp_path):
    """The server's rows (but the migration gate's tests, which need a Triton deployment: triton_side below) in as
    few pytest sessions as their options allow, usually one: each catching test runs under each fault whose row names
    it, then without a fault (the clean run: it must pass, not skip). On llama-cpp-python the rows caught by the /v1
    perf test run in a session of their own: their options (the engine, rounds paired with the server behind the
    proxy) are not the other rows'. On the stand-in the /v1 perf test's clean run must have taken its exact path:
    lengths held by ignore_eos, tokens counted by the streamed usage."""
    up = _upstream(request, server)
    problems = []
    for i, (options, faults) in enumerate(_sessions(up, server, timed, part)):
        outcomes, report, done = _one_session(up, options, faults, tmp_path / str(i))
        for o in outcomes:  # under a fault a run must fail; without one it must pass
            if o["outcome"] != ("failed" if o["fault"] else "passed"):
                under = f"under {o['fault']}" if o["fault"] else "without a fault"
                problems.append(f"{o['nodeid']} {o['outcome']} {under}")
        problems += [line for line in done.stdout.splitlines() if problems and line.startswith("FAILED ")]
        if server == STAND_IN and (load_points := {o["nodeid"] for o in outcomes if "::test_load_point_over_v1[" in o["nodeid"]}):
            points = report["v1_perf"]
            exact = {(bool(p["stand_in"]), p["lengths_held_by"], p["tokens_from"].split()[0]) for p in points.values()}
            assert (len(points), exact) == (len(load_points), {(True, "ignore_eos", "usage")}), points
    assert not problems, "\n".join(problems)


@pytest.mark.triton_side
@pytest.mark.parametrize("fault", [name for name, row in FAULTS.items() if "deployment" in row])
def test_the_fault_fails_the_migration_gate_tests_that_catch_it(request, fault):
    """The row's migration gate tests, with its Triton deployment beside the proxy (about 2 minutes each: the full
    run's; CI's migration step runs the gate without a fault)."""
    row = FAULTS[fault]
    up = _upstream(request, row.get("server", LLAMA))
    nodes = [n for n in row["caught_by"] if n.startswith(MIGRATION_TESTS)]
    proxy = FaultProxy(up.url, fault)
    try:
        done = _run(up, proxy.start(), *nodes, deployment=row["deployment"], options=tuple(_options(row, up)))
    finally:
        proxy.stop()
    assert done.returncode == 1, done.stdout[-3000:]
    assert _failed(done) == sorted(nodes), done.stdout[-3000:]


def test_llama_cpp_pythons_own_default_of_interrupting_streams_fails_the_concurrent_streams_check(gguf, tmp_path):
    """A real server setting, no proxy: llama-cpp-python's default interrupt_requests ends a running stream with
    [DONE] as soon as another request waits for the model."""
    server = llama_cpp_server.start(gguf, tmp_path / "llama.log", tmp_path / "run", Progress(), interrupt=True)
    try:
        node = "suites/test_invariants.py::TestOverV1::test_concurrent_streams_are_whole_and_end_as_they_do_alone"
        done = _run(Upstream(server.url), server.url, node)
    finally:
        server.stop()
    assert _failed(done) == [f"{node}[chat]", f"{node}[completions]"], done.stdout[-3000:]  # both endpoints' streams
