"""The perf suite's options (--perf-*): declared, checked and exposed as typed settings."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import pytest

from ..common.files import fixtures_dir
from ..common.schema import SchemaError
from ..common.usage import OptionError
from .baseline import FailRule, load_baseline
from ..verdicts.significance import Slo
from .history.store import HistoryError, check as check_history
from .budgets import Budget, load_budgets
from .mlperf import Benchmark, load_benchmarks
from .monitor import DEFAULT_SCRAPE_MS
from .repeats import parse_slos
from .workload import Workload, load_workloads


def add_options(group) -> None:
    _workload_options(group)
    _judging_options(group)
    _reference_options(group)
    _live_reference_options(group)
    _output_options(group)


def _reference_options(group) -> None:
    """What a load point is judged against when no one wrote budgets: the user's own runs (calibrated budgets, the
    history), the migration gates' default floor; or nothing, when asked."""
    group.addoption(
        "--perf-history",
        metavar="FILE",
        help="append this run's load points (with image, server, engine digest, hardware, commit and date) to this "
        "perf history, a SQLite file created if missing and never rewritten; `pytest-triton-llm perf-history FILE` "
        "finds its change points",
    )
    group.addoption(
        "--perf-calibrate",
        type=int,
        metavar="N",
        help="run each load point N times (N >= 2) on this engine, image and hardware, judge nothing, and append "
        "budgets derived from the runs and their spread to --perf-budgets FILE (created if missing; an entry it "
        "already holds is kept): from then on the same command judges against them",
    )
    group.addoption(
        "--perf-repeats-max",
        type=int,
        metavar="M",
        help="adaptive repeats: after --perf-repeats runs, a load point whose verdict is still inconclusive (the runs' "
        "interval straddles a budget's limit, or with --perf-against(-url) the rounds' paired interval straddles a "
        "--perf-compare-fail percent) runs again, one round at a time, up to M; each look gets its share of the 5%% "
        "error; the report says how many it took and the smallest change its interval can tell (default: "
        "--perf-repeats, no more)",
    )
    group.addoption(
        "--perf-migration-floor",
        type=float,
        default=MIGRATION_FLOOR,
        metavar="R",
        help="the migration gates' perf half: the new side's output tokens/s over the old side's, measured side by "
        "side in one run, must reach R where no budget (min_throughput_ratio_vs_engine) or /v1 pair entry "
        "(min_throughput_ratio) sets a floor (default: %(default)s)",
    )
    group.addoption(
        "--perf-measure-only",
        action="store_true",
        help="measure and report a load point that nothing judges (no budget matches, no --perf-compare or "
        "--perf-against); without it such a load point fails, saying how to calibrate",
    )
    group.addoption(
        "--perf-require-budget",
        action="store_true",
        help="the default now: a load point that nothing judges fails (kept so that older commands still run)",
    )


def _workload_options(group) -> None:
    """What is sent: the workload, its load points, repeats, the client's processes, a sweep."""
    group.addoption(
        "--perf-workload",
        metavar="NAME",
        default="default",
        help="workload of the workloads file (--perf-workloads, else fixtures/perf_workloads.toml) to run (default: default)",
    )
    group.addoption(
        "--perf-workloads",
        metavar="PATH",
        help="your workloads file, with the schema of fixtures/perf_workloads.toml; --perf-workload names one of its "
        "workloads (default: fixtures/perf_workloads.toml)",
    )
    group.addoption(
        "--perf-repeats",
        metavar="N",
        type=int,
        default=1,
        help="run each load point N times on the same seeded workload: the report holds mean, std, CV and a 95%% t "
        "interval per metric, a budget fails only when the whole interval misses it, a baseline with repeats is "
        "compared by a Welch test (default: 1)",
    )
    group.addoption(
        "--perf-workers",
        metavar="N",
        type=int,
        help="processes that send each load point, each with its own event loop and gRPC channels (default: one per "
        "16 closed-loop clients, within the cores the server leaves this host); the report says how busy their event "
        "loops were, and a load point whose loops could not keep up warns (fails under --perf-strict)",
    )
    group.addoption(
        "--perf-sweep",
        action="store_true",
        help="per deployment, raise concurrency 1, 2, 4, ... (the --perf-workload's lengths) until output "
        "throughput gains less than 5%% on the step before (with --perf-repeats judged on the step's interval) or "
        "--perf-slo breaks, and report the knee (the highest goodput within the SLOs; without SLOs the last step "
        "before the stall); --perf-workload sweep is a short one for CPUs",
    )
    group.addoption(
        "--perf-sweep-max",
        metavar="N",
        type=int,
        help=f"--perf-sweep's highest concurrency (default: {SWEEP_MAX})",
    )


