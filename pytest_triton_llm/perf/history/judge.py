"""The history's verdict: which change points are regressions, which of them are new, and what changed there.

A change point is a regression when its metric moved the worse way (fixtures/perf_history.toml's direction). It
fails the command when it lies among the newest runs (`newest`); older ones are reported. The newest run alone, which
no change-point test can confirm, is also judged on the headline metric against the runs since the last change point:
outside their one-sided prediction interval, on the worse side, it fails as an unconfirmed regression."""

from __future__ import annotations

import math
import statistics
from dataclasses import dataclass
from pathlib import Path

from ...common.files import fixtures_dir
from ...common.schema import load_toml
from ...verdicts.significance import t_quantile
from .otava import ChangePoint
from .store import ATTRIBUTES, Series

SETTINGS = "perf_history.toml"


@dataclass(frozen=True)
class Settings:
    metrics: dict[str, int]  # metric -> direction (1: higher is better)
    p_value: float
    magnitude: float
    newest: int
    newest_run_alpha: float
    newest_run_metric: str


@dataclass(frozen=True)
class Regression:
    series: str
    metric: str
    index: int  # the first worse run
    runs: int  # the series' length
    started: str  # when that run started
    change_percent: float
    p_value: float | None  # Otava's; None: the newest run alone, its own check
    changed: str  # what differs from the run before: "image 24.09 -> 24.10, commit a -> b", or "nothing recorded"

    @property
    def confirmed(self) -> bool:
        """A change point (Otava's, with its p-value), not the newest run judged alone."""
        return self.p_value is not None

    def line(self) -> str:
        if self.p_value is None:
            how = "the newest run alone, unconfirmed"
        else:  # Otava rounds p to 6 decimals
            how = f"p {self.p_value:.2g}" if self.p_value > 0 else "p < 1e-6"
        return (
            f"{self.series} {self.metric}: {self.change_percent:+.1f}% from run {self.index + 1} of {self.runs} "
            f"({self.started}; {how}); changed there: {self.changed}"
        )


def load_settings(path: Path | None = None) -> Settings:
    """fixtures/perf_history.toml, or the user's file of its schema; ValueError naming the file otherwise."""
    path = path or fixtures_dir() / SETTINGS
    data = load_toml(path)
    try:
        return Settings(metrics=dict(data["metrics"]), **data["detection"])
    except (KeyError, TypeError) as exc:
        raise ValueError(f"{path}: expected [metrics] and [detection] as fixtures/{SETTINGS} has them ({exc})") from None


def regressions(series: list[Series], points: list[ChangePoint], settings: Settings) -> list[Regression]:
    """Every regression change point, and the newest run of each series where it alone is worse."""
    by_name = {s.name: s for s in series}
    found = []
    for point in points:
        one = by_name[point.series]
        if settings.metrics.get(point.metric, 1) * point.change_percent < 0:
            found.append(
                Regression(
                    series=one.name,
                    metric=point.metric,
                    index=point.index,
                    runs=len(one.started),
                    started=one.started[point.index],
                    change_percent=point.change_percent,
                    p_value=point.p_value,
                    changed=changed(one, point.index),
                )
            )
    metric = settings.newest_run_metric
    for one in series:
        mine = [p.index for p in points if p.series == one.name and p.metric == metric]
        newest = len(one.started) - 1
        if newest in mine:  # Otava's own change point at the newest run: already found above
            continue
        if (alone := _newest_run(one, max(mine, default=0), settings)) is not None:
            found.append(alone)
    return found


def failing(found: list[Regression], settings: Settings) -> list[Regression]:
    """Those among the newest `settings.newest` runs of their series, and the newest runs' own."""
    return [r for r in found if not r.confirmed or r.runs - r.index <= settings.newest]


def changed(series: Series, index: int) -> str:
    """What the run at `index` records differently from the run before it."""
    if index == 0:
        return "nothing before it"
    before, after = series.attributes[index - 1], series.attributes[index]
    diffs = [f"{a} {before.get(a)} -> {after.get(a)}" for a in ATTRIBUTES if before.get(a) != after.get(a)]
    return ", ".join(diffs) or "nothing recorded (same image, server, backend, engine, hardware and commit)"


def _newest_run(series: Series, since: int, settings: Settings) -> Regression | None:
    metric = settings.newest_run_metric
    values = series.values.get(metric) or []
    earlier = [v for v in values[since:-1] if v is not None]
    if len(earlier) < 3 or not values or values[-1] is None:
        return None
    mean, sd, n = statistics.fmean(earlier), statistics.stdev(earlier), len(earlier)
    bound = t_quantile(1.0 - settings.newest_run_alpha, n - 1) * sd * math.sqrt(1.0 + 1.0 / n)
    direction = settings.metrics.get(metric, 1)
    if direction * (values[-1] - mean) >= -bound:
        return None
    last = len(values) - 1
    change = 100.0 * (values[-1] / mean - 1.0) if mean else 0.0
    return Regression(series.name, metric, last, len(values), series.started[last], change, None, changed(series, last))
