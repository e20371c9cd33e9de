"""--accuracy-samples-max: the ROUGE threshold verdict takes articles look by look until it decides, each look at its
share of alpha, and summarizes every article once."""

from __future__ import annotations

import warnings
from types import SimpleNamespace

import pytest

from pytest_triton_llm.accuracy.judge import rouge_meets_the_thresholds
from pytest_triton_llm.accuracy.options import AccuracyOptions
from pytest_triton_llm.accuracy.sequential import Summaries, planned_looks
from pytest_triton_llm.stack.lock import Accuracy

pytest.importorskip("rouge_score", reason="the reference extra is not installed")

REFERENCE = "the council approved the new bridge across the river on monday"
WRONG = "stocks fell sharply"  # not one word of the reference: ROUGE 0
SETTINGS = Accuracy(min_rouge1=50.0, min_rouge2=50.0, min_rougeLsum=50.0)


def options(**given) -> AccuracyOptions:
    return AccuracyOptions("mini.json", "validation", given.pop("samples", None), None, None, None, None, **given)


def dataset(n: int):
    articles = [SimpleNamespace(id=str(i), reference=REFERENCE) for i in range(n)]
    return SimpleNamespace(articles=articles, source="mini.json")


def run(outputs: list[str], opts: AccuracyOptions):
    asked: list[int] = []

    def batch(articles) -> list[str]:
        asked.append(len(articles))
        return [outputs[int(a.id)] for a in articles]

    cnn, recorded = dataset(len(outputs)), {}
    rouge_meets_the_thresholds(Summaries(cnn.articles, batch), cnn, SETTINGS, opts, recorded.update, "test")
    return asked, recorded


def test_looks_double_from_the_first_up_to_the_cap():
    assert planned_looks(16, 60) == [16, 32, 60]
    assert planned_looks(16, 16) == [16] and planned_looks(20, 10) == [10] and planned_looks(8, 9) == [8, 9]
    assert options(samples_max=60).looks(60) == [16, 32, 60] and options(samples=10, samples_max=30).looks(30) == [10, 20, 30]
    assert options(samples=12).looks(12) == [12]  # without a cap: one look at every article loaded


def test_an_undecided_first_look_takes_more_articles_and_each_is_summarized_once():
    # 10 of the first 16 right: ROUGE 62.5 +- 12.5, no verdict at alpha 0.05/3; all 16 after them right: 81 of 100
    outputs = [REFERENCE] * 10 + [WRONG] * 6 + [REFERENCE] * 44
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # neither inconclusive nor failed
        asked, recorded = run(outputs, options(samples_max=60))
    assert asked == [16, 16] and recorded["looks"] == [16, 32] and recorded["n_articles"] == 32
    assert recorded["alpha_per_look"] == pytest.approx(0.05 / 3, abs=1e-6) and recorded["rouge1"] == pytest.approx(
        100 * 26 / 32, abs=0.5
    )
    assert {v["verdict"] for v in recorded["verdicts"]} == {"pass"}


def test_a_verdict_still_undecided_at_the_cap_fails_under_strict_naming_the_looks():
    outputs = [REFERENCE, WRONG] * 8  # ROUGE 50 against a threshold of 50: no number of articles decides it
    with pytest.raises(
        pytest.fail.Exception, match=r"(?s)16 articles at look 2 of 2 \(8, 16\).*--accuracy-strict: inconclusive fails"
    ):
        run(outputs, options(samples=8, samples_max=16, strict=True))


def test_a_clear_failure_stops_at_the_first_look():
    with pytest.raises(pytest.fail.Exception, match=r"ROUGE significantly below the rule \(test, 16 articles at look 1 of 3"):
        run([WRONG] * 60, options(samples_max=60))


def test_a_cap_below_the_first_look_is_refused_in_one_line():
    config = SimpleNamespace(
        option=SimpleNamespace(
            **{f"accuracy_{k}": None for k in ("dataset", "save", "baseline", "min_exact_match", "min_rouge_l", "max_drop")},
            accuracy_split="validation",
            accuracy_samples=32,
            accuracy_samples_max=16,
            accuracy_alpha=0.05,
            accuracy_power=0.8,
            accuracy_strict=False,
        )
    )
    with pytest.raises(Exception, match=r"^--accuracy-samples-max 16 must be at least --accuracy-samples \(32\)"):
        AccuracyOptions.from_config(config)