def _live_reference_options(group) -> None:
    """What is measured beside each load point, in the same interleaved rounds: a twin, or the server migrated from."""
    group.addoption(
        "--perf-against",
        metavar="DEPLOYMENT",
        help="measure every load point beside DEPLOYMENT of the lock (e.g. smollm2-135m:inflight), served by a server "
        "of its own without --stand-in-fault, in --perf-repeats interleaved rounds (this side, the reference, the "
        "reference, this side, ...), and judge --perf-compare-fail on the rounds' ratios by a paired test: what "
        "slows a round slows both sides. Against itself it is an A/A check of the gate's noise",
    )
    group.addoption(
        "--perf-against-url",
        metavar="URL",
        help="the same for the /v1 perf test (--openai-url): measure every load point beside the OpenAI endpoint at "
        "URL (e.g. the server you migrate from; --openai-url's headers and CA file go to both), in --perf-repeats "
        "interleaved rounds, each side sent the same prompts in its own family's body, and judge --perf-compare-fail "
        "on the rounds' ratios by a paired test",
    )


def _judging_options(group) -> None:
    """What judges it: budgets, a saved baseline, SLOs, strictness, MLPerf's constraints."""
    group.addoption(
        "--perf-budgets",
        metavar="PATH",
        help="your budgets file, with the schema of fixtures/perf_budgets.toml; it replaces fixtures/perf_budgets.toml "
        "(none of whose budgets then applies). A load point that no budget matches (engine, deployment, hardware, "
        "image) fails unless --perf-measure-only (default: fixtures/perf_budgets.toml)",
    )
    group.addoption("--perf-save", metavar="PATH", help="save this run's perf load points as a baseline")
    group.addoption("--perf-compare", metavar="PATH", help="compare load points with a baseline saved by --perf-save")
    group.addoption(
        "--perf-slo",
        metavar="METRIC[.STAT]:LIMIT",
        action="append",
        default=[],
        help="a per-request SLO for goodput (aiperf's --goodput): ttft_ms:500, latency_ms:8000, tpot_ms:100 (MLPerf's "
        "TPOT), itl_ms:50 (the request's aiperf ITL, its mean gap) or itl_ms.p99:80 (that statistic of the request's "
        "own inter-token gaps); the report gives the share of requests within every SLO and goodput in req/s "
        "(repeatable)",
    )
    group.addoption(
        "--perf-strict",
        action="store_true",
        help="fail a load point whose runs cannot tell a limit from its budget (an 'inconclusive' verdict, whose "
        "interval straddles the limit), or against a reference a --perf-compare-fail percent, instead of warning: "
        "every verdict is then pass or fail; add repeats to keep a clean run clear of its limits",
    )
    group.addoption(
        "--perf-compare-fail",
        metavar="METRIC:PCT",
        action="append",
        default=[],
        help="fail a load point whose METRIC got worse than the baseline (--perf-compare) or the reference "
        "(--perf-against, --perf-against-url) by more than PCT percent (e.g. output_tokens_per_s:10, "
        "latency_ms.p99:20; repeatable)",
    )
    group.addoption(
        "--perf-mlperf",
        metavar="BENCHMARK",
        help="say per load point whether it is VALID under that MLPerf benchmark's p99 TTFT/TPOT limits and "
        "output-length rules (fixtures/mlperf.toml: llama3.1-8b, llama3.1-8b-interactive, llama2-70b, ...)",
    )


def _output_options(group) -> None:
    """What is kept besides the report: the server's metrics over time, every request's timings."""
    group.addoption(
        "--perf-scrape-ms",
        metavar="N",
        type=int,
        default=DEFAULT_SCRAPE_MS,
        help="during each load point read the server's metrics page (nv_inference_*, nv_trt_llm_*) and, where a GPU "
        "of this host serves, its power, memory, utilisation and SM clock, every N ms: figures per load point in the "
        "report, time series in <report>.series.json, plotted beside latency; 0 reads neither (default: %(default)s)",
    )
    group.addoption(
        "--perf-records",
        metavar="PATH",
        help="write one JSON line per request (deployment, load point, repeat, send, first token and every token "
        "time in ns since the epoch, tokens, error), as aiperf's profile_export.jsonl; PATH must not exist",
    )


SWEEP_MAX = 64
MIGRATION_FLOOR = 0.8  # a move to llmapi or to an OpenAI server that loses over a fifth of the throughput fails


def _read(path: str | None, option: str, load: Callable[[Path], object]):
    """A user's data file, read and checked now, so that a typo stops the run before any server starts."""
    if path is None:
        return None
    try:
        return load(Path(path))
    except SchemaError as exc:  # already one line naming the file, the entry and the field
        raise OptionError(f"{option}: {exc}") from None


