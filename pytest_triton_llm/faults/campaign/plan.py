"""The campaign's plan: a pytest run per fault and the clean runs of each deployment that judge them, and the
arguments each run passes (its row's markers, keyword and pytest_args; the baselines a clean run saves)."""

from __future__ import annotations

import re
import sys
from dataclasses import dataclass
from pathlib import Path

from ..catalog import Fault

# their tests measure speed: nothing else of the campaign runs beside such a run
TIMED_MARKERS = ("perf", "batching")


@dataclass(frozen=True)
class Baseline:
    """A placeholder of a row's pytest_args: the option that saves the file in the clean run, those that read it."""

    name: str
    save: str
    reads: tuple[str, ...]  # each takes one value (--opt VALUE or --opt=VALUE); left out of the clean run


BASELINES = (
    Baseline(
        "accuracy_baseline",
        "--accuracy-save",
        ("--accuracy-baseline", "--accuracy-max-drop", "--accuracy-min-exact-match", "--accuracy-min-rouge-l"),
    ),
)
REPEATABLE = ("--perf-compare-fail",)  # a clean run takes every value its rows give


class CampaignError(Exception):
    """The catalog or the options cannot make a campaign; one line."""


def slug(text: str) -> str:
    return re.sub(r"[^A-Za-z0-9_.-]+", "_", text)


# -- the plan ---------------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Run:
    """One pytest subprocess: a fault's run, or a deployment's clean run."""

    label: str  # the fault's name, or "clean <deployment>"
    deployment: str
    markers: tuple[str, ...]
    keyword: str  # pytest's -k expression ("" selects by markers only)
    args: tuple[str, ...]  # the rest of pytest's arguments, placeholders filled
    fault: Fault | None = None
    cleans: tuple[str, ...] = ()  # a fault's: the labels of its deployment's clean runs, which judge it
    baseline: str | None = None  # a fault's: the clean run that saves the baseline it reads (starts after it; not if it failed)
    alone: bool = False  # nothing runs beside it: its tests measure speed

    def argv(self, base: list[str], out: Path) -> list[str]:
        selection = ["-m", " or ".join(self.markers), "--deployment", self.deployment]
        selection += ["-k", self.keyword] if self.keyword else []
        selection += ["--stand-in-fault", self.fault.name] if self.fault else []
        return [
            sys.executable,
            "-m",
            "pytest",
            *base,
            *selection,
            "-p",
            "no:cacheprovider",
            "-q",
            "--basetemp",
            str(out / "basetemp" / slug(self.label)),
            "--triton-llm-report",
            str(report_path(out, self.label)),
            *self.args,
        ]


def report_path(out: Path, label: str) -> Path:
    return out / "runs" / f"{slug(label)}.json"


def log_path(out: Path, label: str) -> Path:
    return out / "runs" / f"{slug(label)}.log"


def baseline_path(out: Path, baseline: Baseline, deployment: str) -> Path:
    return out / "baselines" / f"{baseline.name.replace('_', '-')}-{slug(deployment)}.json"


def _uses(fault: Fault, baseline: Baseline) -> bool:
    return any(f"{{{baseline.name}}}" in arg for arg in fault.pytest_args)


def _fill(args: tuple[str, ...], out: Path, deployment: str) -> tuple[str, ...]:
    for baseline in BASELINES:
        path = str(baseline_path(out, baseline, deployment))
        args = tuple(arg.replace(f"{{{baseline.name}}}", path) for arg in args)
    return args


def _options(args: tuple[str, ...]) -> list[tuple[str, str | None, tuple[str, ...]]]:
    """A row's arguments as (option, value, its words): --opt=VALUE, --opt VALUE, or a --flag alone (value None)."""
    options: list[tuple[str, str | None, tuple[str, ...]]] = []
    for arg in args:
        if options and options[-1][1] is None and not arg.startswith("-"):
            option, _, words = options[-1]
            options[-1] = (option, arg, (*words, arg))
        else:
            option, equals, value = arg.partition("=")
            options.append((option, value if equals else None, (arg,)))
    return options


