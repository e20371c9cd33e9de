"""pytest-triton-llm: options, markers, hooks and fixtures. The logic lives in the modules it wires."""

from __future__ import annotations

import signal
import sys
from dataclasses import replace

import pytest

from . import distributed
from . import options
from ..accuracy import options as accuracy_options
from ..stack.engines import backend_of
from ..common.errors import TritonLLMError
from ..stack.lock import DUMMY_LABEL
from ..openai.target import OpenAITarget
from ..perf import options as perf_options
from ..common.progress import Progress
from ..stack.runtimes import RUNTIMES
from .selection import AtEntry, has_dummy_weights, marked_gpu_by_code, refs_of, untrained
from .session import TritonLLMSession
from .terminal import skip_reasons, summary_lines

MARKERS = {
    "functional": "ensemble contract and generation semantics",
    "streaming": "token streaming (decoupled models)",
    "early_stop": "stopping or cancelling requests early",
    "batching": "V1 vs in-flight batching",
    "lora": "LoRA adapters in mixed batches",
    "accuracy": "ROUGE on CNN/DailyMail and output drift",
    "perf": "throughput and latency budgets",
    "robustness": "malformed and hostile requests",
    "migration": "an engine deployment vs the llmapi one of the same checkpoint (TensorRT engine -> PyTorch migration)",
    "invariants": "serving invariants on every deployment and entry model: streams agree with unary answers, counts are true",
    "regressions": "named checks for known upstream bugs (each test names its issue)",
    "properties": "the property matrix: every request input's effect on every path and mode (fixtures/properties.toml)",
    "guided": "guided decoding (structured output): the property matrix's guided cells on every path",
    "speculative": "speculative decoding: draft tokens verified by the target, answers equal to standard decoding",
    "health": "health that tells the truth after the engine dies",
    "multimodal": "images through a multimodal deployment's encoders, ensemble and BLS",
    "gpu": "needs an NVIDIA GPU",
    **{marker: why for runtime in RUNTIMES.values() for marker, why in runtime.markers.items()},
}
OPENAI_FIXTURE = "openai_target"  # the /v1 suites' endpoint (--openai-url)
# parametrized from the lock
DEPLOYMENT_FIXTURES = (
    "triton_llm",
    "triton_llm_per_engine",
    "triton_llm_pair",
    "triton_llm_migration",
    "triton_llm_speculation",
)
REQUIRES = "triton_llm_requires"  # @pytest.mark.triton_llm_requires("streaming", ...)
STAND_IN_ONLY = "triton_llm_stand_in_only"  # @pytest.mark.triton_llm_stand_in_only("why real engines differ")
TRAINED_WEIGHTS = "triton_llm_trained_weights"  # @pytest.mark.triton_llm_trained_weights("why random ones will not do")
LOAD = "triton_llm_load"  # @pytest.mark.triton_llm_load: stresses the server (skipped on a remote one unless allowed)
ENTRIES = "triton_llm_entry_models"  # @pytest.mark.triton_llm_entry_models: once per entry model (ensemble, BLS)
# @pytest.mark.triton_llm_checks_declared_inputs: the test reads the served model's declared inputs and skips, naming
# the input, where one is absent (the property matrix), so it needs no capability declared for family-dependent inputs
CHECKS_DECLARED = "triton_llm_checks_declared_inputs"
STOP_PREFIX = "triton-llm: "  # stop_session's lines
_SESSION = pytest.StashKey[TritonLLMSession]()
_ACCURACY = pytest.StashKey[accuracy_options.AccuracyOptions]()
_PERF = pytest.StashKey[perf_options.PerfOptions]()
_SKIPS = pytest.StashKey[list]()
LOG_TAIL_LINES = 40


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("triton-llm", "Triton + TensorRT-LLM suites (pytest-triton-llm)")
    options.add_options(group)
    accuracy_options.add_options(group)
    perf_options.add_options(group)


def _progress_writer(config: pytest.Config):
    def write(line: str) -> None:
        capman = config.pluginmanager.getplugin("capturemanager")
        reporter = config.pluginmanager.getplugin("terminalreporter")
        if capman is None or reporter is None:
            print(line, file=sys.stderr, flush=True)
            return
        with capman.global_and_fixture_disabled():
            reporter.ensure_newline()
            reporter.write_line(line)

    return write


