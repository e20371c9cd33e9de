"""Significance tests for accuracy and perf gates: t intervals, drift, thresholds, Welch, budgets and goodput.

Pure statistics on lists of numbers (numpy and the standard library only, no scipy): the Student t distribution
from the regularized incomplete beta function, confidence intervals, a paired one-sided drift test with its power,
absolute and relative (MLPerf-style) thresholds, a Welch two-sample test for perf baselines, budgets judged by
a confidence interval, and goodput under per-request SLOs. A gate fails only on evidence: where the data cannot
tell, the verdict says so ("inconclusive", or a detectable effect to print next to a "pass").
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from functools import lru_cache
from statistics import NormalDist
from typing import Literal

import numpy as np

Verdict = Literal["pass", "fail", "inconclusive"]
BudgetKind = Literal["min", "max"]  # a floor (e.g. tokens/s) or a ceiling (e.g. p99 ms)

# the largest sample size the "how many would decide it" searches consider; beyond it they answer None
MAX_ITEMS = 100_000

_BETACF_MAX_ITERATIONS = 10_000  # the continued fraction needs O(sqrt(max(a, b))) terms; df up to ~1e7 fits
_BETACF_EPS = 1e-15
_FPMIN = 1e-300
_STANDARD_NORMAL = NormalDist()


# --- the Student t distribution ---------------------------------------------------------------------------------


def _beta_continued_fraction(a: float, b: float, x: float) -> float:
    """The continued fraction of the incomplete beta function, by the modified Lentz method (Numerical Recipes
    `betacf`)."""
    qab, qap, qam = a + b, a + 1.0, a - 1.0
    c = 1.0
    d = 1.0 - qab * x / qap
    d = 1.0 / (d if abs(d) >= _FPMIN else _FPMIN)
    h = d
    for m in range(1, _BETACF_MAX_ITERATIONS + 1):
        m2 = 2 * m
        for aa in (m * (b - m) * x / ((qam + m2) * (a + m2)), -(a + m) * (qab + m) * x / ((a + m2) * (qap + m2))):
            d = 1.0 + aa * d
            d = 1.0 / (d if abs(d) >= _FPMIN else _FPMIN)
            c = 1.0 + aa / c
            c = c if abs(c) >= _FPMIN else _FPMIN
            step = d * c
            h *= step
        if abs(step - 1.0) < _BETACF_EPS:
            return h
    raise ArithmeticError(f"incomplete beta continued fraction did not converge for a={a}, b={b}, x={x}")


def regularized_incomplete_beta(a: float, b: float, x: float) -> float:
    """I_x(a, b), for a, b > 0 and 0 <= x <= 1."""
    if not (a > 0 and b > 0):
        raise ValueError(f"incomplete beta needs a > 0 and b > 0, got a={a}, b={b}")
    if not 0.0 <= x <= 1.0:
        raise ValueError(f"incomplete beta needs 0 <= x <= 1, got x={x}")
    if x == 0.0 or x == 1.0:
        return x
    log_front = math.lgamma(a + b) - math.lgamma(a) - math.lgamma(b) + a * math.log(x) + b * math.log1p(-x)
    front = math.exp(log_front)
    # the fraction converges fast only on its own side of the mean; use the symmetry I_x(a,b) = 1 - I_1-x(b,a)
    if x < (a + 1.0) / (a + b + 2.0):
        return front * _beta_continued_fraction(a, b, x) / a
    return 1.0 - front * _beta_continued_fraction(b, a, 1.0 - x) / b


def _check_df(df: float) -> None:
    if not df > 0:
        raise ValueError(f"degrees of freedom must be > 0, got {df}")


def t_two_sided_tail(t: float, df: float) -> float:
    """P(|T| >= |t|) for Student's t with `df` degrees of freedom (df may be fractional, as Welch's is)."""
    _check_df(df)
    if math.isinf(df):
        return 2.0 * _STANDARD_NORMAL.cdf(-abs(t))
    if math.isinf(t):
        return 0.0
    return regularized_incomplete_beta(df / 2.0, 0.5, df / (df + t * t))


def t_cdf(t: float, df: float) -> float:
    """P(T <= t) for Student's t with `df` degrees of freedom."""
    half_tail = t_two_sided_tail(t, df) / 2.0
    return 1.0 - half_tail if t > 0 else half_tail


