import math

import numpy as np
import pytest

from pytest_triton_llm.verdicts.significance import (
    against_budget,
    against_reference_fraction,
    against_threshold,
    articles_needed,
    detectable_drop,
    goodput,
    mean_ci,
    normal_quantile,
    paired_drop,
    parse_slo,
    t_cdf,
    t_quantile,
    welch_compare,
)

SIMULATIONS = 200
ARTICLES = 60
ALPHA = 0.05
POWER = 0.8


def simulation_error(rate: float) -> float:
    """Three binomial standard errors of a rate estimated from SIMULATIONS runs."""
    return 3 * math.sqrt(rate * (1 - rate) / SIMULATIONS)


def rouge_pairs(rng: np.random.Generator, true_drop: float, noise_sd: float) -> tuple[np.ndarray, np.ndarray]:
    """Per-article ROUGE-like scores (mean 30, sd 11 between articles) scored by a baseline and a current run whose
    per-article difference has sd `noise_sd` and mean `true_drop` (positive: current is worse)."""
    articles = rng.normal(30.0, 11.0, ARTICLES)
    baseline = articles + rng.normal(0.0, noise_sd / math.sqrt(2), ARTICLES)
    current = articles + rng.normal(0.0, noise_sd / math.sqrt(2), ARTICLES) - true_drop
    return baseline, current


def drift_fail_rate(seed: int, true_drop: float, noise_sd: float, max_drop: float = 0.0) -> float:
    rng = np.random.default_rng(seed)
    verdicts = [
        paired_drop(*rouge_pairs(rng, true_drop, noise_sd), max_drop=max_drop, alpha=ALPHA, power=POWER).verdict
        for _ in range(SIMULATIONS)
    ]
    return verdicts.count("fail") / SIMULATIONS


def scores_with(mean: float, sd: float, n: int, seed: int = 0) -> np.ndarray:
    """n scores whose sample mean and sample sd are exactly `mean` and `sd`."""
    raw = np.random.default_rng(seed).normal(size=n)
    return mean + sd * (raw - raw.mean()) / raw.std(ddof=1)


# --- the t distribution ---


@pytest.mark.parametrize(
    "p, df, expected",
    [(0.975, 10, 2.228139), (0.95, 59, 1.671093), (0.975, 1, 12.7062), (0.995, 3, 5.840909)],
)
def test_t_quantiles_match_the_published_tables(p, df, expected):
    assert t_quantile(p, df) == pytest.approx(expected, abs=1e-4)
    assert t_quantile(1 - p, df) == pytest.approx(-expected, abs=1e-4)


@pytest.mark.parametrize("x", [-7.5, -1.0, 0.3, 2.0, 40.0])
def test_the_t_cdf_matches_the_closed_forms_for_one_and_two_degrees_of_freedom(x):
    assert t_cdf(x, 1) == pytest.approx(0.5 + math.atan(x) / math.pi, abs=1e-12)
    assert t_cdf(x, 2) == pytest.approx(0.5 + x / (2 * math.sqrt(2 + x * x)), abs=1e-12)


def test_the_t_quantile_inverts_the_t_cdf_at_fractional_degrees_of_freedom():
    for p in (0.6, 0.9, 0.999):
        assert t_cdf(t_quantile(p, 7.3), 7.3) == pytest.approx(p, abs=1e-12)


def test_t_quantiles_approach_the_normal_ones_as_degrees_of_freedom_grow():
    z = normal_quantile(0.975)
    assert z == pytest.approx(1.959964, abs=1e-6)
    assert t_quantile(0.975, 1e6) == pytest.approx(z, abs=1e-5)
    assert t_quantile(0.975, 30) > t_quantile(0.975, 300) > z


# --- mean_ci ---


def test_mean_ci_of_one_to_five_is_three_plus_or_minus_the_t_half_width():
    summary = mean_ci([1, 2, 3, 4, 5])
    half_width = 2.776445 * math.sqrt(2.5) / math.sqrt(5)
    assert (summary.n, summary.mean) == (5, 3.0)
    assert summary.std == pytest.approx(math.sqrt(2.5))
    assert summary.cv == pytest.approx(math.sqrt(2.5) / 3)
    assert summary.ci_low == pytest.approx(3 - half_width, abs=1e-5)
    assert summary.ci_high == pytest.approx(3 + half_width, abs=1e-5)