def pytest_configure(config: pytest.Config) -> None:
    for name, description in MARKERS.items():
        config.addinivalue_line("markers", f"{name}: {description}")
    config.addinivalue_line(
        "markers", f"{REQUIRES}(*capabilities): run only on deployments that have them (v1, inflight, streaming, cancellation)"
    )
    config.addinivalue_line(
        "markers",
        f"{STAND_IN_ONLY}(reason): checks what only the reference stand-in does; skipped with the reason on real engines",
    )
    config.addinivalue_line(
        "markers",
        f"{TRAINED_WEIGHTS}(reason): judges what the model says (ROUGE, a known answer); skipped with the "
        "reason on engines of dummy weights (lock source 'dummy')",
    )
    config.addinivalue_line(
        "markers",
        f"{LOAD}: puts the server under stress (floods, hundreds of clients, cache eviction); skipped on a "
        "server this session did not start (--triton-url) unless --triton-allow-load",
    )
    config.addinivalue_line(
        "markers",
        f"{CHECKS_DECLARED}: sends only inputs the served model declares (it reads them, and skips naming one that is "
        "absent), so the harness does not ask it to declare capabilities",
    )
    config.addinivalue_line(
        "markers",
        f"{ENTRIES}: run once per entry model a deployment serves (ensemble, tensorrt_llm_bls); the client's "
        "text requests go to that model",
    )
    try:
        core = options.Options.from_config(config)
        config.stash[_ACCURACY] = accuracy_options.AccuracyOptions.from_config(config)
        config.stash[_PERF] = perf_options.PerfOptions.from_config(config)
        session = TritonLLMSession(core, Progress(_progress_writer(config)))
        if against := config.stash[_PERF].against:  # a name the lock lacks stops the run before any server starts
            session.reference_ref(against)
    except TritonLLMError as exc:  # one line naming what to fix, exit code 4
        raise pytest.UsageError(str(exc)) from None
    config.stash[_SESSION] = session
    _stop_on_sigterm(config)


def _stop_on_sigterm(config: pytest.Config) -> None:
    """SIGTERM (CI cancelling a job) ends the session like Ctrl-C: teardown stops the servers."""

    def terminate(signum, frame):
        raise KeyboardInterrupt("terminated by SIGTERM")

    previous = signal.signal(signal.SIGTERM, terminate)

    def restore() -> None:
        signal.signal(signal.SIGTERM, previous)

    config.add_cleanup(restore)


@pytest.hookimpl(optionalhook=True)
def pytest_xdist_make_scheduler(config: pytest.Config, log):
    """pytest-xdist: each worker gets whole deployments (see distributed.py)."""
    return distributed.make_scheduler(config, log, config.stash[_SESSION].schedule_groups())


@pytest.hookimpl(optionalhook=True)
def pytest_testnodedown(node, error) -> None:
    """pytest-xdist: a worker finished; fold its report into the controller's."""
    output = getattr(node, "workeroutput", {})
    if output.get(distributed.REPORT_KEY):
        node.config.stash[_SESSION].report.merge(output[distributed.REPORT_KEY])
    if str(output.get("shouldstop") or "").startswith(STOP_PREFIX):  # stop_session's line, in a worker
        node.config.stash[_SESSION].stopped_by_setup = True


def pytest_report_header(config: pytest.Config) -> list[str]:
    state = config.stash.get(_SESSION, None)
    return state.header_lines() if state is not None else []


def pytest_sessionstart(session: pytest.Session) -> None:
    session.config.stash[_SESSION].start()


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    wanted = [name for name in DEPLOYMENT_FIXTURES if name in metafunc.fixturenames]
    if not wanted:
        return
    state = metafunc.config.stash[_SESSION]
    if not state.deployments_known:  # said once when collection ends (one line, exit 4), not an error per module
        metafunc.parametrize(
            wanted[0],
            [pytest.param(None, marks=pytest.mark.skip(reason=state.missing_lock_message()))],
            ids=["no-lock"],
            indirect=True,
            scope="session",
        )
        return
    needs = {cap for mark in metafunc.definition.iter_markers(REQUIRES) for cap in mark.args}
    entries = metafunc.definition.get_closest_marker(ENTRIES) is not None
    for name in wanted:
        chosen, missing = state.choices(name, needs, entries)
        params = [pytest.param(c.value, marks=_deployment_marks(state, c)) for c in chosen]
        ids = [c.id for c in chosen]
        if not params:  # an honest skip that says which deployments were selected
            params, ids = [pytest.param(None, marks=pytest.mark.skip(reason=missing))], ["no-deployment"]
        metafunc.parametrize(name, params, ids=ids, indirect=True, scope="session")