def t_sf(t: float, df: float) -> float:
    """P(T > t): the upper tail, computed directly so that small p-values keep their precision."""
    half_tail = t_two_sided_tail(t, df) / 2.0
    return half_tail if t > 0 else 1.0 - half_tail


@lru_cache(maxsize=4096)
def t_quantile(p: float, df: float) -> float:
    """The t with P(T <= t) = p: t_cdf inverted by bisection on a bracket found by doubling."""
    if not 0.0 < p < 1.0:
        raise ValueError(f"a quantile needs 0 < p < 1, got {p}")
    _check_df(df)
    if math.isinf(df):
        return normal_quantile(p)
    if p == 0.5:
        return 0.0
    if p < 0.5:
        return -t_quantile(1.0 - p, df)
    upper_tail = 1.0 - p
    low, high = 0.0, 1.0
    while t_sf(high, df) > upper_tail:
        low, high = high, high * 2.0
    # the upper tail falls as t grows; bisect on it (not on the cdf) so that extreme p keep their precision
    while high - low > 1e-12 * high:
        middle = (low + high) / 2.0
        if t_sf(middle, df) > upper_tail:
            low = middle
        else:
            high = middle
    return (low + high) / 2.0


def normal_quantile(p: float) -> float:
    """The z with P(Z <= z) = p for the standard normal."""
    if not 0.0 < p < 1.0:
        raise ValueError(f"a quantile needs 0 < p < 1, got {p}")
    return _STANDARD_NORMAL.inv_cdf(p)


# --- shared checks and searches ---------------------------------------------------------------------------------


def _as_sample(values: Sequence[float], what: str, at_least: int = 1) -> np.ndarray:
    sample = np.asarray(values, dtype=float)
    if sample.ndim != 1:
        raise ValueError(f"{what} must be a flat list of numbers, got shape {sample.shape}")
    if len(sample) < at_least:
        raise ValueError(f"{what} needs at least {at_least} value(s), got {len(sample)}")
    if not np.all(np.isfinite(sample)):
        raise ValueError(f"{what} contains NaN or infinite values")
    return sample


def _check_alpha(alpha: float) -> None:
    if not 0.0 < alpha < 0.5:
        raise ValueError(f"alpha must be between 0 and 0.5 (a one-sided level), got {alpha}")


def _check_power(power: float) -> None:
    # below 0.5 the power term turns negative and "detectable" stops shrinking with n
    if not 0.5 <= power < 1.0:
        raise ValueError(f"power must be at least 0.5 and below 1, got {power}")


def _check_confidence(confidence: float) -> None:
    if not 0.0 < confidence < 1.0:
        raise ValueError(f"confidence must be between 0 and 1, got {confidence}")


def _smallest_n(enough: Callable[[int], bool], start: int = 2, cap: int = MAX_ITEMS) -> int | None:
    """The smallest n in [start, cap] for which `enough(n)` holds, None if even cap is not enough.
    `enough` must be monotone (false, then true from some n on): doubling finds a bracket, bisection the edge."""
    if enough(start):
        return start
    if not enough(cap):
        return None
    not_enough, is_enough = start, min(start * 2, cap)
    while not enough(is_enough):
        not_enough, is_enough = is_enough, min(is_enough * 2, cap)
    while is_enough - not_enough > 1:
        middle = (not_enough + is_enough) // 2
        if enough(middle):
            is_enough = middle
        else:
            not_enough = middle
    return is_enough


def _sample_std(sample: np.ndarray) -> float:
    return float(np.std(sample, ddof=1))


# --- confidence intervals ---------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Summary:
    """A sample's mean with a two-sided t confidence interval. With n == 1 there is no spread to estimate:
    std, cv, ci_low and ci_high are None. With identical values the interval has zero width."""

    n: int
    mean: float
    std: float | None  # sample standard deviation (ddof=1)
    cv: float | None  # std / |mean|; None when the mean is 0 or std is unknown
    ci_low: float | None
    ci_high: float | None
    confidence: float