def test_a_single_value_has_a_mean_but_no_interval():
    summary = mean_ci([42.0])
    assert summary.mean == 42.0
    assert (summary.std, summary.cv, summary.ci_low, summary.ci_high) == (None, None, None, None)


def test_a_zero_mean_has_no_coefficient_of_variation():
    assert mean_ci([-1.0, 1.0]).cv is None


# --- paired drift ---


def test_same_distribution_runs_fail_the_drift_gate_at_most_alpha_of_the_time():
    rate = drift_fail_rate(seed=1, true_drop=0.0, noise_sd=3.0)
    assert rate <= ALPHA + simulation_error(ALPHA)


def test_a_true_drop_equal_to_the_detectable_drop_fails_at_least_power_of_the_time():
    pilot = paired_drop(*rouge_pairs(np.random.default_rng(2), 0.0, noise_sd=3.0), alpha=ALPHA, power=POWER)
    assert pilot.detectable_drop == pytest.approx(detectable_drop(pilot.sd_drop, ARTICLES, ALPHA, POWER))
    rate = drift_fail_rate(seed=3, true_drop=pilot.detectable_drop, noise_sd=3.0)
    assert rate >= POWER - simulation_error(POWER)


def test_a_ten_percent_drop_over_sixty_articles_is_caught():
    # a 3-point drop on a mean of 30, with per-article run-to-run differences of sd 6 points
    assert drift_fail_rate(seed=4, true_drop=3.0, noise_sd=6.0) >= 0.95


def test_a_drop_within_the_tolerance_passes_even_when_clearly_nonzero():
    baseline, current = rouge_pairs(np.random.default_rng(5), true_drop=1.0, noise_sd=1.0)
    result = paired_drop(baseline, current, max_drop=2.0)
    assert result.ci_low > 0  # the drop is real...
    assert result.verdict == "pass"  # ...but not beyond what is allowed
    assert result.p_value > 0.5


def test_the_drift_gate_fails_exactly_when_the_lower_one_sided_bound_clears_max_drop():
    baseline, current = rouge_pairs(np.random.default_rng(6), true_drop=2.0, noise_sd=3.0)
    result = paired_drop(baseline, current, alpha=0.05)
    drops = baseline - current
    half_width = t_quantile(0.95, ARTICLES - 1) * drops.std(ddof=1) / math.sqrt(ARTICLES)
    assert (result.ci_low, result.ci_high) == pytest.approx((drops.mean() - half_width, drops.mean() + half_width))
    assert result.ci_low > 0
    # the one-sided test at level alpha and the 1 - alpha lower bound are the same decision
    assert paired_drop(baseline, current, max_drop=result.ci_low - 1e-9).verdict == "fail"
    assert paired_drop(baseline, current, max_drop=result.ci_low + 1e-9).verdict == "pass"
    assert paired_drop(baseline, current, max_drop=result.ci_low).p_value == pytest.approx(0.05)


def test_a_gate_that_cannot_see_twice_its_tolerance_is_underpowered():
    baseline, current = rouge_pairs(np.random.default_rng(7), true_drop=0.0, noise_sd=10.0)
    loose = paired_drop(baseline, current, max_drop=0.1)
    assert loose.detectable_drop > 0.2 and loose.underpowered is True
    assert paired_drop(baseline, current, max_drop=5.0).underpowered is False
    assert paired_drop(baseline, current).underpowered is None  # max_drop 0: no scale unless must_catch is given
    assert paired_drop(baseline, current, must_catch=1.0).underpowered is True


def test_identical_differences_are_an_exact_drop():
    baseline = np.arange(10.0)
    assert paired_drop(baseline, baseline - 0.5, max_drop=0.4).verdict == "fail"
    assert paired_drop(baseline, baseline - 0.5, max_drop=0.5).verdict == "pass"


def test_paired_drop_refuses_unequal_or_too_short_inputs():
    with pytest.raises(ValueError, match="equal lengths"):
        paired_drop([1.0, 2.0, 3.0], [1.0, 2.0])
    with pytest.raises(ValueError, match="at least 2"):
        paired_drop([1.0], [1.0])


def test_articles_needed_is_the_first_sample_size_whose_detectable_drop_fits():
    needed = articles_needed(sd=3.0, delta=1.0)
    assert detectable_drop(3.0, needed) <= 1.0 < detectable_drop(3.0, needed - 1)
    assert articles_needed(sd=3.0, delta=0.5) > needed
    assert articles_needed(sd=3.0, delta=1e-4) is None  # past the cap