def _deployment_marks(state: TritonLLMSession, choice) -> list:
    """A parameter's skip (with its reason), the `gpu` marker where its deployment runs on a GPU (a real engine), and
    the runtime's markers (`container` where the servers run in containers): `-m "not gpu"` leaves those out."""
    marks = [pytest.mark.skip(reason=choice.skip)] if choice.skip else []
    refs = refs_of(choice.value)
    if any(backend_of(r.engine.backend).needs_gpu and not state.is_stand_in(r) for r in refs):
        marks.append(pytest.mark.gpu)
        if not marks[:-1] and (no_gpu := state.gpu_missing()):  # a GPU engine on a host without one: skipped, not errored
            marks.append(pytest.mark.skip(reason=no_gpu))
    if refs:
        marks += [getattr(pytest.mark, marker) for marker in state.runtime_class.markers]
    return marks


@pytest.hookimpl(trylast=True)
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """After pytest's own ordering, tests of one deployment run together (in that order), so that a server starts
    once per deployment, not once per switch between parameters (entry models) of several. Tests marked
    triton_llm_stand_in_only (also on one parameter) are skipped, with their reason, on deployments whose engine
    is not the stand-in: what they check holds for the stand-in, not for real TensorRT-LLM. Tests marked
    triton_llm_trained_weights are skipped, with their reason, on engines of dummy weights, and every test of such an
    engine carries the JUnit property triton_llm.weights = "dummy weights". On a remote server (a shared one,
    --triton-url), tests marked triton_llm_load are skipped unless --triton-allow-load. Tests marked `gpu` by their
    own code (not through a GPU engine's deployment) are skipped, with the reason, where no GPU serves."""
    items.sort(key=lambda item: tuple(r.id for r in _refs(item)))
    state = config.stash[_SESSION]
    _deselect_by_endpoint(config, items, state)
    if (refused := state.load_refused()) is not None:
        polite = pytest.mark.skip(reason=refused)
        for item in items:
            if item.get_closest_marker(LOAD) is not None:
                item.add_marker(polite)
    no_gpu = state.gpu_missing()
    for item in items:
        refs = _refs(item)
        if len(refs) == 1 and item.get_closest_marker("skip") is None:  # a parameter's own requires (a case's marks)
            needs = {cap for mark in item.iter_markers(REQUIRES) for cap in mark.args}
            entry = getattr(_params(item).get("triton_llm"), "model", "ensemble")
            if why := state.lacking(refs[0], needs | {refs[0].options.batching}, entry):
                item.add_marker(pytest.mark.skip(reason=why))
        if state.fault is not None:  # JUnit readers see it beside every result
            item.user_properties.append(("triton_llm.stand_in_fault", state.fault.name))
        if no_gpu and marked_gpu_by_code(item):
            item.add_marker(pytest.mark.skip(reason=no_gpu))
        if any(has_dummy_weights(r) for r in refs):  # JUnit readers (CI dashboards) see it beside the perf numbers
            item.user_properties.append(("triton_llm.weights", DUMMY_LABEL))
        trained = item.get_closest_marker(TRAINED_WEIGHTS)
        if trained is not None and (why := untrained(refs, trained.args[0] if trained.args else "needs trained weights")):
            item.add_marker(pytest.mark.skip(reason=why))
        mark = item.get_closest_marker(STAND_IN_ONLY)
        if mark is None or not refs:
            continue
        real = sorted({r.engine.backend for r in refs if not state.is_stand_in(r)})
        if real:
            item.add_marker(
                pytest.mark.skip(
                    reason=f"checks the reference stand-in only, not {', '.join(real)} engines: "
                    f"{mark.args[0] if mark.args else 'real engines differ'}"
                )
            )