def sequential_confidence(confidence: float, looks: int) -> float:
    """The confidence of each of `looks` planned looks at growing data (adaptive repeats, articles taken until the
    verdict decides) such that all of them together keep `confidence`: Bonferroni's split of the error over the looks,
    conservative, since stopping at the first look that decides would otherwise fail a sound run more often."""
    if looks < 1:
        raise ValueError(f"looks must be at least 1, got {looks}")
    return 1.0 - (1.0 - confidence) / looks


def mean_ci(values: Sequence[float], confidence: float = 0.95) -> Summary:
    """The mean of `values` with its t-based two-sided confidence interval at `confidence`."""
    _check_confidence(confidence)
    sample = _as_sample(values, "mean_ci values")
    n, mean = len(sample), float(np.mean(sample))
    if n < 2:
        return Summary(n=n, mean=mean, std=None, cv=None, ci_low=None, ci_high=None, confidence=confidence)
    std = _sample_std(sample)
    half_width = t_quantile(0.5 + confidence / 2.0, n - 1) * std / math.sqrt(n)
    cv = std / abs(mean) if mean != 0 else None
    low, high = mean - half_width, mean + half_width
    return Summary(n=n, mean=mean, std=std, cv=cv, ci_low=low, ci_high=high, confidence=confidence)


# --- paired drift (per-item scores, baseline vs current) --------------------------------------------------------


def detectable_drop(sd: float, n: int, alpha: float = 0.05, power: float = 0.8, max_drop: float = 0.0) -> float:
    """The smallest true drop a paired one-sided test over `n` items catches with probability `power` at level
    `alpha`, given the standard deviation `sd` of the per-item differences: max_drop + delta with
    delta = (t_{1-alpha,n-1} + t_{power,n-1}) * sd / sqrt(n).

    Approximation: the power term uses the central t quantile in place of the noncentral t distribution, the usual
    textbook shortcut; it is slightly optimistic for small n (true power a point or two under `power` at n=10).
    Usable before a run, from an sd expected from an earlier one."""
    _check_alpha(alpha)
    _check_power(power)
    if n < 2:
        raise ValueError(f"a paired test needs at least 2 items, got n={n}")
    if sd < 0:
        raise ValueError(f"sd must be >= 0, got {sd}")
    return max_drop + (t_quantile(1.0 - alpha, n - 1) + t_quantile(power, n - 1)) * sd / math.sqrt(n)


def articles_needed(sd: float, delta: float, alpha: float = 0.05, power: float = 0.8) -> int | None:
    """The smallest number of paired items whose detectable drop beyond the tolerance is at most `delta`, for
    differences of standard deviation `sd`; None when more than MAX_ITEMS would be needed."""
    if not delta > 0:
        raise ValueError(f"delta (the drop beyond the tolerance to detect) must be > 0, got {delta}")
    _check_alpha(alpha)
    _check_power(power)
    return _smallest_n(lambda n: detectable_drop(sd, n, alpha, power) <= delta)


@dataclass(frozen=True)
class DriftResult:
    """A paired one-sided test of H0: true mean drop <= max_drop against H1: drop > max_drop.
    A drop is baseline - current, so positive means worse. [ci_low, ci_high] is two-sided at 1 - 2*alpha, so each
    end is a one-sided bound at 1 - alpha: the gate fails (p_value < alpha) exactly when ci_low > max_drop, and
    ci_high is the largest drop a pass can rule out ("the drop is at most ci_high", with 1 - alpha confidence)."""

    n: int
    mean_drop: float
    sd_drop: float
    ci_low: float
    ci_high: float
    max_drop: float
    p_value: float
    verdict: Literal["pass", "fail"]
    detectable_drop: float  # max_drop + the smallest excess caught with probability `power` (see detectable_drop)
    must_catch: float | None  # the drop this gate is expected to catch; None when there is no scale to judge by
    underpowered: bool | None  # detectable_drop > must_catch; None when must_catch is None


