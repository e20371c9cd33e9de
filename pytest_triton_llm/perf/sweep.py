"""--perf-sweep: concurrency 1, 2, 4, ... until output throughput stalls or an SLO breaks, and the knee it finds."""

from __future__ import annotations

from ..verdicts.significance import mean_ci

STALL_GAIN_PCT = 5.0  # a step that adds less output throughput than this over the one before has stalled (issue 27)
# a step meets the SLOs when this share of its requests meets every one: MLPerf's rule for its latency limits is the
# 99th percentile (loadgen/mlperf.conf, *.Server.target_latency_percentile = 99)
MIN_GOOD_FRACTION = 0.99
THROUGHPUT = "output_tokens_per_s"


def concurrencies(limit: int) -> list[int]:
    """1, 2, 4, ... up to `limit`, and `limit` itself where it is no power of two."""
    steps = [1]
    while steps[-1] * 2 <= limit:
        steps.append(steps[-1] * 2)
    return steps if steps[-1] == limit else [*steps, limit]


class Sweep:
    """The steps so far; add() says when to stop, result() the knee. With repeats a stall is judged on the step's 95%
    t interval (stalled when even its upper bound gains less than STALL_GAIN_PCT on the previous step's mean; an
    interval that straddles goes on); with one run on the point estimate."""

    def __init__(self, limit: int, slos: bool):
        self.limit, self.slos = limit, slos
        self.steps: list[dict] = []
        self.stopped: str | None = None

    def add(self, concurrency: int, runs: list[dict], goodput: dict | None = None, **extra) -> str | None:
        """Record a step (each run's summary; its goodput over every run's requests with --perf-slo); returns why the
        sweep stops here, or None to go on."""
        samples = [run[THROUGHPUT] for run in runs]
        spread = mean_ci(samples)
        middle = sorted(runs, key=lambda r: r[THROUGHPUT])[len(runs) // 2]  # the run that stands for the step
        step = {
            "concurrency": concurrency,
            THROUGHPUT: round(spread.mean, 2),
            "runs": len(runs),
            "samples": samples,
            "ci95": None
            if spread.ci_low is None or spread.ci_high is None
            else [round(spread.ci_low, 2), round(spread.ci_high, 2)],
            **{k: middle.get(k) for k in ("throughput_rps", "latency_ms", "ttft_ms", "itl_ms", "errors")},
            "goodput": goodput,
            **extra,
        }
        if self.steps:
            step["gain_pct"], step["gain"], stalled = self._gain(self.steps[-1], step)
            if stalled:
                self.stopped = f"stalled at concurrency={concurrency}: {step['gain']}"
        self.steps.append(step)
        if self.slos and goodput is not None and goodput["fraction"] < MIN_GOOD_FRACTION and self.stopped is None:
            self.stopped = (
                f"SLOs broken at concurrency={concurrency}: {goodput['good']}/{goodput['total']} requests within "
                f"every SLO ({goodput['fraction']:.1%} < {MIN_GOOD_FRACTION:.0%})"
            )
        if self.stopped is None and concurrency >= self.limit:
            self.stopped = f"reached --perf-sweep-max {self.limit} without a stall"
        return self.stopped

    def _gain(self, before: dict, step: dict) -> tuple[float, str, bool]:
        """(gain in percent of the means, how it was judged, stalled?)."""
        base = before[THROUGHPUT]
        pct = 100.0 * (step[THROUGHPUT] / base - 1) if base else float("inf")
        prev = f"concurrency={before['concurrency']}"
        if step["ci95"] is None:  # one run a step: the point estimate decides
            stalled = pct < STALL_GAIN_PCT
            return round(pct, 2), f"{pct:+.1f}% on {prev} (one run a step: point estimate)", stalled
        high = 100.0 * (step["ci95"][1] / base - 1) if base else float("inf")
        stalled = high < STALL_GAIN_PCT
        words = f"{pct:+.1f}% on {prev}, 95% interval up to {high:+.1f}% ({step['runs']} runs a step)"
        return round(pct, 2), words, stalled

    def result(self) -> dict:
        """The steps, why the sweep stopped, and the knee: with SLOs the step of the highest goodput among those
        within them; without, the last step before the stall (before the steps leading up to it whose means gained
        under STALL_GAIN_PCT; the last step when none stalled)."""
        knee, why = None, None
        if self.slos:
            within = [s for s in self.steps if s["goodput"] and s["goodput"]["fraction"] >= MIN_GOOD_FRACTION]
            if within:
                knee = max(within, key=lambda s: s["goodput"]["goodput_rps"])
                why = f"the highest goodput ({knee['goodput']['goodput_rps']:g} req/s) of the steps within the SLOs"
            else:
                why = "no step met the SLOs"
        elif self.stopped and self.stopped.startswith("stalled") and len(self.steps) > 1:
            # steps that gained under STALL_GAIN_PCT on their means, though their intervals were too wide to call a
            # stall, belong to it: the knee is the step before the first of them
            first = len(self.steps) - 1
            while first > 1 and self.steps[first - 1]["gain_pct"] < STALL_GAIN_PCT:
                first -= 1
            knee, why = self.steps[first - 1], "the last step before the stall"
            if first < len(self.steps) - 1:
                why += f" (from concurrency={self.steps[first]['concurrency']} on the means gained under {STALL_GAIN_PCT:g}%)"
        elif self.steps:
            knee, why = self.steps[-1], "the last step: throughput had not stalled"
        return {
            "steps": self.steps,
            "stopped": self.stopped,
            "stall_gain_pct": STALL_GAIN_PCT,
            "knee": None if knee is None else knee["concurrency"],
            "knee_why": why,
        }
