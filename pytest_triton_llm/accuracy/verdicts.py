"""Accuracy verdicts from per-article ROUGE: thresholds and MLPerf-style tiers by a one-sided t test, drift as a paired test.

A threshold fails only when the scores are significantly below it, passes when significantly above, and is otherwise
"inconclusive" with the number of articles that would decide it. Drift compares each article with itself between a
saved run and this one (both scored against the reference summaries): it fails only on a drop beyond the allowed one
that is significant, and says when the sample is too small to see a drop of twice the allowed one.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass

import numpy as np

from ..verdicts.significance import (
    DriftResult,
    ThresholdResult,
    against_reference_fraction,
    against_threshold,
    detectable_drop,
    paired_drop,
)
from .rouge import METRICS


class InconclusiveAccuracy(UserWarning):
    """The articles cannot decide a rule: shown in pytest's warnings summary (a failure with --accuracy-strict)."""


@dataclass(frozen=True)
class VerdictRule:
    alpha: float = 0.05  # the chance of failing a run whose true score meets the rule
    power: float = 0.8  # the chance of catching a drop of twice max_drop (drift)
    max_drop: float = 1.0  # ROUGE points a run may lose against its baseline
    strict: bool = False  # an inconclusive threshold fails instead of warning


@dataclass(frozen=True)
class ThresholdVerdict:
    metric: str
    rule: str  # "min_rouge1 27.00" or "0.99 x reference 30.00"
    result: ThresholdResult

    def as_dict(self) -> dict:
        return {"metric": self.metric, "rule": self.rule, **asdict(self.result)}

    def row(self) -> list[str]:
        r = self.result
        needed = f" (about {r.items_needed} articles would decide it)" if r.items_needed else ""
        return [
            self.metric,
            f"{r.mean:.2f}",
            f"[{r.lower_bound:.2f}, {r.upper_bound:.2f}]",
            self.rule,
            r.verdict.upper() if r.verdict == "fail" else r.verdict + needed,
        ]


def judge_thresholds(per_article: dict[str, list[float]], settings, alpha: float) -> list[ThresholdVerdict]:
    """Every metric against the lock's min_rouge* and, with a tier, against tier x reference_rouge*."""
    verdicts = []
    for metric in METRICS:
        threshold = getattr(settings, f"min_{metric}")
        verdicts.append(ThresholdVerdict(metric, f">= {threshold:.2f}", against_threshold(per_article[metric], threshold, alpha)))
        reference = getattr(settings, f"reference_{metric}")
        if settings.tier is not None and reference is not None:
            result = against_reference_fraction(per_article[metric], reference, settings.tier, alpha)
            verdicts.append(ThresholdVerdict(metric, f">= {settings.tier:g} x {reference:.2f}", result))
    return verdicts


def judge_drift(baseline: dict[str, list[float]], current: dict[str, list[float]], rule: VerdictRule) -> dict[str, DriftResult]:
    """Per metric: the paired drop of this run's per-article scores from the baseline's (same articles, same order)."""
    return {m: paired_drop(baseline[m], current[m], rule.max_drop, rule.alpha, rule.power) for m in METRICS}


def drift_rows(results: dict[str, DriftResult]) -> list[list[str]]:
    rows = []
    for metric, r in results.items():
        verdict = r.verdict.upper() if r.verdict == "fail" else r.verdict
        rows.append(
            [
                metric,
                f"{r.mean_drop:+.2f}",
                f"[{r.ci_low:+.2f}, {r.ci_high:+.2f}]",
                f"{r.p_value:.3g}",
                f"{r.max_drop:g}",
                f"{r.detectable_drop:.2f}",
                verdict,
            ]
        )
    return rows


DRIFT_HEADER = ["metric", "mean drop", "one-sided bounds", "p", "allowed", "detectable", ""]
THRESHOLD_HEADER = ["metric", "mean", "one-sided bounds", "rule", ""]


def as_report(results: dict[str, DriftResult]) -> dict:
    return {m: {k: round(v, 4) if isinstance(v, float) else v for k, v in asdict(r).items()} for m, r in results.items()}


def planned_detectable_drop(baseline_scores: dict[str, list[float]], rule: VerdictRule) -> tuple[int, float]:
    """Before a run: (articles, the largest over the metrics of the smallest drop the drift test can catch), taking
    the sd of the paired differences as sqrt(2) x the baseline's per-article sd, as if the two runs were unrelated.
    Paired outputs of one engine are highly correlated, so the measured figure after the run is usually smaller."""
    n = min(len(v) for v in baseline_scores.values())
    return n, max(
        detectable_drop(math.sqrt(2) * float(np.std(v, ddof=1)), n, rule.alpha, rule.power, rule.max_drop)
        for v in baseline_scores.values()
    )