def paired_drop(
    baseline: Sequence[float],
    current: Sequence[float],
    max_drop: float = 0.0,
    alpha: float = 0.05,
    power: float = 0.8,
    must_catch: float | None = None,
) -> DriftResult:
    """Whether `current` per-item scores dropped below `baseline` (paired by index) by significantly more than
    `max_drop`. `must_catch` (default 2 * max_drop when max_drop > 0) is the drop the gate should be able to see:
    the result is underpowered when its detectable drop is larger. With identical differences (sd 0) the mean drop
    is exact: it fails when above max_drop (p 0) and passes otherwise (p 1)."""
    _check_alpha(alpha)
    _check_power(power)
    if max_drop < 0:
        raise ValueError(f"max_drop must be >= 0, got {max_drop}")
    base = _as_sample(baseline, "baseline scores", at_least=2)
    curr = _as_sample(current, "current scores", at_least=2)
    if len(base) != len(curr):
        raise ValueError(f"paired scores need equal lengths, got {len(base)} baseline and {len(curr)} current")
    drops = base - curr
    n, mean, sd = len(drops), float(np.mean(drops)), _sample_std(drops)
    standard_error = sd / math.sqrt(n)
    half_width = t_quantile(1.0 - alpha, n - 1) * standard_error
    if standard_error > 0:
        p_value = t_sf((mean - max_drop) / standard_error, n - 1)
    else:
        p_value = 0.0 if mean > max_drop else 1.0
    detectable = detectable_drop(sd, n, alpha, power, max_drop)
    if must_catch is None and max_drop > 0:
        must_catch = 2.0 * max_drop  # a gate that cannot tell twice its tolerance from noise is too small
    return DriftResult(
        n=n,
        mean_drop=mean,
        sd_drop=sd,
        ci_low=mean - half_width,
        ci_high=mean + half_width,
        max_drop=max_drop,
        p_value=p_value,
        verdict="fail" if p_value < alpha else "pass",
        detectable_drop=detectable,
        must_catch=must_catch,
        underpowered=None if must_catch is None else detectable > must_catch,
    )


# --- absolute and relative thresholds ---------------------------------------------------------------------------


@dataclass(frozen=True)
class ThresholdResult:
    """Per-item scores against a threshold with two one-sided t tests at level alpha: "fail" when the upper bound
    (at 1 - alpha) is below the threshold, "pass" when the lower bound is above it, else "inconclusive".
    items_needed (inconclusive only) is the total number of items, at this mean and sd, that would decide it;
    None when decided, when the mean equals the threshold, or beyond MAX_ITEMS."""

    n: int
    mean: float
    std: float
    threshold: float
    lower_bound: float
    upper_bound: float
    verdict: Verdict
    items_needed: int | None


def against_threshold(scores: Sequence[float], threshold: float, alpha: float = 0.05) -> ThresholdResult:
    """Whether the true mean of per-item `scores` is significantly above or below `threshold` (n >= 2)."""
    _check_alpha(alpha)
    sample = _as_sample(scores, "threshold scores", at_least=2)
    n, mean, std = len(sample), float(np.mean(sample)), _sample_std(sample)
    half_width = t_quantile(1.0 - alpha, n - 1) * std / math.sqrt(n)
    lower, upper = mean - half_width, mean + half_width
    verdict: Verdict = "fail" if upper < threshold else "pass" if lower > threshold else "inconclusive"
    items_needed = None
    if verdict == "inconclusive" and mean != threshold:
        margin = abs(mean - threshold)
        items_needed = _smallest_n(lambda k: t_quantile(1.0 - alpha, k - 1) * std / math.sqrt(k) < margin)
    return ThresholdResult(
        n=n,
        mean=mean,
        std=std,
        threshold=threshold,
        lower_bound=lower,
        upper_bound=upper,
        verdict=verdict,
        items_needed=items_needed,
    )


def against_reference_fraction(
    scores: Sequence[float], reference_score: float, fraction: float, alpha: float = 0.05
) -> ThresholdResult:
    """An MLPerf-style tier: the scores against `fraction` (e.g. 0.99, 0.999) of a reference model's score."""
    if not fraction > 0:
        raise ValueError(f"fraction must be > 0 (e.g. 0.99), got {fraction}")
    return against_threshold(scores, fraction * reference_score, alpha)


# --- Welch two-sample test for perf baselines -------------------------------------------------------------------


@dataclass(frozen=True)
class WelchResult:
    """Current perf samples against baseline ones, one-sided: H0: current is worse than baseline by at most
    max_regression_pct, H1: by more. regression_pct is positive when current is worse (in the direction set by
    higher_is_better); change_pct is the plain signed (current - baseline) / baseline."""

    baseline_mean: float
    current_mean: float
    change_pct: float
    regression_pct: float
    max_regression_pct: float
    df: float  # Welch-Satterthwaite; inf when both samples have zero variance
    t: float
    p_value: float
    verdict: Literal["pass", "fail"]
    detectable_regression_pct: float  # max_regression_pct + the smallest excess caught with probability `power`


