"""The perf suites' shared verdicts (pytest_triton_llm/perf/judge.py: the Triton perf test and the /v1 one call them):
a budget missed fails, a load point that nothing judges fails unless --perf-measure-only, an inconclusive budget
verdict warns (fails under --perf-strict), and a load generator that could not keep up warns (fails under
--perf-strict)."""

import re
from types import SimpleNamespace

import pytest

from pytest_triton_llm.perf.budgets import Budget
from pytest_triton_llm.perf.repeats import PerfNoisy
from pytest_triton_llm.perf.judge import client_problems, judge_budget

IDENTITY = dict(
    engine="e", deployment="openai:f", hardware="cpu", hardware_class="cpu-2", image="openai", load_point="c=1", workload="w"
)
BUDGETS = [Budget(engine="e", min_output_tokens_per_s=20.0)]


def _options(strict=False, require_budget=True, calibrate=None, repeats=3, repeats_max=None):
    given = dict(strict=strict, require_budget=require_budget, calibrate=calibrate)
    return SimpleNamespace(**given, repeats=repeats, repeats_max=repeats_max)


def _runs(*rates, busy=0.1):
    return [{"output_tokens_per_s": r, "client": {"loop_busy": busy, "kept_up": busy <= 0.7}} for r in rates]


def test_a_missed_budget_fails_and_the_result_says_which_budget_judged_it():
    result = dict(_runs(12.0)[0])
    problems = judge_budget("b.toml", BUDGETS, IDENTITY, result, _runs(12.0), _options(), "/v1 c=1")
    assert [p.splitlines()[0] for p in problems] == ["missed its budget:"]
    assert (result["judged"], result["budget"], result["budget_match"]["entry"]) == (
        True,
        {"min_output_tokens_per_s": "MISSED"},
        1,
    )


def test_a_load_point_nothing_judges_fails_saying_how_to_calibrate_unless_measure_only():
    other = dict(IDENTITY, engine="x")
    [problem] = judge_budget("b.toml", BUDGETS, other, {}, _runs(30.0), _options(), "/v1 c=1")
    assert problem.startswith("nothing judges it: no budget in b.toml matches (engine x, deployment openai:f, hardware cpu")
    assert "--perf-calibrate 3 --perf-budgets FILE" in problem and "--perf-measure-only" in problem
    result = {}  # --perf-measure-only
    assert judge_budget("b.toml", BUDGETS, other, result, _runs(30.0), _options(require_budget=False), "/v1 c=1") == []
    assert (result["judged"], result["budget"]) == (False, "none for hardware cpu, image openai: measured, not judged")
    # compared with a reference (--perf-against, --perf-against-url) or a saved run (--perf-compare): judged by that
    assert judge_budget("b.toml", BUDGETS, other, {}, _runs(30.0), _options(), "/v1 c=1", compared=True) == []


def test_a_calibration_run_judges_nothing_not_even_a_budget_it_would_miss():
    result = {}
    assert judge_budget("b.toml", BUDGETS, IDENTITY, result, _runs(12.0), _options(calibrate=3), "/v1 c=1") == []
    assert (result["judged"], result["budget"]) == (False, "calibrating (3 runs): budgets appended to b.toml")


def test_an_inconclusive_budget_warns_and_fails_under_perf_strict():
    runs = _runs(15.0, 26.0, 19.0)  # the interval of their mean straddles 20
    with pytest.warns(PerfNoisy, match=r"^/v1 c=1: 3 runs cannot tell a limit from its budget:"):
        assert judge_budget("b.toml", BUDGETS, IDENTITY, {}, runs, _options(), "/v1 c=1") == []
    [problem] = judge_budget("b.toml", BUDGETS, IDENTITY, {}, runs, _options(strict=True), "/v1 c=1")
    assert problem.startswith("inconclusive under --perf-strict (3 runs cannot tell a limit from its budget:")


def test_a_load_generator_that_could_not_keep_up_warns_and_fails_under_perf_strict():
    assert client_problems(_runs(30.0), 1, _options(strict=True), "/v1 c=1") == []
    said = "the load generator's event loops were busy 80% of the run (over 70%: responses waited for the client"
    with pytest.warns(PerfNoisy, match=rf"^/v1 c=1: {re.escape(said)}"):
        assert client_problems(_runs(30.0, busy=0.8), 2, _options(), "/v1 c=1") == []
    [problem] = client_problems(_runs(30.0, busy=0.8), 2, _options(strict=True), "/v1 c=1")
    assert problem.startswith(said) and problem.endswith("raise --perf-workers (now 2)")


def _measure_rates(monkeypatch, rates, repeats=2, repeats_max=6):
    """measure_rounds with each run's output tokens/s taken from `rates` (no server): the runs it took."""
    from pytest_triton_llm.perf import rounds
    from pytest_triton_llm.perf.judge import undecided_by

    given = iter(rates)
    monkeypatch.setattr(rounds, "_run_side", lambda side, into, *args: into.runs.append({"output_tokens_per_s": next(given)}))
    options = SimpleNamespace(repeats=repeats, repeats_max=repeats_max, calibrate=None, records=None)
    undecided = undecided_by(BUDGETS, IDENTITY, options)
    [measured] = rounds.measure_rounds([object()], "c=1", {}, "w", 1, options, None, undecided)
    return [r["output_tokens_per_s"] for r in measured.runs]


