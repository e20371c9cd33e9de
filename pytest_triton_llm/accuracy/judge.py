"""The accuracy suites' verdicts, shared by the Triton suites and the /v1 ones: ROUGE against the lock's thresholds, and
the paired drop gates' warning (or failure) where the articles are too few to catch the allowed drop."""

from __future__ import annotations

import warnings

import pytest

from ..common.tables import table
from ..verdicts.significance import sequential_confidence
from .rouge import METRICS, per_article_scores, rouge_scores
from .sequential import Summaries
from .verdicts import THRESHOLD_HEADER, InconclusiveAccuracy, judge_thresholds


def rouge_meets_the_thresholds(summaries: Summaries, cnn, settings, options, record, where: str) -> None:
    """The threshold verdict of the accuracy suites (Triton and /v1): the summaries' ROUGE against the lock's
    min_rouge* by one-sided bounds, recorded by `record` (means, 95% CIs, verdicts, looks) before the verdict: a fail
    fails, an inconclusive one warns (fails under --accuracy-strict). With --accuracy-samples-max, articles are taken
    look by look while a verdict is inconclusive, each look at its share of alpha. `where` names the run."""
    rule, looks = options.rule(settings), options.looks(len(cnn.articles))
    alpha = 1 - sequential_confidence(1 - rule.alpha, len(looks))
    for taken in looks:
        outputs = summaries.first(taken)
        assert all(outputs), "some articles got an empty summary"
        references = [a.reference for a in cnn.articles[:taken]]
        verdicts = judge_thresholds(per_article_scores(outputs, references), settings, alpha)
        if not any(v.result.verdict == "inconclusive" for v in verdicts):
            break
    scores = rouge_scores(outputs, references)
    accuracy = {m: scores[m]["mid"] for m in METRICS}
    accuracy.update({f"{m}_ci95": [scores[m]["low"], scores[m]["high"]] for m in METRICS})
    accuracy.update(
        n_articles=len(outputs),
        looks=looks[: looks.index(taken) + 1],
        max_new_tokens=settings.max_new_tokens,
        dataset=cnn.source,
        alpha=rule.alpha,
        alpha_per_look=round(alpha, 6),
        verdicts=[v.as_dict() for v in verdicts],
    )
    record(accuracy)
    report = "\n".join(table(THRESHOLD_HEADER, [v.row() for v in verdicts]))
    taken_how = (
        f"{len(outputs)} articles"
        if len(looks) == 1
        else f"{len(outputs)} articles at look {looks.index(taken) + 1} of {len(looks)} ({', '.join(map(str, looks))})"
    )
    where = f"{where}, {taken_how} from {cnn.source}, one-sided bounds at alpha {alpha:.3g}"
    if any(v.result.verdict == "fail" for v in verdicts):
        pytest.fail(f"ROUGE significantly below the rule ({where}):\n{report}", pytrace=False)
    if any(v.result.verdict == "inconclusive" for v in verdicts):
        message = f"these articles cannot tell ROUGE from its rule ({where}):\n{report}"
        if rule.strict:
            pytest.fail(f"{message}\n--accuracy-strict: inconclusive fails", pytrace=False)
        warnings.warn(InconclusiveAccuracy(message), stacklevel=2)


def underpowered_drop_gate(results: dict, rule, articles: int, where: str, paired: str) -> None:
    """The paired ROUGE-drop gates (the drift against a baseline, the migration to /v1): where the articles can only
    catch a drop of more than twice the allowed one, a real regression may pass; a warning says so, and under
    --accuracy-strict the gate fails."""
    if not any(r.underpowered for r in results.values()):
        return
    detectable = max(r.detectable_drop for r in results.values())
    message = (
        f"{articles} articles can only catch a drop of {detectable:.2f} ROUGE points, more than twice the "
        f"{rule.max_drop:g} allowed ({where}): a real regression may pass; more articles (--accuracy-samples, or a "
        f"larger dataset) make the gate decisive\n{paired}"
    )
    if rule.strict:
        pytest.fail(f"{message}\n--accuracy-strict: an underpowered gate fails", pytrace=False)
    warnings.warn(InconclusiveAccuracy(message), stacklevel=2)