@dataclass(frozen=True)
class PerfOptions:
    workload: str
    save: str | None
    compare: str | None
    fail_rules: tuple[FailRule, ...]
    baseline: dict | None  # the --perf-compare file, read (and checked) once
    budgets_file: Path | None  # --perf-budgets; None: the suites' fixtures file
    budgets: list[Budget] | None  # the --perf-budgets file, read (and checked) once
    workloads_file: Path | None  # --perf-workloads; None: the suites' fixtures file
    workloads: dict[str, Workload] | None  # the --perf-workloads file, read (and checked) once
    repeats: int = 1
    slos: tuple[Slo, ...] = ()
    require_budget: bool = True  # a load point that nothing judges fails; False: --perf-measure-only
    strict: bool = False
    against: str | None = None  # --perf-against: the lock deployment measured beside each load point
    records: str | None = None  # --perf-records: the JSON-lines file of every request
    mlperf: tuple[str, Benchmark] | None = None  # --perf-mlperf: the benchmark's name and constraints
    sweep: bool = False
    sweep_max: int = SWEEP_MAX
    scrape_ms: int = DEFAULT_SCRAPE_MS  # --perf-scrape-ms: server metrics and GPU telemetry every N ms, 0: off
    workers: int | None = None  # --perf-workers: load processes; None: by the load point and the free cores
    history: str | None = None  # --perf-history: the SQLite file this run's load points are appended to
    calibrate: int | None = None  # --perf-calibrate N: each load point N times, budgets appended to budgets_file
    migration_floor: float = MIGRATION_FLOOR  # --perf-migration-floor: the gates' default new/old throughput floor
    repeats_max: int | None = None  # --perf-repeats-max: runs while a verdict is inconclusive, up to this
    against_url: str | None = None  # --perf-against-url: the /v1 endpoint measured beside each /v1 load point

    @classmethod
    def from_config(cls, config: pytest.Config) -> PerfOptions:
        opt = config.option
        rules = tuple(FailRule.parse(rule) for rule in opt.perf_compare_fail)
        baseline = _comparison(opt, rules)
        try:
            slos = parse_slos(opt.perf_slo)
        except ValueError as exc:
            raise OptionError(f"--perf-slo: {exc}") from None
        _check_calibrate(opt)
        calibrating_a_new_file = opt.perf_calibrate and not (opt.perf_budgets and Path(opt.perf_budgets).exists())
        budgets = [] if calibrating_a_new_file else _read(opt.perf_budgets, "--perf-budgets", load_budgets)
        workloads = _read(opt.perf_workloads, "--perf-workloads", load_workloads)
        # a pytest-xdist worker starts after the controller checked, and its siblings may have begun the file
        if opt.perf_records and Path(opt.perf_records).exists() and getattr(config, "workerinput", None) is None:
            raise OptionError(
                f"--perf-records {opt.perf_records}: the file exists; name a new one (a run never "
                "appends to or replaces an earlier run's records)"
            )
        mlperf = _mlperf(opt.perf_mlperf)
        if opt.perf_history:
            try:
                check_history(Path(opt.perf_history))
            except HistoryError as exc:
                raise OptionError(f"--perf-history: {exc}") from None
        if opt.perf_scrape_ms < 0:
            raise OptionError(f"--perf-scrape-ms must be >= 0 (0: no sampling), got {opt.perf_scrape_ms}")
        if opt.perf_migration_floor <= 0:
            raise OptionError(f"--perf-migration-floor must be > 0 (a ratio of throughputs), got {opt.perf_migration_floor}")
        if opt.perf_workers is not None and opt.perf_workers < 1:
            raise OptionError(f"--perf-workers must be >= 1, got {opt.perf_workers}")
        if opt.perf_sweep_max is not None and (not opt.perf_sweep or opt.perf_sweep_max < 1):
            raise OptionError(f"--perf-sweep-max {opt.perf_sweep_max}: needs --perf-sweep and a concurrency >= 1")
        return cls(
            opt.perf_workload,
            opt.perf_save,
            opt.perf_compare,
            rules,
            baseline,
            Path(opt.perf_budgets) if opt.perf_budgets else None,
            budgets,
            Path(opt.perf_workloads) if opt.perf_workloads else None,
            workloads,
            max(opt.perf_repeats, opt.perf_calibrate or 1),
            slos,
            not opt.perf_measure_only,
            opt.perf_strict,
            opt.perf_against,
            opt.perf_records,
            mlperf,
            opt.perf_sweep,
            opt.perf_sweep_max or SWEEP_MAX,
            scrape_ms=opt.perf_scrape_ms,
            workers=opt.perf_workers,
            history=opt.perf_history,
            calibrate=opt.perf_calibrate,
            migration_floor=opt.perf_migration_floor,
            repeats_max=opt.perf_repeats_max,
            against_url=opt.perf_against_url,
        )

    def baseline_point(self, deployment_id: str, load_point: str) -> dict | None:
        return (self.baseline or {}).get("deployments", {}).get(deployment_id, {}).get(load_point)

    def budgets_from(self, default: Path) -> tuple[Path, list[Budget]]:
        """(file, budgets): --perf-budgets's, else `default`'s (the suites' fixtures file); a user file replaces it."""
        if self.budgets_file is not None and self.budgets is not None:  # (read together from --perf-budgets)
            return self.budgets_file, self.budgets
        return default, load_budgets(default)

    def workload_from(self, default: Path) -> tuple[str, Workload]:
        """(name, workload) of --perf-workload in --perf-workloads's file, else in `default` (the suites' fixtures file)."""
        path = self.workloads_file or default
        workloads = (
            self.workloads if self.workloads_file is not None and self.workloads is not None else load_workloads(default)
        )  # (the file and what it holds come together from --perf-workloads)
        if self.workload not in workloads:
            # the suite asks first in pytest_generate_tests: a usage error there stops the run at collection
            raise pytest.UsageError(f"--perf-workload {self.workload}: {path} has {', '.join(sorted(workloads))}")
        return self.workload, workloads[self.workload]


