"""The paired ROUGE-drop gates (the accuracy suite's drift against a baseline, the migration gate to /v1) share one
word on power: articles that can only catch more than twice the allowed drop warn, and fail under --accuracy-strict."""

import warnings

import pytest

from pytest_triton_llm.accuracy.verdicts import InconclusiveAccuracy, VerdictRule, judge_drift
from pytest_triton_llm.accuracy.judge import underpowered_drop_gate

BEFORE = {m: [30.0, 20.0, 40.0] for m in ("rouge1", "rouge2", "rougeLsum")}
NOISY = {m: [25.0, 24.0, 38.0] for m in BEFORE}  # 3 articles that moved by -5, +4, -2: a wide interval


def test_too_few_articles_warn_with_the_drop_they_can_catch():
    results = judge_drift(BEFORE, NOISY, VerdictRule(max_drop=1.0))
    detectable = max(r.detectable_drop for r in results.values())
    with pytest.warns(InconclusiveAccuracy, match=rf"^3 articles can only catch a drop of {detectable:.2f} ROUGE points"):
        underpowered_drop_gate(results, VerdictRule(max_drop=1.0), 3, "against b.json", "TABLE")


def test_under_accuracy_strict_too_few_articles_fail_the_gate():
    rule = VerdictRule(max_drop=1.0, strict=True)
    with pytest.raises(pytest.fail.Exception, match=r"\n--accuracy-strict: an underpowered gate fails$"):
        underpowered_drop_gate(judge_drift(BEFORE, NOISY, rule), rule, 3, "against b.json", "TABLE")


def test_articles_that_can_catch_twice_the_allowed_drop_say_nothing():
    same = judge_drift(BEFORE, BEFORE, VerdictRule(max_drop=1.0, strict=True))  # no spread: the drop is exact
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # a warning would fail here
        underpowered_drop_gate(same, VerdictRule(max_drop=1.0, strict=True), 3, "against b.json", "TABLE")