def welch_compare(
    baseline_samples: Sequence[float],
    current_samples: Sequence[float],
    alpha: float = 0.05,
    higher_is_better: bool = True,
    max_regression_pct: float = 0.0,
    power: float = 0.8,
) -> WelchResult:
    """Whether current perf samples (e.g. tokens/s per repeat, higher_is_better; or ms, not) regressed from the
    baseline ones by significantly more than max_regression_pct percent. Means must be positive.

    The tolerance scales the baseline: H0 is mu_current >= (1 - m) * mu_baseline (or <= (1 + m) * mu_baseline when
    lower is better), a plain Welch test between current and the scaled baseline samples, so the tolerance needs
    no delta-method approximation. When both samples have zero variance (identical repeats) the means are exact:
    a regression beyond the tolerance fails with p 0 and anything else passes with p 1, rather than dividing by
    zero or calling an exact measurement inconclusive."""
    _check_alpha(alpha)
    _check_power(power)
    if max_regression_pct < 0:
        raise ValueError(f"max_regression_pct must be >= 0, got {max_regression_pct}")
    base = _as_sample(baseline_samples, "baseline samples", at_least=2)
    curr = _as_sample(current_samples, "current samples", at_least=2)
    base_mean, curr_mean = float(np.mean(base)), float(np.mean(curr))
    if base_mean <= 0:
        raise ValueError(f"a relative regression needs a positive baseline mean, got {base_mean}")
    tolerance = max_regression_pct / 100.0
    scale = 1.0 - tolerance if higher_is_better else 1.0 + tolerance
    sign = 1.0 if higher_is_better else -1.0  # turns "worse" into a positive excess either way
    excess = sign * (scale * base_mean - curr_mean)
    base_var = scale**2 * _sample_std(base) ** 2 / len(base)
    curr_var = _sample_std(curr) ** 2 / len(curr)
    standard_error = math.sqrt(base_var + curr_var)
    if standard_error > 0:
        df = (base_var + curr_var) ** 2 / (base_var**2 / (len(base) - 1) + curr_var**2 / (len(curr) - 1))
        t = excess / standard_error
        p_value = t_sf(t, df)
        # same shortcut as detectable_drop: central t quantiles, df and standard error as observed
        detectable_excess = (t_quantile(1.0 - alpha, df) + t_quantile(power, df)) * standard_error
    else:
        df, detectable_excess = math.inf, 0.0
        t = math.copysign(math.inf, excess) if excess != 0 else 0.0
        p_value = 0.0 if excess > 0 else 1.0
    change_pct = 100.0 * (curr_mean - base_mean) / base_mean
    return WelchResult(
        baseline_mean=base_mean,
        current_mean=curr_mean,
        change_pct=change_pct,
        regression_pct=-change_pct if higher_is_better else change_pct,
        max_regression_pct=max_regression_pct,
        df=df,
        t=t,
        p_value=p_value,
        verdict="fail" if p_value < alpha else "pass",
        detectable_regression_pct=max_regression_pct + 100.0 * detectable_excess / base_mean,
    )


# --- budgets judged by a confidence interval --------------------------------------------------------------------


@dataclass(frozen=True)
class BudgetResult:
    """Samples against a floor ("min", e.g. tokens/s) or a ceiling ("max", e.g. p99 ms): "fail" only when the
    whole confidence interval is on the wrong side, "pass" when it is wholly on the right side (touching the limit
    counts as right), else "inconclusive". With one sample, ci_low == ci_high == that value: it passes or fails."""

    n: int
    mean: float
    ci_low: float
    ci_high: float
    limit: float
    kind: BudgetKind
    verdict: Verdict