def _check_against_url(opt, rules: tuple) -> None:
    """--perf-against-url: an http(s) URL, beside --openai-url, with the rounds and the rule a paired test needs."""
    url = opt.perf_against_url
    if url is None:
        return
    if not url.startswith(("http://", "https://")):
        raise OptionError(f"--perf-against-url {url}: give the endpoint's base URL, e.g. http://127.0.0.1:8000/v1")
    if getattr(opt, "openai_url", None) is None:
        raise OptionError("--perf-against-url measures beside the /v1 perf test: give --openai-url too")
    if opt.perf_repeats < 2 or not rules:
        raise OptionError(
            f"--perf-against-url {url} needs --perf-repeats 2 or more (the rounds a paired test compares) and at "
            "least one --perf-compare-fail METRIC:PCT"
        )


def _comparison(opt, rules: tuple) -> dict | None:
    """The saved baseline --perf-compare names (None without it), once the comparison options agree with each other."""
    baseline = None
    if opt.perf_compare:
        baseline = load_baseline(opt.perf_compare)
        if opt.perf_save and Path(opt.perf_save).resolve() == Path(opt.perf_compare).resolve():
            raise OptionError("--perf-save and --perf-compare name the same file: the baseline would be overwritten")
        if opt.perf_against or opt.perf_against_url:
            raise OptionError(
                "--perf-against(-url) and --perf-compare: judge against a live reference or a saved baseline, not both"
            )
    elif rules and not (opt.perf_against or opt.perf_against_url):
        raise OptionError(
            "--perf-compare-fail needs --perf-compare BASELINE, --perf-against DEPLOYMENT or --perf-against-url URL"
        )
    if opt.perf_repeats < 1:
        raise OptionError(f"--perf-repeats must be >= 1, got {opt.perf_repeats}")
    if opt.perf_repeats_max is not None and (opt.perf_repeats < 2 or opt.perf_repeats_max < opt.perf_repeats):
        raise OptionError(
            f"--perf-repeats-max {opt.perf_repeats_max} needs --perf-repeats 2 or more (one run is judged by its value, "
            f"not an interval) and no more than itself (--perf-repeats {opt.perf_repeats})"
        )
    _check_against_url(opt, rules)
    if opt.perf_against and (opt.perf_repeats < 2 or not rules):
        raise OptionError(
            f"--perf-against {opt.perf_against} needs --perf-repeats 2 or more (the rounds a paired "
            "test compares; the summary says what they can catch) and at least one "
            "--perf-compare-fail METRIC:PCT"
        )
    return baseline


def _check_calibrate(opt) -> None:
    """--perf-calibrate N: N >= 2 runs, a budgets file of the user's to write, nothing else judging."""
    if opt.perf_calibrate is None:
        return
    if opt.perf_calibrate < 2:
        raise OptionError(f"--perf-calibrate {opt.perf_calibrate}: give 2 runs or more, whose spread the budgets allow for")
    if not opt.perf_budgets:
        raise OptionError("--perf-calibrate needs --perf-budgets FILE: the budgets are appended there")
    if opt.perf_compare or opt.perf_against or opt.perf_measure_only:
        raise OptionError("--perf-calibrate judges nothing: leave out --perf-compare, --perf-against and --perf-measure-only")


def _mlperf(name: str | None) -> tuple | None:
    """--perf-mlperf NAME: (NAME, its constraints from fixtures/mlperf.toml), or None."""
    if not name:
        return None
    benchmarks = load_benchmarks(fixtures_dir() / "mlperf.toml")
    if name not in benchmarks:
        raise OptionError(f"--perf-mlperf {name}: known benchmarks are {', '.join(sorted(benchmarks))}")
    return name, benchmarks[name]
