"""pytest-triton-llm: options, markers, hooks and fixtures. The logic lives in the modules it wires."""

from __future__ import annotations

import signal
import sys
from pathlib import Path

import pytest

from . import distributed
from .accuracy.drift import DriftError, check_paths
from .lock import LockError
from .perf.baseline import BaselineError, FailRule, load_baseline
from .progress import Progress
from .session import DEFAULT_CACHE, DEFAULT_LOCK, OptionError, Options, TritonLLMSession
from .terminal import summary_lines

MARKERS = {
    "functional": "ensemble contract and generation semantics",
    "streaming": "token streaming (decoupled models)",
    "early_stop": "stopping or cancelling requests early",
    "batching": "V1 vs in-flight batching",
    "lora": "LoRA adapters in mixed batches",
    "accuracy": "ROUGE on CNN/DailyMail and output drift",
    "perf": "throughput and latency budgets",
    "robustness": "malformed and hostile requests",
    "gpu": "needs an NVIDIA GPU",
    "container": "needs docker and a Triton image",
}
DEPLOYMENT_FIXTURES = ("triton_llm", "triton_llm_per_engine", "triton_llm_pair")  # parametrized from the lock
REQUIRES = "triton_llm_requires"  # @pytest.mark.triton_llm_requires("streaming", ...)
_SESSION = pytest.StashKey[TritonLLMSession]()
PERF_FAIL_RULES = pytest.StashKey[list]()
LOG_TAIL_LINES = 40


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("triton-llm", "Triton + TensorRT-LLM suites (pytest-triton-llm)")
    group.addoption(
        "--triton-image",
        metavar="TAG",
        help="run tritonserver in containers of this image: YY.MM-trtllm (NGC tritonserver:YY.MM-trtllm-python-py3) "
        "or a full image reference",
    )
    group.addoption(
        "--gpus", metavar="IDS", default=None,
        help="GPUs for server and build containers: 'all' or ids such as 0,1 (default: all for tensorrtllm engines, "
        "none for reference ones)",
    )  # fmt: skip
    group.addoption(
        "--triton-runtime", choices=("container", "local"), default=None,
        help="container: start --triton-image from this host (the default with --triton-image); local: start "
        "tritonserver here, e.g. inside the serving image, checked against --triton-image's versions when given",
    )  # fmt: skip
    group.addoption(
        "--tritonserver", metavar="PATH",
        help="the local runtime's tritonserver (default: $TRITONSERVER, then /opt/tritonserver/bin/tritonserver, "
        "then the nvidia-pytriton wheel's)",
    )  # fmt: skip
    group.addoption(
        "--trtllm-examples", metavar="DIR",
        help="TensorRT-LLM's examples/ for tensorrtllm engine builds (default: the image's /app/examples or beside "
        "the installed tensorrt_llm)",
    )  # fmt: skip
    group.addoption("--triton-url", metavar="URL", help="test an already running server; no build, no start (not yet supported)")
    group.addoption("--engines-lock", metavar="PATH", help=f"pinned engines and deployments (default: ./{DEFAULT_LOCK})")
    group.addoption(
        "--engine-cache", metavar="DIR", default=DEFAULT_CACHE, help=f"where built engines are kept (default: {DEFAULT_CACHE})"
    )
    group.addoption("--rebuild-engines", action="store_true", help="rebuild the engines of this run even if cached")
    group.addoption(
        "--deployment",
        metavar="NAME",
        action="append",
        default=[],
        help="run only this deployment, e.g. smollm2-135m:v1 (repeatable)",
    )
    group.addoption("--triton-llm-report", metavar="PATH", help="write a JSON report of the run here")
    group.addoption(
        "--triton-start-timeout",
        metavar="SECONDS",
        type=float,
        default=300.0,
        help="how long a server may take to become ready (default: 300)",
    )
    # accuracy suite
    group.addoption(
        "--cnn-dataset",
        metavar="PATH",
        help="local CNN/DailyMail: MLPerf cnn_eval.json, or JSONL/parquet with article/highlights "
        "(default: the Hub's cnn_dailymail 3.0.0)",
    )
    group.addoption("--cnn-split", metavar="NAME", default="validation", help="Hub split (default: validation)")
    group.addoption(
        "--cnn-samples", metavar="N", type=int, help="use the first N articles (default: all of a local file, 100 from the Hub)"
    )
    group.addoption("--accuracy-save", metavar="PATH", help="save every article's output with engine and server identity")
    group.addoption("--accuracy-baseline", metavar="PATH", help="compare outputs with a file saved by --accuracy-save")
    group.addoption(
        "--accuracy-min-exact-match",
        metavar="PCT",
        type=float,
        default=90.0,
        help="least share of articles identical to the baseline (default: 90)",
    )
    # perf suite
    group.addoption(
        "--perf-workload", metavar="NAME", default="default", help="workload of fixtures/perf_workloads.toml (default: default)"
    )
    group.addoption("--perf-save", metavar="PATH", help="save this run's perf load points as a baseline")
    group.addoption("--perf-compare", metavar="PATH", help="compare load points with a baseline saved by --perf-save")
    group.addoption(
        "--perf-compare-fail",
        metavar="METRIC:PCT",
        action="append",
        default=[],
        help="fail a load point whose METRIC got worse than the baseline by more than PCT percent "
        "(e.g. output_tokens_per_s:10, latency_ms.p99:20; repeatable)",
    )
    group.addoption(
        "--accuracy-min-rouge-l",
        metavar="PCT",
        type=float,
        default=90.0,
        help="least mean ROUGE-L between outputs and baseline outputs (default: 90)",
    )


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
    opt = config.option
    options = Options(
        engines_lock=opt.engines_lock,
        engine_cache=opt.engine_cache,
        rebuild_engines=opt.rebuild_engines,
        deployments=tuple(opt.deployment),
        report=opt.triton_llm_report,
        perf_save=opt.perf_save,
        triton_image=opt.triton_image,
        gpus=opt.gpus,
        triton_runtime=opt.triton_runtime,
        tritonserver=opt.tritonserver,
        trtllm_examples=opt.trtllm_examples,
        triton_url=opt.triton_url,
        start_timeout_s=opt.triton_start_timeout,
    )
    try:
        session = TritonLLMSession(options, Progress(_progress_writer(config)))
        check_paths(opt.accuracy_save, opt.accuracy_baseline)
        config.stash[PERF_FAIL_RULES] = [FailRule.parse(rule) for rule in opt.perf_compare_fail]
        if opt.perf_compare:
            load_baseline(opt.perf_compare)
            if opt.perf_save and Path(opt.perf_save).resolve() == Path(opt.perf_compare).resolve():
                raise OptionError("--perf-save and --perf-compare name the same file: the baseline would be overwritten")
        elif opt.perf_compare_fail:
            raise OptionError("--perf-compare-fail needs --perf-compare BASELINE")
        if opt.cnn_samples is not None and opt.cnn_samples <= 0:
            raise OptionError("--cnn-samples must be > 0")
    except (LockError, OptionError, DriftError, BaselineError) as exc:
        raise pytest.UsageError(str(exc)) from None
    config.stash[_SESSION] = session
    _stop_on_sigterm(config)