def _clean_args(deployment: str, faults: list[Fault]) -> tuple[str, ...]:
    """The clean run's share of its rows' arguments: all but the options that read a baseline; an option that two
    rows give different values cannot be both, unless it is repeatable."""
    reads = {option for baseline in BASELINES for option in baseline.reads}
    chosen: dict[str, tuple[str | None, str, tuple[str, ...]]] = {}  # option -> (value, the row that gave it, words)
    for fault in faults:
        for option, value, words in _options(fault.pytest_args):
            if option in reads:
                continue
            if option in REPEATABLE:
                option = f"{option}={value}"
            if option in chosen and chosen[option][0] != value:
                raise CampaignError(
                    f"faults {chosen[option][1]} and {fault.name} of {deployment} give {option} different "
                    f"values ({chosen[option][0]} / {value}): its clean run can run only one"
                )
            chosen.setdefault(option, (value, fault.name, words))
    return tuple(word for _, _, words in chosen.values() for word in words)


def _timed(markers) -> bool:
    return any(m in TIMED_MARKERS for m in markers)


def _clean_run(label: str, deployment: str, rows: list[Fault], markers: tuple[str, ...], out: Path, alone: bool) -> Run:
    keyword = ""
    if any(f.keyword for f in rows):  # a marker name in -k matches the tests that carry it
        keyword = " or ".join(dict.fromkeys(f"({f.keyword or ' or '.join(f.markers)})" for f in rows))
    saves = tuple(
        a for b in BASELINES if any(_uses(f, b) for f in rows) for a in (b.save, str(baseline_path(out, b, deployment)))
    )
    return Run(label, deployment, markers, keyword, (*_clean_args(deployment, rows), *saves), alone=alone)


def _reads_a_baseline(fault: Fault) -> bool:
    return any(_uses(fault, b) for b in BASELINES)


def _clean_runs(deployment: str, faults: list[Fault], out: Path) -> list[Run]:
    """The deployment's clean runs: the tests that time nothing, beside other runs, those that save a baseline apart
    (the faults that read it start as soon as it is saved), and those that time something (perf, batching), alone.
    Each fault is judged against them all."""
    untimed = [f for f in faults if any(not _timed((m,)) for m in f.markers)]
    groups = (
        ("", [f for f in untimed if not _reads_a_baseline(f)], False),
        (" (baselines)", [f for f in untimed if _reads_a_baseline(f)], False),
        (" (timed)", [f for f in faults if _timed(f.markers)], True),
    )
    return [
        _clean_run(
            f"clean {deployment}{suffix}",
            deployment,
            rows,
            tuple(dict.fromkeys(m for f in rows for m in f.markers if _timed((m,)) == timed)),
            out,
            alone=timed,
        )
        for suffix, rows, timed in groups
        if rows
    ]


def plan(faults: list[Fault], out: Path) -> list[Run]:
    """The runs in the order they are offered a slot: the clean runs, then the faults."""
    for fault in faults:
        if not fault.markers:
            raise CampaignError(f"fault {fault.name} names no markers: its run would be the whole suite")
    deployments = {f.deployment: [g for g in faults if g.deployment == f.deployment] for f in faults}
    cleans = {d: _clean_runs(d, rows, out) for d, rows in deployments.items()}
    # the clean run that saves a deployment's baseline: the one whose arguments carry a baseline's save option
    saver = {d: next((c.label for c in runs if any(b.save in c.args for b in BASELINES)), None) for d, runs in cleans.items()}
    runs = [
        Run(
            f.name,
            f.deployment,
            f.markers,
            f.keyword,
            _fill(f.pytest_args, out, f.deployment),
            f,
            cleans=tuple(c.label for c in cleans[f.deployment]),
            baseline=saver[f.deployment] if _reads_a_baseline(f) else None,
            alone=_timed(f.markers),
        )
        for f in faults
    ]
    return [*(c for runs in cleans.values() for c in runs), *runs]


def select(catalog: dict[str, Fault], only: list[str], smoke: bool) -> list[Fault]:
    unknown = [name for name in only if name not in catalog]
    if unknown:
        raise CampaignError(f"--only {', '.join(unknown)}: no such fault (--list names them)")
    if only:
        return [catalog[name] for name in dict.fromkeys(only)]
    return [f for f in catalog.values() if f.smoke or not smoke]