def _deselect_by_endpoint(config: pytest.Config, items: list[pytest.Item], state: TritonLLMSession) -> None:
    """The /v1 tests (fixture openai_target) run only with --openai-url; with it and no --deployment, the run is the
    endpoint's, and tests that talk to Triton deployments only are left out (the /v1 migration gate, which talks to
    both, stays: --deployment picks its Triton side)."""
    openai, chosen = state.options.openai, state.options.deployments
    if openai is not None and chosen:
        return
    # without --openai-url the /v1 tests go; with it (and no --deployment) every other one
    deselect(config, items, [item for item in items if (OPENAI_FIXTURE in getattr(item, "fixturenames", ())) == (openai is None)])


def deselect(config: pytest.Config, items: list[pytest.Item], gone: list[pytest.Item]) -> None:
    """Leave `gone` out of the run as deselected (pytest counts them so), not skipped."""
    if gone:
        config.hook.pytest_deselected(items=gone)
        left = set(items) - set(gone)
        items[:] = [item for item in items if item in left]


def pytest_collection_finish(session: pytest.Session) -> None:
    """What the chosen runtime lacks here (the docker SDK, a tritonserver) is one line and exit 4 as soon as a
    collected test needs a served deployment; runs that need none (or only collect) go on."""
    state = session.config.stash[_SESSION]
    needs_deployment = any(name in getattr(item, "fixturenames", ()) for item in session.items for name in DEPLOYMENT_FIXTURES)
    if needs_deployment and not state.deployments_known:
        raise pytest.UsageError(state.missing_lock_message())
    if session.config.option.collectonly:  # what would be skipped, and why: e.g. what an image's family lacks
        session.config.stash[_SKIPS] = skip_reasons(session.items)
        return
    if state.runtime_missing is not None and needs_deployment:
        raise pytest.UsageError(state.runtime_missing)


def stop_session(session: pytest.Session, exc: TritonLLMError) -> None:
    """A setup problem met while serving (a daemon, a download, a server that does not start): said once, as one line,
    and the session ends with the usage-error exit code; every server it started is stopped on the way out."""
    line = STOP_PREFIX + str(exc).partition("\n")[0]  # the rest (a log's error lines) is in the log the line names
    # In an xdist worker, pytest.exit ends the worker mid-test: its controller sees only an INTERNALERROR naming the
    # test. The line it does pass on is the worker's shouldstop, which stops the whole run with it.
    if distributed.is_worker(session.config):
        session.shouldstop = line
    pytest.exit(line, returncode=pytest.ExitCode.USAGE_ERROR)


def _serve(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory):
    state = request.config.stash[_SESSION]
    value = request.param
    try:
        served = state.serve(value.ref if isinstance(value, AtEntry) else value, tmp_path_factory)
    except TritonLLMError as exc:
        stop_session(request.session, exc)
    view = served.at_entry(value.model) if isinstance(value, AtEntry) else served
    yield view
    if view is not served:
        view.client.close()  # an open keep-alive connection would hold the server's shutdown
    state.release(served.id)


@pytest.fixture(scope="session")
def triton_llm(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory):
    """A deployment served by a running tritonserver (one per deployment, reused by its tests)."""
    yield from _serve(request, tmp_path_factory)


@pytest.fixture(scope="session")
def triton_llm_per_engine(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory):
    """One served deployment per engine (the in-flight one when selected: requests run concurrently)."""
    yield from _serve(request, tmp_path_factory)


def _serve_pair(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory):
    state = request.config.stash[_SESSION]
    try:
        pair = tuple(state.serve(ref, tmp_path_factory) for ref in request.param)
    except TritonLLMError as exc:
        stop_session(request.session, exc)
    yield pair
    for served in pair:
        state.release(served.id)


@pytest.fixture(scope="session")
def triton_llm_pair(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory):
    """(v1, inflight) deployments of one engine, both served, for side-by-side comparisons."""
    yield from _serve_pair(request, tmp_path_factory)


@pytest.fixture(scope="session")
def triton_llm_migration(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory):
    """(engine deployment, llmapi deployment) of one checkpoint, both served: the engine -> PyTorch migration gate."""
    yield from _serve_pair(request, tmp_path_factory)


@pytest.fixture(scope="session")
def triton_llm_speculation(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory):
    """(llmapi deployment that speculates, llmapi deployment of its engine that does not), both served."""
    yield from _serve_pair(request, tmp_path_factory)