# --- thresholds ---


def test_a_ci_that_straddles_the_threshold_is_inconclusive():
    scores = scores_with(mean=30.5, sd=11.0, n=60)
    result = against_threshold(scores, threshold=30.0)
    assert result.lower_bound < 30.0 < result.upper_bound
    assert result.verdict == "inconclusive"
    assert result.items_needed > 60
    # the same mean and sd over items_needed items decides it, one fewer does not
    assert against_threshold(scores_with(30.5, 11.0, result.items_needed), 30.0).verdict == "pass"
    assert against_threshold(scores_with(30.5, 11.0, result.items_needed - 1), 30.0).verdict == "inconclusive"


def test_scores_wholly_below_the_threshold_fail():
    result = against_threshold(scores_with(mean=25.0, sd=11.0, n=60), threshold=30.0)
    assert result.upper_bound < 30.0
    assert (result.verdict, result.items_needed) == ("fail", None)


def test_scores_wholly_above_the_threshold_pass():
    result = against_threshold(scores_with(mean=35.0, sd=11.0, n=60), threshold=30.0)
    assert result.lower_bound > 30.0
    assert result.verdict == "pass"


def test_a_mean_exactly_on_the_threshold_can_never_be_decided():
    result = against_threshold(scores_with(mean=30.0, sd=11.0, n=60), threshold=30.0)
    assert (result.verdict, result.items_needed) == ("inconclusive", None)


def test_the_reference_fraction_tier_is_a_threshold_at_that_fraction():
    scores = scores_with(mean=29.9, sd=1.0, n=200)
    assert against_reference_fraction(scores, reference_score=30.0, fraction=0.99).verdict == "pass"
    assert against_reference_fraction(scores, reference_score=30.0, fraction=0.999).verdict == "inconclusive"
    assert against_reference_fraction(scores, reference_score=31.0, fraction=0.999).verdict == "fail"


# --- Welch ---


def test_welch_passes_identical_perf_distributions_mostly():
    rng = np.random.default_rng(8)
    verdicts = [welch_compare(rng.normal(1000, 20, 5), rng.normal(1000, 20, 5)).verdict for _ in range(SIMULATIONS)]
    assert verdicts.count("fail") / SIMULATIONS <= ALPHA + simulation_error(ALPHA)


def test_welch_fails_a_clear_throughput_regression():
    rng = np.random.default_rng(9)
    result = welch_compare(rng.normal(1000, 10, 5), rng.normal(900, 10, 5), higher_is_better=True)
    assert result.verdict == "fail"
    assert result.regression_pct == pytest.approx(-result.change_pct)
    assert 8 < result.regression_pct < 12
    assert result.p_value < 1e-4
    assert result.detectable_regression_pct < result.regression_pct


def test_welch_reads_a_latency_increase_as_a_regression_when_lower_is_better():
    rng = np.random.default_rng(10)
    baseline, current = rng.normal(100, 2, 8), rng.normal(115, 2, 8)
    assert welch_compare(baseline, current, higher_is_better=False).verdict == "fail"
    assert welch_compare(baseline, current, higher_is_better=True).verdict == "pass"  # faster would be better
    assert welch_compare(baseline, current, higher_is_better=False, max_regression_pct=30).verdict == "pass"


def test_welch_degrees_of_freedom_follow_welch_satterthwaite():
    baseline, current = [10.0, 12.0, 11.0, 13.0], [9.0, 15.0, 12.0, 8.0, 14.0, 11.0]
    result = welch_compare(baseline, current)
    vb, vc = np.var(baseline, ddof=1) / 4, np.var(current, ddof=1) / 6
    assert result.df == pytest.approx((vb + vc) ** 2 / (vb**2 / 3 + vc**2 / 5))
    assert result.t == pytest.approx((np.mean(baseline) - np.mean(current)) / math.sqrt(vb + vc))


def test_welch_with_zero_variance_treats_the_means_as_exact():
    same = welch_compare([100.0] * 5, [100.0] * 5)
    assert (same.verdict, same.p_value, same.detectable_regression_pct) == ("pass", 1.0, 0.0)
    worse = welch_compare([100.0] * 5, [90.0] * 5)
    assert (worse.verdict, worse.p_value) == ("fail", 0.0)
    tolerated = welch_compare([100.0] * 5, [95.0] * 5, max_regression_pct=10.0)
    assert tolerated.verdict == "pass"
    assert math.isinf(tolerated.df)


