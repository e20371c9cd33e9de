"""The perf suites' verdicts, shared by the Triton perf test and the /v1 one: a load point's report entry from its
runs, the budget that judges it, and whether the load generator kept up."""

from __future__ import annotations

import warnings
from collections.abc import Callable
from pathlib import Path

from ..common.tables import table
from ..verdicts.significance import sequential_confidence
from .budgets import detectable, find_budget
from .client_processes import BUSY_LOOP
from .mlperf import judge as judge_mlperf
from .repeats import PerfNoisy, judge_goodput, median_run, spread


def load_point_result(runs: list[dict], records: list, seconds: float, options) -> dict:
    """A load point's report entry: the run with the median throughput stands for it, every run's figures beside it
    (--perf-repeats), goodput (--perf-slo) and MLPerf's VALID or INVALID (--perf-mlperf) over every run's requests."""
    result = dict(median_run(runs))
    if len(runs) > 1:
        result.update(runs=runs, repeats=spread(runs), errors=sum(r["errors"] for r in runs))
    if options.slos:
        result["goodput"] = judge_goodput(records, options.slos, seconds)
    if options.mlperf:
        name, benchmark = options.mlperf  # --perf-mlperf: the benchmark's name and its constraints
        result["mlperf"] = judge_mlperf(name, benchmark, records)
    return result


def judge_budget(
    budgets_file: Path,
    budgets: list,
    identity: dict,
    result: dict,
    runs: list[dict],
    options,
    who: str,
    compared: bool = False,
) -> list[str]:
    """The load point `result` (of `runs`) against the budget that matches `identity` (engine, deployment, hardware,
    hardware_class, image, load_point, workload): records on `result` whether and by what it was judged; -> what
    fails it. An inconclusive verdict warns (naming `who`), and fails under --perf-strict; a load point that nothing
    judges (no budget, and not `compared` with a baseline or a reference) fails, saying how to calibrate, unless
    --perf-measure-only; under --perf-calibrate nothing is judged."""
    problems: list[str] = []
    if options.calibrate:  # --perf-calibrate: measured for the budgets written at the session's end
        result["judged"], result["budget_match"] = False, None
        result["budget"] = f"calibrating ({options.calibrate} runs): budgets appended to {budgets_file}"
        return problems
    budget = find_budget(budgets, **identity)
    result["judged"], result["budget_match"] = budget is not None, None
    if budget is None:
        result["budget"] = f"none for hardware {identity['hardware']}, image {identity['image']}: measured, not judged"
        if options.require_budget and not compared:
            problems.append(
                f"nothing judges it: no budget in {budgets_file} matches (engine {identity['engine']}, deployment "
                f"{identity['deployment']}, hardware {identity['hardware']}, image {identity['image']}, workload "
                f"{identity['workload']}). Calibrate on this engine, image and hardware with the same command and "
                "--perf-calibrate 3 --perf-budgets FILE, then judge with --perf-budgets FILE; or judge against a saved "
                "run (--perf-compare) or a reference (--perf-against); --perf-measure-only measures without judging"
            )
        return problems
    result["budget_match"] = budget.match(next(i for i, b in enumerate(budgets, 1) if b is budget))
    confidence = budget_confidence(options)
    rows = budget.check(result, runs, confidence)
    result["budget"] = {r[0]: r[3] for r in rows}
    if len(runs) > 1:  # what the runs could tell: with --perf-repeats-max, how many it took
        result["budget_runs"], result["budget_detectable_pct"] = len(runs), detectable(budget, runs, confidence)
        result["budget_confidence"] = round(confidence, 4)
    shown = "\n".join(table(["limit", "measured", "budget", ""], rows))
    if any(r[3] == "inconclusive" for r in rows):  # the interval straddles a limit: not evidence of a miss
        unsure = f"{len(runs)} runs cannot tell a limit from its budget:\n{shown}"
        if options.strict:  # --perf-strict: every verdict is pass or fail
            problems.append(f"inconclusive under --perf-strict ({unsure})")
        else:
            warnings.warn(PerfNoisy(f"{who}: {unsure}"), stacklevel=2)
    if any(r[3] == "MISSED" for r in rows):
        problems.append(f"missed its budget:\n{shown}")
    return problems


