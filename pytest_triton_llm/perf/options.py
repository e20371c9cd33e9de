"""The perf suite's options (--perf-*): declared, checked and exposed as typed settings."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import pytest

from ..usage import OptionError
from .baseline import FailRule, load_baseline


def add_options(group) -> None:
    group.addoption(
        "--perf-workload", metavar="NAME", default="default", help="workload of fixtures/perf_workloads.toml (default: default)"
    )
    group.addoption("--perf-save", metavar="PATH", help="save this run's perf load points as a baseline")
    group.addoption("--perf-compare", metavar="PATH", help="compare load points with a baseline saved by --perf-save")
    group.addoption(
        "--perf-compare-fail", metavar="METRIC:PCT", action="append", default=[],
        help="fail a load point whose METRIC got worse than the baseline by more than PCT percent "
        "(e.g. output_tokens_per_s:10, latency_ms.p99:20; repeatable)",
    )  # fmt: skip


@dataclass(frozen=True)
class PerfOptions:
    workload: str
    save: str | None
    compare: str | None
    fail_rules: tuple[FailRule, ...]
    baseline: dict | None  # the --perf-compare file, read (and checked) once

    @classmethod
    def from_config(cls, config: pytest.Config) -> PerfOptions:
        opt = config.option
        rules = tuple(FailRule.parse(rule) for rule in opt.perf_compare_fail)
        baseline = None
        if opt.perf_compare:
            baseline = load_baseline(opt.perf_compare)
            if opt.perf_save and Path(opt.perf_save).resolve() == Path(opt.perf_compare).resolve():
                raise OptionError("--perf-save and --perf-compare name the same file: the baseline would be overwritten")
        elif rules:
            raise OptionError("--perf-compare-fail needs --perf-compare BASELINE")
        return cls(opt.perf_workload, opt.perf_save, opt.perf_compare, rules, baseline)

    def baseline_point(self, deployment_id: str, load_point: str) -> dict | None:
        return (self.baseline or {}).get("deployments", {}).get(deployment_id, {}).get(load_point)