@pytest.fixture(scope="session")
def openai_target(request: pytest.FixtureRequest) -> OpenAITarget:
    """The OpenAI-compatible endpoint of --openai-url: its model (from /v1/models) and its family's contract."""
    state = request.config.stash[_SESSION]
    assert state.options.openai is not None, "the /v1 tests are deselected without --openai-url"
    return _open_target(request.session, state.options.openai, "OpenAI target")


@pytest.fixture(scope="session")
def openai_perf_reference(request: pytest.FixtureRequest) -> OpenAITarget | None:
    """--perf-against-url's endpoint, measured beside --openai-url's in the /v1 perf test; None without it."""
    state, url = request.config.stash[_SESSION], request.config.stash[_PERF].against_url
    if url is None:
        return None
    assert state.options.openai is not None, "--perf-against-url is refused without --openai-url"
    reference = replace(state.options.openai, url=url.rstrip("/"), model=None, family=None)
    return _open_target(request.session, reference, "perf reference")


def _open_target(session: pytest.Session, options, label: str) -> OpenAITarget:
    """The endpoint of `options` (its model and family read from /v1/models), said on the terminal as `label`; a
    failure stops the session in one line."""
    state = session.config.stash[_SESSION]
    try:
        target = OpenAITarget(options, engine=state.openai_engine)
    except TritonLLMError as exc:
        stop_session(session, exc)
    state.progress.say(f"{label}: {target.describe()}")
    return target


@pytest.fixture
def triton_llm_own_server(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory):
    """`own(served)`: the same deployment on a server of its own that no other test or session shares, stopped after
    the test: for a test that breaks what serves (the health check kills its engine)."""
    state, started = request.config.stash[_SESSION], []

    def own(served):
        if state.attaches:
            pytest.skip("the server is not one this session started: a test that breaks it would break it for everyone")
        try:
            twin = state.serve(replace(served.ref, name=f"{served.ref.name} (own server)"), tmp_path_factory, own=True)
        except TritonLLMError as exc:
            # a twin of a deployment that serves already: its failure is this test's, said in one line, and the
            # session goes on (ended from inside a test, an xdist worker's session ends with the line lost: an
            # INTERNALERROR naming the test and nothing else, CI 2026-12-03)
            pytest.fail(f"triton-llm: its own server did not start: {str(exc).partition(chr(10))[0]}", pytrace=False)
        started.append(twin.id)
        return twin

    yield own
    for deployment_id in started:
        state.discard(deployment_id)


@pytest.fixture(scope="session")
def triton_llm_engine_cache(request: pytest.FixtureRequest):
    """The engine cache of this session (--engine-cache), for suites that build artifacts like adapters."""
    return request.config.stash[_SESSION].cache


@pytest.fixture(scope="session")
def triton_llm_progress(request: pytest.FixtureRequest):
    """Progress lines on the terminal, past pytest's capture, for suites' long work."""
    return request.config.stash[_SESSION].progress


@pytest.fixture(scope="session")
def triton_llm_accuracy_options(request: pytest.FixtureRequest) -> accuracy_options.AccuracyOptions:
    """The --accuracy-* options, checked."""
    return request.config.stash[_ACCURACY]


@pytest.fixture(scope="session")
def triton_llm_perf_options(request: pytest.FixtureRequest) -> perf_options.PerfOptions:
    """The --perf-* options, checked (the --perf-compare baseline read)."""
    return request.config.stash[_PERF]


@pytest.fixture(scope="session")
def triton_llm_perf_reference(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory):
    """--perf-against's deployment, served clean by a server of its own for the whole session; None without it."""
    state, against = request.config.stash[_SESSION], request.config.stash[_PERF].against
    if against is None:
        yield None
        return
    try:
        served = state.serve(state.reference_ref(against), tmp_path_factory, clean=True)
    except TritonLLMError as exc:
        stop_session(request.session, exc)
    yield served
    state.release(served.id)


def perf_settings(config: pytest.Config) -> perf_options.PerfOptions:
    """The --perf-* options where no fixture reaches (a conftest's pytest_generate_tests)."""
    return config.stash[_PERF]


@pytest.fixture(scope="session")
def triton_llm_report(request: pytest.FixtureRequest):
    """The run report: `record(deployment_id, key, value)` and `record_run(key, value)`."""
    return request.config.stash[_SESSION].report


