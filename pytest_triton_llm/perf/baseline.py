"""Perf baselines, like pytest-benchmark's: save a run's load points, compare a later run with them.

--perf-compare-fail METRIC:PCT fails a load point whose METRIC got worse by more than PCT percent (with --perf-repeats
on both sides: significantly more, by a Welch test; against a reference measured in interleaved rounds, --perf-against:
by a paired test of the rounds' ratios).
METRIC is a top-level key (throughput_rps, output_tokens_per_s) or stat.key (latency_ms.p99,
ttft_ms.p50, itl_ms.mean, ...): higher is better for throughputs, lower for times.
A baseline saved before itl_ms meant aiperf's ITL (per request) held the pooled gaps under that name: it is read with
them as icl_ms (migrate_point), and a rule on itl_ms finds nothing there to compare with and says so.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path

from ..common.files import keep_previous, read_document, write_json
from ..verdicts.significance import paired_drop, welch_compare
from .metrics import STATS, metric_value
from ..common.errors import TritonLLMError

KIND = "pytest-triton-llm perf baseline"
SCHEMA = 1
HIGHER_IS_BETTER = ("throughput_rps", "output_tokens_per_s")
TIMES = ("latency_ms", "ttft_ms", "itl_ms", "icl_ms", "tpot_ms")


class BaselineError(TritonLLMError, ValueError):
    pass


@dataclass(frozen=True)
class FailRule:
    metric: str
    percent: float

    @classmethod
    def parse(cls, text: str) -> FailRule:
        metric, sep, pct = text.rpartition(":")
        group, _, stat = metric.partition(".")
        valid = metric in HIGHER_IS_BETTER or (group in TIMES and stat in STATS)
        if not sep or not valid:
            raise BaselineError(
                f"--perf-compare-fail {text!r}: expected METRIC:PCT with METRIC one of "
                f"{', '.join(HIGHER_IS_BETTER)} or {'|'.join(TIMES)}.mean|p50|p90|p99"
            )
        try:
            return cls(metric, float(pct))
        except ValueError:
            raise BaselineError(f"--perf-compare-fail {text!r}: PCT must be a number") from None

    def value(self, result: dict) -> float | None:
        return metric_value(result, self.metric)

    def samples(self, result: dict) -> list[float]:
        """The metric of each repeat (--perf-repeats), else of the one run."""
        runs = result.get("runs") or [result]
        return [v for run in runs if (v := metric_value(run, self.metric)) is not None]

    def power(self, baseline: dict, current: dict, alpha: float = 0.05) -> str:
        """What this comparison can catch: with repeats on both sides, the smallest regression the Welch test catches
        with probability 0.8 (the allowed percent plus what the runs' spread hides); else one run each, no test."""
        before_runs, now_runs = self.samples(baseline), self.samples(current)
        if len(before_runs) >= 2 and len(now_runs) >= 2 and min(before_runs) > 0:
            w = welch_compare(before_runs, now_runs, alpha, self.metric in HIGHER_IS_BETTER, self.percent)
            return f"{self.metric}: catches {w.detectable_regression_pct:.1f}% or worse with power 0.8"
        return f"{self.metric}: one run each, no test (use --perf-repeats on both sides)"

    def regression(self, baseline: dict, current: dict, alpha: float = 0.05) -> str | None:
        """How this metric got worse past the allowed percent, in words; None when it did not. With repeats on both
        sides a Welch test decides (worse by significantly more than the allowed percent); else the values do."""
        before_runs, now_runs = self.samples(baseline), self.samples(current)
        if len(before_runs) >= 2 and len(now_runs) >= 2 and min(before_runs) > 0:
            higher_better = self.metric in HIGHER_IS_BETTER
            w = welch_compare(before_runs, now_runs, alpha, higher_better, self.percent)
            if w.verdict == "pass":
                return None
            return (
                f"{self.metric} {'dropped' if higher_better else 'rose'} {w.regression_pct:.1f}% "
                f"({w.baseline_mean:g} -> {w.current_mean:g} over {len(before_runs)} and {len(now_runs)} runs; "
                f"allowed {self.percent:g}%, Welch p {w.p_value:.3g}, "
                f"detectable {w.detectable_regression_pct:.1f}%)"
            )
        before, now = self.value(baseline), self.value(current)
        if before is None and now is not None:  # e.g. itl_ms of a baseline saved when it meant the pooled gaps
            return f"{self.metric}: the baseline has no value to compare {now:g} with"
        if before is None or now is None or before == 0:
            return None
        higher_better = self.metric in HIGHER_IS_BETTER
        worse_pct = 100.0 * ((before - now) / before if higher_better else (now - before) / before)
        if worse_pct <= self.percent:
            return None
        direction = "dropped" if higher_better else "rose"
        return f"{self.metric} {direction} {worse_pct:.1f}% ({before:g} -> {now:g}; allowed {self.percent:g}%)"

    def paired(self, reference_runs: list[dict], runs: list[dict], alpha: float = 0.05) -> dict:
        """This metric against a reference measured in the same rounds (round i of each side back to back): a one-sided
        paired t test on the rounds' log ratios, so that what slows both sides of a round (a busy neighbour) cancels.
        Fails when the metric is worse than the reference by significantly more than the allowed percent; says the
        smallest slowdown the rounds catch with probability 0.8."""
        pairs = [
            (b, a)
            for ref, run in zip(reference_runs, runs, strict=True)
            if (b := metric_value(ref, self.metric)) and (a := metric_value(run, self.metric))
        ]
        higher_better = self.metric in HIGHER_IS_BETTER
        ratios = [round(a / b, 4) for b, a in pairs]
        record = {"metric": self.metric, "allowed_pct": self.percent, "ratios": ratios}
        if len(pairs) < 2:
            return {**record, "regression": f"{self.metric}: {len(pairs)} rounds with a value on both sides, 2 needed"}
        # worse is positive either way: a throughput's log drop, a time's log rise
        worse = [math.log(b / a) if higher_better else math.log(a / b) for b, a in pairs]
        tolerance = -math.log(1 - self.percent / 100) if higher_better else math.log(1 + self.percent / 100)
        drift = paired_drop(worse, [0.0] * len(worse), max_drop=tolerance, alpha=alpha)

        def pct(log_worse: float) -> float:
            return 100 * (1 - math.exp(-log_worse)) if higher_better else 100 * (math.exp(log_worse) - 1)

        # decided: the interval is wholly past the tolerance (fail) or wholly within it (pass); else more rounds
        # could still tell (--perf-repeats-max)
        undecided = drift.verdict == "pass" and drift.ci_high > tolerance
        record.update(
            undecided=undecided,
            worse_pct=round(pct(drift.mean_drop), 2),
            p_value=round(drift.p_value, 4),
            detectable_pct=round(pct(drift.detectable_drop), 2),
            power=f"{self.metric}: catches {pct(drift.detectable_drop):.1f}% or worse with power 0.8 "
            f"({len(pairs)} interleaved rounds)",
        )
        record["regression"] = (
            None
            if drift.verdict == "pass"
            else (
                f"{self.metric} {'dropped' if higher_better else 'rose'} {pct(drift.mean_drop):.1f}% against the reference "
                f"(round ratios {', '.join(f'{r:g}' for r in ratios)}; allowed {self.percent:g}%, paired t p "
                f"{drift.p_value:.3g}, detectable {pct(drift.detectable_drop):.1f}%)"
            )
        )
        return record


# what a baseline's load point must share with this run's to be compared at all; what may differ is said beside the
# verdict (an upgrade gate compares across images and rebuilt engines on purpose)
MUST_MATCH = ("workload", "hardware")
SAID = ("image", "engine_digest")


def comparable(before: dict, now: dict) -> tuple[str | None, list[str]]:
    """(why the two load points cannot be compared, or None; what differs that the verdict must say)."""
    refused = [f"{k} {before.get(k)!r} (baseline) vs {now.get(k)!r}" for k in MUST_MATCH if before.get(k) != now.get(k)]
    said = [f"{k} {before.get(k)} -> {now.get(k)}" for k in SAID if before.get(k) != now.get(k)]
    return ("; ".join(refused) or None), said


def migrate_point(entry: dict) -> dict:
    """A load point (of a baseline or a report) written before itl_ms meant aiperf's ITL, in place: one without icl_ms
    held the pooled gaps as itl_ms, now icl_ms; it has no aiperf ITL. Its runs, its repeats' spread and a reference's
    median run the same."""
    if "itl_ms" not in entry or "icl_ms" in entry:  # written with both names (since 0.1.0): as it is
        return entry
    for point in (entry, *entry.get("runs", ()), (entry.get("compared") or {}).get("reference") or {}):
        if "itl_ms" in point and "icl_ms" not in point:
            point["icl_ms"] = point.pop("itl_ms")
    spread = entry.get("repeats") or {}
    for key in [k for k in spread if k.startswith("itl_ms.")]:
        spread["icl_ms." + key.partition(".")[2]] = spread.pop(key)
    return entry


def load_baseline(path: str | Path) -> dict:
    data = read_document(path, KIND, SCHEMA, "--perf-compare", "--perf-save", BaselineError)
    for points in (data.get("deployments") or {}).values():
        for entry in points.values():
            migrate_point(entry)
    return data


def save_baseline(path: str | Path, results: dict, run: dict) -> Path | None:
    """results: {deployment: {load point: perf entry}}; an earlier file is kept aside (returned)."""
    path = Path(path)
    backup = keep_previous(path)
    write_json(path, {"schema": SCHEMA, "kind": KIND, "run": run, "deployments": results})
    return backup