def test_adaptive_repeats_run_while_the_budget_verdict_is_inconclusive_up_to_the_cap(monkeypatch):
    # 2 runs, then up to 6: 5 looks, each at 99% (5% split over them), so 2 runs tell nothing (t 63.7 for one df)
    assert _measure_rates(monkeypatch, [30.0, 31.0, 30.5, 99.0]) == [30.0, 31.0, 30.5]  # told at 3: [27.6, 33.4]
    straddling = [15.0, 26.0, 19.0, 24.0, 17.0, 23.0, 99.0]
    assert _measure_rates(monkeypatch, straddling) == straddling[:6]  # still inconclusive at the cap: it stops there
    result = {}
    with pytest.warns(PerfNoisy):
        judge_budget("b.toml", BUDGETS, IDENTITY, result, _runs(*straddling[:6]), _options(repeats=2, repeats_max=6), "c=1")
    assert result["budget"] == {"min_output_tokens_per_s": "inconclusive"} and result["budget_runs"] == 6
    assert result["budget_confidence"] == 0.99  # what 6 runs of this spread can tell at it: t(0.995, 5) 4.03 sd/sqrt(6)
    assert result["budget_detectable_pct"]["min_output_tokens_per_s"] == pytest.approx(34.4, abs=0.1)


def test_one_look_keeps_95_percent_and_adaptive_looks_share_its_5_percent():
    from pytest_triton_llm.perf.judge import budget_confidence

    assert budget_confidence(_options(repeats=3)) == 0.95
    assert budget_confidence(_options(repeats=3, repeats_max=8)) == pytest.approx(1 - 0.05 / 6)
    told_at_95 = _runs(22.0, 23.0, 22.5)  # [21.3, 23.7] at 95%, [19.3, 25.7] at 99.2%
    assert Budget(engine="e", min_output_tokens_per_s=20.0).check({}, told_at_95)[0][3] == "ok"
    assert Budget(engine="e", min_output_tokens_per_s=20.0).check({}, told_at_95, 1 - 0.05 / 6)[0][3] == "inconclusive"


def test_adaptive_rounds_run_while_a_paired_comparison_cannot_tell_a_slowdown_from_its_allowance(monkeypatch):
    """CI's stream_slowed_down miss (2026-12-02): 4 rounds in which a neighbour slowed one round's reference cannot
    fail a fault that halves tokens/s; with --perf-repeats-max the rounds go on until the paired interval decides."""
    from pytest_triton_llm.perf import rounds
    from pytest_triton_llm.perf.baseline import FailRule
    from pytest_triton_llm.perf.judge import judge_against, undecided_by

    rule = FailRule.parse("output_tokens_per_s:20")

    # rounds alternate which side runs first; here each call is one side's run, the measured side's then the
    # reference's in round 1, the reverse in round 2 (measure_rounds' order)
    def measured_runs(pairs, repeats_max):
        given = iter(x for i, (a, b) in enumerate(pairs) for x in ((a, b) if i % 2 == 0 else (b, a)))
        monkeypatch.setattr(rounds, "_run_side", lambda side, into, *args: into.runs.append({"output_tokens_per_s": next(given)}))
        monkeypatch.setattr(rounds, "run_load", lambda *a, **k: None)  # the warm-up round
        options = SimpleNamespace(
            repeats=4, repeats_max=repeats_max, calibrate=None, records=None, fail_rules=(rule,), strict=False
        )
        undecided = undecided_by([], IDENTITY, options)
        side = SimpleNamespace(label="s", requests=[], target=None, warmup=[], workers=1)
        measured, reference = rounds.measure_rounds([side, side], "c=1", {}, "w", 1, options, _Progress(), undecided)
        result = {}
        return len(measured.runs), judge_against(result, (rule,), reference.runs, measured.runs, "ref", "c=1", options)

    halved = [(20.0, 40.0), (21.0, 41.0), (36.0, 38.0), (20.5, 40.5)] + [(20.0, 40.0 + i) for i in range(6)]
    with pytest.warns(PerfNoisy, match=r"^c=1: 4 rounds against ref cannot tell output_tokens_per_s from its allowance$"):
        assert measured_runs(halved[:4], None) == (4, [])  # the miss: 4 rounds, one of them noisy, pass the fault
    taken, problems = measured_runs(halved, 10)
    assert taken < 10 and problems and "dropped" in problems[0]
    clean = [(40.0 + (i % 3), 40.0 + ((i + 1) % 3)) for i in range(10)]
    assert measured_runs(clean, 10) == (4, [])  # an A/A run is told within the allowance at once


class _Progress:
    def step(self, what):
        from contextlib import nullcontext

        return nullcontext()