@pytest.hookimpl(wrapper=True)
def pytest_runtest_call(item: pytest.Item):
    state = item.config.stash[_SESSION]
    state.note_test_start()
    funcargs = getattr(item, "funcargs", {})
    served_all = [s for name in DEPLOYMENT_FIXTURES for s in _as_tuple(funcargs.get(name)) if s is not None]
    for served in served_all:
        if not served.server.alive():  # fail at once with the log (attached below), rather than time out
            code = served.server.process.returncode if served.server.process else None
            pytest.fail(
                f"tritonserver of {served.id} is gone (exit code {code}); its log: {served.server.log_path}", pytrace=False
            )
        served.client.sent.clear()
    result = yield
    needs = {cap for mark in item.iter_markers(REQUIRES) for cap in mark.args}
    checked = item.get_closest_marker(CHECKS_DECLARED) is not None
    for served in served_all if not checked else ():  # the harness's own check: an input that some families lack
        # needs its capability declared
        if undeclared := state.undeclared_inputs(served, needs):
            pytest.fail(
                f"harness: this test sends {', '.join(undeclared)} without declaring the capability that needs "
                f"it ({REQUIRES} in compat.toml [capability_inputs]): on a family without it the test would fail "
                "instead of being skipped",
                pytrace=False,
            )
    return result


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo):
    report = yield
    funcargs = getattr(item, "funcargs", {})
    served = [s for name in DEPLOYMENT_FIXTURES for s in _as_tuple(funcargs.get(name)) if s is not None]
    if report.failed:
        for deployment in served:
            title = f"tritonserver log of {deployment.id} (last {LOG_TAIL_LINES} lines, {deployment.server.log_path})"
            report.sections.append((title, deployment.server.log_tail(LOG_TAIL_LINES)))
    if report.when == "call" or report.outcome != "passed":
        deployment = " vs ".join([r.id for r in _refs(item)] + _endpoint(item)) or None
        outcome = "error" if report.when != "call" and report.failed else report.outcome
        message = None if report.passed else _short(report)
        markers = sorted(m.name for m in item.iter_markers() if m.name in MARKERS)
        item.config.stash[_SESSION].report.add_test(item.nodeid, outcome, report.duration, deployment, markers, message)
    return report


def _params(item: pytest.Item) -> dict:
    """A test's parameters (none unless it is parametrized)."""
    callspec = getattr(item, "callspec", None)
    return callspec.params if callspec else {}


def _refs(item: pytest.Item) -> list:
    """The deployments a test's parameters serve."""
    params = _params(item)
    return [r for name in DEPLOYMENT_FIXTURES for r in refs_of(params.get(name))]


def _endpoint(item: pytest.Item) -> list[str]:
    """The OpenAI endpoint a /v1 test talks to, as the report names it."""
    openai = item.config.stash[_SESSION].options.openai
    return [f"openai {openai.url}"] if openai is not None and OPENAI_FIXTURE in getattr(item, "fixturenames", ()) else []


def _as_tuple(value) -> tuple:
    return value if isinstance(value, tuple) else (value,)


def _short(report: pytest.TestReport) -> str:
    if report.skipped and isinstance(report.longrepr, tuple):
        return report.longrepr[2]
    text = report.longreprtext or ""
    return text.strip().splitlines()[-1] if text.strip() else ""


def pytest_sessionfinish(session: pytest.Session) -> None:
    state = session.config.stash[_SESSION]
    state.stop_servers()
    if state.stopped_by_setup:  # xdist says a worker's stop is an interruption: it is the usage error it is
        session.exitstatus = pytest.ExitCode.USAGE_ERROR
    if distributed.is_worker(session.config):  # the controller writes the one report
        distributed.send_to_controller(session.config, state.report.document(state.startup_s, state.first_test_s))
    else:
        state.publish(session.config.stash[_PERF])


def pytest_terminal_summary(terminalreporter, config: pytest.Config) -> None:
    state = config.stash.get(_SESSION, None)
    if state is None or distributed.is_worker(config):  # the controller prints the merged summary
        return
    lines = config.stash.get(_SKIPS, None) or summary_lines(state, config)
    if lines:
        terminalreporter.write_sep("=", "triton-llm")
        for line in lines:
            terminalreporter.write_line(line)
