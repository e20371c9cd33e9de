"""Budgets from a user's own runs (`--perf-calibrate N`, and scripts/derive_budgets.py over several sessions).

Each load point's limits lie `margin` beyond the worst of its runs' figures, the margin at least MIN_MARGIN and
otherwise the runs' coefficient of variation times the one-sided 99% Student t prediction factor for one more run
(t(0.99, n-1)·sqrt(1 + 1/n): 8.0 for 3 runs, 2.6 for 20): a spread the calibration saw is a spread the next run may
show, and a few runs cannot tell how wide it is (three times the spread of 3 runs failed a next run in shared CI).
Entries are keyed by engine, deployment, hardware class, image, load point, workload and engine digest, so that
they judge that engine build on that class of machine only; an entry whose keys the file already holds is never
replaced, and budgets of another hardware class are never derived from these runs."""

from __future__ import annotations

import datetime as dt
import statistics
from pathlib import Path

from ..verdicts.significance import t_quantile
from .budgets import LIMITS, Budget, load_budgets
from .metrics import metric_value, perf_load_points

DERIVED = ("min_output_tokens_per_s", "max_latency_p99_ms", "max_ttft_p99_ms")  # of budgets.LIMITS
MIN_MARGIN = 0.10
PREDICTION_LEVEL = 0.99


def prediction_factor(runs: int) -> float:
    """How many standard deviations one more run may lie from the mean of `runs` runs (one-sided, PREDICTION_LEVEL)."""
    return t_quantile(PREDICTION_LEVEL, runs - 1) * (1 + 1 / runs) ** 0.5


def _figures(point: dict, metric: str) -> list[float]:
    """Every run's figure of `metric` (--perf-repeats keeps them in `runs`), else the one run's."""
    return [v for run in point.get("runs") or [point] if (v := metric_value(run, metric)) is not None]


def limits_of(point: dict) -> tuple[dict[str, float], list[str]]:
    """The limits calibrated from one load point's runs, and what each was derived from (for the entry's comment)."""
    limits, notes = {}, []
    for limit in DERIVED:
        values = _figures(point, LIMITS[limit])
        if not values:  # TTFT of a deployment that does not stream
            continue
        floor = limit.startswith("min_")
        spread = statistics.stdev(values) / statistics.fmean(values) if len(values) > 1 and statistics.fmean(values) else 0
        margin = max(MIN_MARGIN, prediction_factor(len(values)) * spread) if spread else MIN_MARGIN
        worst = min(values) if floor else max(values)
        limits[limit] = round(worst / (1 + margin), 1) if floor else round(worst * (1 + margin))
        notes.append(f"{LIMITS[limit]} {' / '.join(f'{v:.4g}' for v in values)} (cv {spread:.1%}, margin {margin:.0%})")
    return limits, notes


def keys_of(engine: str, deployment: str, point: dict, load_point: str) -> dict[str, str]:
    return {
        "engine": engine,
        "deployment": deployment,
        "hardware": point["hardware_class"],
        "image": point["image"],
        "load_point": load_point,
        "workload": point["workload"],
        "engine_digest": point.get("engine_digest") or "*",
    }


def entry_text(keys: dict[str, str], limits: dict[str, float], notes: list[str], today: str, runs: int) -> str:
    lines = [f"[[budget]]  # calibrated {today} from {runs} run(s): {'; '.join(notes)}"]
    lines += [f'{k} = "{v}"' for k, v in keys.items() if v != "*"]
    return "\n".join(lines + [f"{limit} = {value:g}" for limit, value in limits.items()])


def calibrate(path: Path, document: dict, today: str) -> tuple[list[str], list[str]]:
    """Append to the budgets file at `path` (created if missing) an entry per perf load point of the report
    `document`; -> (load points calibrated, load points skipped and why)."""
    existing = load_budgets(path) if path.exists() and path.read_text().strip() else []
    held = {tuple(getattr(b, k) for k in Budget.KEYS) for b in existing}
    entries, done, skipped = [], [], []
    for deployment_id, _, points in perf_load_points(document):
        engine, deployment = deployment_id.split(":", 1)
        for load_point, point in sorted(points.items()):
            name = f"{deployment_id} {load_point}"
            keys = keys_of(engine, deployment, point, load_point)
            limits, notes = limits_of(point)
            if tuple(keys[k] for k in Budget.KEYS) in held:
                skipped.append(f"{name}: {path} already holds a budget with these keys; it is kept as it is")
            elif point.get("errors") or not limits:
                skipped.append(f"{name}: {point.get('errors')} requests failed, or nothing measured: nothing to calibrate")
            else:
                entries.append(entry_text(keys, limits, notes, today, len(point.get("runs") or [point])))
                done.append(name)
    if entries:
        before = "\n" if path.exists() and path.read_text().strip() else ""  # a blank line after what the file holds
        with path.open("a") as handle:
            handle.write(before + "\n\n".join(entries) + "\n")
    return done, skipped


def write_calibrated(path: Path, document: dict) -> list[str]:
    """--perf-calibrate at the session's end: the budgets appended, as progress lines."""
    done, skipped = calibrate(path, document, dt.date.today().isoformat())
    lines = [f"perf calibration: {len(done)} load point(s) calibrated into {path}; the same command judges them now"]
    return lines + [f"perf calibration: skipped {why}" for why in skipped]