def _stop_on_sigterm(config: pytest.Config) -> None:
    """SIGTERM (CI cancelling a job) ends the session like Ctrl-C: teardown stops the servers."""

    def terminate(signum, frame):
        raise KeyboardInterrupt("terminated by SIGTERM")

    previous = signal.signal(signal.SIGTERM, terminate)
    config.add_cleanup(lambda: signal.signal(signal.SIGTERM, previous))


@pytest.hookimpl(optionalhook=True)
def pytest_xdist_make_scheduler(config: pytest.Config, log):
    """pytest-xdist: each worker gets whole deployments (see distributed.py)."""
    return distributed.make_scheduler(config, log, config.stash[_SESSION].schedule_groups())


@pytest.hookimpl(optionalhook=True)
def pytest_testnodedown(node, error) -> None:
    """pytest-xdist: a worker finished; fold its report into the controller's."""
    document = getattr(node, "workeroutput", {}).get(distributed.REPORT_KEY)
    if document:
        node.config.stash[_SESSION].report.merge(document)


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
    if state.lock is None:
        pytest.fail(state.missing_lock_message(), pytrace=False)
    needs = {cap for mark in metafunc.definition.iter_markers(REQUIRES) for cap in mark.args}
    for name in wanted:
        params, ids, missing = state.parameters(name, needs)
        if not params:  # an honest skip that says which deployments were selected
            params, ids = [pytest.param(None, marks=pytest.mark.skip(reason=missing))], ["no-deployment"]
        metafunc.parametrize(name, params, ids=ids, indirect=True, scope="session")