# --- budgets ---


def test_a_budget_fails_only_when_the_whole_interval_is_on_the_wrong_side():
    assert against_budget([90.0, 92.0, 91.0, 89.0], limit=100.0, kind="min").verdict == "fail"
    assert against_budget([110.0, 112.0, 111.0, 109.0], limit=100.0, kind="max").verdict == "fail"


def test_a_budget_passes_when_the_whole_interval_is_on_the_right_side():
    assert against_budget([110.0, 112.0, 111.0, 109.0], limit=100.0, kind="min").verdict == "pass"
    assert against_budget([90.0, 92.0, 91.0, 89.0], limit=100.0, kind="max").verdict == "pass"


def test_a_budget_whose_interval_straddles_the_limit_is_inconclusive():
    samples = [95.0, 108.0, 99.0, 103.0]
    for kind in ("min", "max"):
        result = against_budget(samples, limit=100.0, kind=kind)
        assert result.ci_low < 100.0 < result.ci_high
        assert result.verdict == "inconclusive"


def test_a_single_sample_budget_compares_the_value_itself():
    assert against_budget([99.0], limit=100.0, kind="min").verdict == "fail"
    assert against_budget([99.0], limit=100.0, kind="max").verdict == "pass"
    with pytest.raises(ValueError, match="'min'.*'max'"):
        against_budget([99.0], limit=100.0, kind="ceiling")


# --- goodput and SLOs ---


def test_goodput_counts_requests_that_meet_every_named_slo():
    requests = [
        {"ttft_ms": 120.0, "itl_ms": 30.0, "latency_ms": 900.0},  # good
        {"ttft_ms": 500.0, "itl_ms": 50.0, "latency_ms": 5000.0},  # good: limits are inclusive, latency is not an SLO
        {"ttft_ms": 501.0, "itl_ms": 30.0},  # ttft too slow
        {"ttft_ms": 120.0, "itl_ms": 51.0},  # itl too slow
        {"ttft_ms": 120.0},  # no itl: cannot be shown to meet it
        {"ttft_ms": 120.0, "itl_ms": None},  # same
    ]
    result = goodput(requests, {"ttft_ms": 500.0, "itl_ms": 50.0}, duration_s=4.0)
    assert (result.good, result.total) == (2, 6)
    assert result.fraction == pytest.approx(2 / 6)
    assert result.goodput_rps == pytest.approx(0.5)


def test_goodput_of_no_requests_is_zero():
    assert goodput([], {"ttft_ms": 500.0}, duration_s=1.0).fraction == 0.0


@pytest.mark.parametrize(
    "spec, metric, statistic, limit",
    [
        ("ttft_ms.p99:500", "ttft_ms", "p99", 500.0),
        ("itl_ms.P99.9:12.5", "itl_ms", "p99.9", 12.5),
        (" latency_ms.mean : 900 ", "latency_ms", "mean", 900.0),
        ("itl_ms:50", "itl_ms", None, 50.0),
    ],
)
def test_parse_slo_reads_metric_statistic_and_limit(spec, metric, statistic, limit):
    slo = parse_slo(spec)
    assert (slo.metric, slo.statistic, slo.limit) == (metric, statistic, limit)


@pytest.mark.parametrize(
    "spec, why",
    [
        ("ttft_ms.p99", "exactly one ':'"),
        ("ttft_ms.p99:5:0", "exactly one ':'"),
        ("ttft_ms.p99:fast", "not a number"),
        ("ttft_ms.p99:-5", "> 0"),
        ("ttft_ms.p99:inf", "> 0"),
        ("ttft_ms.p101:500", "statistic 'p101'"),
        ("ttft_ms.avg:500", "statistic 'avg'"),
        ("9ttft.p99:500", "not a name"),
        ("ttft_ms.:500", "followed by"),
    ],
)
def test_parse_slo_says_what_is_wrong_and_what_a_valid_one_looks_like(spec, why):
    with pytest.raises(ValueError) as raised:
        parse_slo(spec)
    assert why in str(raised.value)
    assert "ttft_ms.p99:500" in str(raised.value)