def against_budget(samples: Sequence[float], limit: float, kind: BudgetKind, confidence: float = 0.95) -> BudgetResult:
    """Whether repeated measurements of a metric keep to its budget, judged by the t interval of their mean."""
    if kind not in ("min", "max"):
        raise ValueError(f"budget kind must be 'min' (a floor) or 'max' (a ceiling), got {kind!r}")
    summary = mean_ci(samples, confidence)
    # one sample has no interval: the value itself is the best (and only) evidence
    low = summary.ci_low if summary.ci_low is not None else summary.mean
    high = summary.ci_high if summary.ci_high is not None else summary.mean
    if kind == "min":
        verdict: Verdict = "pass" if low >= limit else "fail" if high < limit else "inconclusive"
    else:
        verdict = "pass" if high <= limit else "fail" if low > limit else "inconclusive"
    n, mean = summary.n, summary.mean
    return BudgetResult(n=n, mean=mean, ci_low=low, ci_high=high, limit=limit, kind=kind, verdict=verdict)


# --- goodput under per-request SLOs -----------------------------------------------------------------------------


@dataclass(frozen=True)
class Goodput:
    """The requests that met every SLO: their count, their fraction of all requests (0.0 when there were none),
    and their rate over the run."""

    good: int
    total: int
    fraction: float
    goodput_rps: float


def _meets_slos(request: Mapping[str, float | None], slos: Mapping[str, float]) -> bool:
    # a missing or None metric cannot be shown to meet its limit; NaN fails the comparison by itself
    return all((value := request.get(metric)) is not None and value <= limit for metric, limit in slos.items())


def goodput(requests: Sequence[Mapping[str, float | None]], slos: Mapping[str, float], duration_s: float) -> Goodput:
    """How many `requests` (dicts of per-request metrics such as ttft_ms, itl_ms, latency_ms) had every metric
    named in `slos` at or under its limit, and that count per second of `duration_s`."""
    if not slos:
        raise ValueError("goodput needs at least one SLO, e.g. {'ttft_ms': 500.0}")
    if not duration_s > 0:
        raise ValueError(f"duration_s must be > 0, got {duration_s}")
    good = sum(1 for request in requests if _meets_slos(request, slos))
    total = len(requests)
    return Goodput(good=good, total=total, fraction=good / total if total else 0.0, goodput_rps=good / duration_s)


@dataclass(frozen=True)
class Slo:
    """A service-level objective: `metric` (aggregated by `statistic`, or per request when None) <= `limit`."""

    metric: str
    statistic: str | None
    limit: float


_SLO_EXAMPLE = "a valid one looks like 'ttft_ms.p99:500' (metric.statistic:limit) or 'itl_ms:50' (per request)"
_METRIC_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_NAMED_STATISTICS = ("mean", "median", "min", "max")
_PERCENTILE = re.compile(r"p(\d+(?:\.\d+)?)")


def _malformed_slo(spec: str, why: str) -> ValueError:
    return ValueError(f"SLO {spec!r} is malformed: {why}; {_SLO_EXAMPLE}")


def _parse_statistic(spec: str, statistic: str) -> str:
    statistic = statistic.lower()
    if statistic in _NAMED_STATISTICS:
        return statistic
    percentile = _PERCENTILE.fullmatch(statistic)
    if percentile and 0.0 < float(percentile.group(1)) <= 100.0:
        return statistic
    raise _malformed_slo(spec, f"statistic {statistic!r} is not one of {', '.join(_NAMED_STATISTICS)} or p<0-100>")


def parse_slo(spec: str) -> Slo:
    """Parse 'metric[.statistic]:limit', e.g. 'ttft_ms.p99:500' -> Slo('ttft_ms', 'p99', 500.0)."""
    text = spec.strip()
    if text.count(":") != 1:
        raise _malformed_slo(spec, "it needs exactly one ':' between the metric and its limit")
    name, limit_text = text.split(":")
    metric, _, statistic = name.strip().partition(".")
    if not _METRIC_NAME.fullmatch(metric):
        raise _malformed_slo(spec, f"metric {metric!r} is not a name (letters, digits, underscores)")
    if "." in name and not statistic:
        raise _malformed_slo(spec, "a '.' after the metric must be followed by a statistic")
    try:
        limit = float(limit_text)
    except ValueError:
        raise _malformed_slo(spec, f"limit {limit_text.strip()!r} is not a number") from None
    if not (math.isfinite(limit) and limit > 0):
        raise _malformed_slo(spec, f"limit {limit_text.strip()!r} must be a finite number > 0")
    return Slo(metric=metric, statistic=_parse_statistic(spec, statistic) if statistic else None, limit=limit)