def _serve(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory):
    state = request.config.stash[_SESSION]
    served = state.serve(request.param, tmp_path_factory)
    yield served
    state.release(served.id)


@pytest.fixture(scope="session")
def triton_llm(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory):
    """A deployment served by a running tritonserver (one per deployment, reused by its tests)."""
    yield from _serve(request, tmp_path_factory)


@pytest.fixture(scope="session")
def triton_llm_per_engine(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory):
    """One served deployment per engine (the in-flight one when selected: requests run concurrently)."""
    yield from _serve(request, tmp_path_factory)


@pytest.fixture(scope="session")
def triton_llm_pair(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory):
    """(v1, inflight) deployments of one engine, both served, for side-by-side comparisons."""
    state = request.config.stash[_SESSION]
    pair = tuple(state.serve(ref, tmp_path_factory) for ref in request.param)
    yield pair
    for served in pair:
        state.release(served.id)


@pytest.fixture(scope="session")
def triton_llm_engine_cache(request: pytest.FixtureRequest):
    """The engine cache of this session (--engine-cache), for suites that build artifacts like adapters."""
    return request.config.stash[_SESSION].cache


@pytest.fixture(scope="session")
def triton_llm_progress(request: pytest.FixtureRequest):
    """Progress lines on the terminal, past pytest's capture, for suites' long work."""
    return request.config.stash[_SESSION].progress


@pytest.fixture(scope="session")
def triton_llm_perf_fail_rules(request: pytest.FixtureRequest) -> list:
    """The parsed --perf-compare-fail METRIC:PCT rules."""
    return request.config.stash[PERF_FAIL_RULES]


@pytest.fixture(scope="session")
def triton_llm_report(request: pytest.FixtureRequest):
    """The run report: `record(deployment_id, key, value)` and `record_run(key, value)`."""
    return request.config.stash[_SESSION].report


def pytest_runtest_call(item: pytest.Item) -> None:
    item.config.stash[_SESSION].note_test_start()
    funcargs = getattr(item, "funcargs", {})
    for served in (s for name in DEPLOYMENT_FIXTURES for s in _as_tuple(funcargs.get(name)) if s is not None):
        if not served.server.alive():  # fail at once with the log (attached below), rather than time out
            code = served.server.process.returncode if served.server.process else None
            pytest.fail(f"tritonserver of {served.id} is gone (exit code {code}); its log: {served.server.log_path}",
                        pytrace=False)  # fmt: skip


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
        callspec = getattr(item, "callspec", None)
        params = callspec.params if callspec else {}
        refs = [r for name in DEPLOYMENT_FIXTURES for r in _as_tuple(params.get(name))]
        deployment = " vs ".join(r.id for r in refs if r is not None) or None
        outcome = "error" if report.when != "call" and report.failed else report.outcome
        message = None if report.passed else _short(report)
        markers = sorted(m.name for m in item.iter_markers() if m.name in MARKERS)
        item.config.stash[_SESSION].report.add_test(item.nodeid, outcome, report.duration, deployment, markers, message)
    return report


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
    if distributed.is_worker(session.config):  # the controller writes the one report
        distributed.send_to_controller(session.config, state.report.document(state.startup_s, state.first_test_s))
    else:
        state.publish()


def pytest_terminal_summary(terminalreporter, config: pytest.Config) -> None:
    state = config.stash.get(_SESSION, None)
    if state is None or distributed.is_worker(config):  # the controller prints the merged summary
        return
    lines = summary_lines(state, config)
    if lines:
        terminalreporter.write_sep("=", "triton-llm")
        for line in lines:
            terminalreporter.write_line(line)
