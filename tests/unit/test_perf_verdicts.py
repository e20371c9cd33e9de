"""The perf suites' shared verdicts (pytest_triton_llm/perf/judge.py: the Triton perf test and the /v1 one call them): a budget
missed or unmatched under --perf-require-budget fails, an inconclusive one warns (fails under --perf-strict), and a
load generator that could not keep up warns (fails under --perf-strict)."""

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


def _options(strict=False, require_budget=False):
    return SimpleNamespace(strict=strict, require_budget=require_budget)


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


def test_a_load_point_no_budget_matches_is_measured_and_fails_only_when_a_budget_is_required():
    other = dict(IDENTITY, engine="x")
    result = {}
    assert judge_budget("b.toml", BUDGETS, other, result, _runs(30.0), _options(), "/v1 c=1") == []
    assert (result["judged"], result["budget"]) == (False, "none for hardware cpu, image openai: measured, not judged")
    [problem] = judge_budget("b.toml", BUDGETS, other, {}, _runs(30.0), _options(require_budget=True), "/v1 c=1")
    assert problem.startswith("no budget in b.toml matches it (engine x, deployment openai:f, hardware cpu")


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