def judge_against(
    result: dict, rules, reference_runs: list[dict], runs: list[dict], reference: str, point_name: str, options
) -> list[str]:
    """The load point's `runs` against `reference_runs`, measured in the same interleaved rounds (--perf-against,
    --perf-against-url): each --perf-compare-fail rule by a paired test on the rounds' ratios, at each look's share of
    the 5% (budget_confidence), recorded on `result` (`compared`, `regressions`); -> what fails the load point."""
    alpha = 1 - budget_confidence(options)
    judged = [rule.paired(reference_runs, runs, alpha) for rule in rules]
    regressions = [r["regression"] for r in judged if r["regression"]]
    result["compared"] = {
        "against": reference,
        "rounds": len(runs),
        "alpha": round(alpha, 4),
        "rules": judged,
        "regressions": regressions,
        "power": [r.get("power") for r in judged],
        "reference": median_run(reference_runs),
    }
    result["regressions"] = regressions
    problems = [f"regression at {point_name} against {reference}: {r}" for r in regressions]
    if unsure := [r["metric"] for r in judged if r.get("undecided")]:  # passed, but not shown within the allowance
        said = f"{len(runs)} rounds against {reference} cannot tell {', '.join(unsure)} from its allowance"
        if options.strict:  # --perf-strict: every verdict is pass or fail
            problems.append(f"inconclusive under --perf-strict ({said})")
        else:
            warnings.warn(PerfNoisy(f"{point_name}: {said}"), stacklevel=2)
    return problems


def reference_failures(reference_runs: list[dict], reference: str) -> str | None:
    """Why a reference measured beside a load point judges nothing: the requests it failed (its ratios would judge
    its errors); None where it answered every one."""
    failed = [run for run in reference_runs if run["errors"]]
    if not failed:
        return None
    return f"{reference}: {sum(r['errors'] for r in failed)} requests failed: {failed[0]['error_samples']}"


def budget_confidence(options) -> float:
    """95%, split over the looks adaptive repeats may take (--perf-repeats, then one a round up to --perf-repeats-max):
    a verdict may be read after each, so each look is held to its share of the 5%."""
    repeats, cap = options.repeats, getattr(options, "repeats_max", None) or options.repeats
    return sequential_confidence(0.95, max(1, cap - repeats + 1))


def undecided_by(budgets: list, identity: dict, options) -> Callable[[list[dict], list[dict]], bool] | None:
    """--perf-repeats-max: whether the verdicts that will judge `identity` cannot yet be told from the runs so far and
    the reference's in the same rounds: a budget's interval straddles a limit, or a --perf-compare-fail rule's paired
    interval straddles its allowed percent (one noisy round among few must not decide either way). None where nothing
    judges or the repeats are not adaptive."""
    if not getattr(options, "repeats_max", None) or options.calibrate:
        return None
    budget = find_budget(budgets, **identity)
    rules = getattr(options, "fail_rules", ())
    if budget is None and not rules:
        return None
    confidence = budget_confidence(options)

    def undecided(runs: list[dict], reference_runs: list[dict]) -> bool:
        if len(runs) < 2:
            return False
        if budget is not None and any(row[3] == "inconclusive" for row in budget.check({}, runs, confidence)):
            return True
        return bool(reference_runs) and any(r.paired(reference_runs, runs, 1 - confidence).get("undecided") for r in rules)

    return undecided


def client_problems(runs: list[dict], workers: int, options, who: str) -> list[str]:
    """Where the load generator's event loops were busy over BUSY_LOOP in some run, latency is partly the client's:
    a warning naming `who`, or under --perf-strict what fails the load point."""
    behind = [r["client"]["loop_busy"] for r in runs if not r["client"]["kept_up"]]
    if not behind:
        return []
    slow = (
        f"the load generator's event loops were busy {max(behind):.0%} of the run (over {BUSY_LOOP:.0%}: responses "
        f"waited for the client, so latency is partly the client's); raise --perf-workers (now {workers})"
    )
    if options.strict:
        return [slow]
    warnings.warn(PerfNoisy(f"{who}: {slow}"), stacklevel=2)
    return []
