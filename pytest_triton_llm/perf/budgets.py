"""Perf budgets (fixtures/perf_budgets.toml, or --perf-budgets): limits per engine, deployment, hardware, image and workload.

A budget applies when every key matches ("*" matches anything); the most specific one wins.
Where none applies, and no --perf-compare or --perf-against judges it, the load point fails (perf/judge.py) unless
--perf-measure-only; --perf-calibrate writes budgets from the user's own runs (perf/calibrate.py).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from ..common.schema import SchemaError, build, load_toml
from ..verdicts.significance import against_budget
from .metrics import metric_value


# each limit -> the summary metric it bounds (metrics.metric_value)
LIMITS = {
    "min_output_tokens_per_s": "output_tokens_per_s",
    "min_throughput_rps": "throughput_rps",
    "max_latency_p99_ms": "latency_ms.p99",
    "max_ttft_p99_ms": "ttft_ms.p99",
    "min_throughput_ratio_vs_engine": "throughput_ratio_vs_engine",
    "min_speedup_vs_no_speculation": "speedup_vs_no_speculation",
}
VERDICTS = {"pass": "ok", "fail": "MISSED", "inconclusive": "inconclusive"}


@dataclass(frozen=True)
class Budget:
    engine: str
    deployment: str = "*"  # the deployment's name within the engine, e.g. inflight
    hardware: str = "*"  # GPU name as nvidia-smi prints it, its class (h200, a100, cpu-2: hardware.hardware_class), or cpu
    image: str = "*"  # the Triton image; the embedded runtime is "local"
    load_point: str = "*"  # e.g. concurrency=4
    workload: str = "*"  # the --perf-workload name: the same load point of another workload measures other lengths
    engine_digest: str = "*"  # one engine build (--perf-calibrate sets it): a rebuilt engine is not judged by it
    min_output_tokens_per_s: float | None = None
    min_throughput_rps: float | None = None
    max_latency_p99_ms: float | None = None
    max_ttft_p99_ms: float | None = None
    # the migration gate (load_point "migration", deployment the llmapi one): its throughput / the engine deployment's
    min_throughput_ratio_vs_engine: float | None = None
    # speculative decoding (load_point "speculation", deployment the speculating one): its time for answers that copy
    # their prompts, at concurrency 1, over the same answers' time on an llmapi deployment of its engine that does not
    min_speedup_vs_no_speculation: float | None = None

    KEYS = ("engine", "deployment", "hardware", "image", "load_point", "workload", "engine_digest")

    def matches(self, **identity: str) -> bool:
        """Every key "*" or equal; hardware may also name the class (identity's hardware_class)."""
        return (
            all(getattr(self, k) in ("*", identity.get(k)) for k in self.KEYS if k != "hardware")
            and self.hardware_level(identity) is not None
        )

    def hardware_level(self, identity: dict) -> int | None:
        """How closely the hardware matches: 0 any, 1 any CPU ("cpu"), 2 the class, 3 the exact name; None: not."""
        name, klass = identity["hardware"], identity.get("hardware_class")
        if self.hardware == name:
            return 1 if name == "cpu" else 3
        if klass is not None and self.hardware == klass:
            return 2
        return 0 if self.hardware == "*" else None

    def match(self, entry: int) -> dict:
        """What this budget matches, and its place in the file (1-based, as schema errors count): the report's budget_match."""
        return {"entry": entry, **{k: getattr(self, k) for k in self.KEYS}}

    @property
    def specificity(self) -> int:
        return sum(getattr(self, k) != "*" for k in self.KEYS)

    def check(self, result: dict, runs: list[dict] | None = None, confidence: float = 0.95) -> list[list[str]]:
        """Rows of (limit, measured, budget, verdict) for every limit this budget sets. With repeated `runs` the
        t interval of their mean at `confidence` decides: MISSED only when it lies wholly on the wrong side,
        "inconclusive" when it straddles the limit; one run is judged by its value."""
        rows = []
        for limit, metric in LIMITS.items():
            bound = getattr(self, limit)
            if bound is None:
                continue
            samples = [v for run in runs or [result] if (v := metric_value(run, metric)) is not None]
            if not samples:  # e.g. TTFT of a deployment that does not stream
                rows.append([limit, "not measured", f"{bound:g}", "n/a"])
                continue
            kind: Literal["min", "max"] = "min" if limit.startswith("min_") else "max"
            judged = against_budget(samples, bound, kind, confidence)
            measured = f"{samples[0]:g}" if judged.n == 1 else f"{judged.mean:.4g} [{judged.ci_low:.4g}, {judged.ci_high:.4g}]"
            rows.append([limit, measured, f"{'>=' if kind == 'min' else '<='} {bound:g}", VERDICTS[judged.verdict]])
        return rows


def detectable(budget: Budget, runs: list[dict], confidence: float = 0.95) -> dict[str, float]:
    """Per limit the budget sets, the smallest change from the runs' mean that their interval at `confidence` can tell,
    in percent (its half-width over the mean): what repeated runs could have caught."""
    found = {}
    for limit, metric in LIMITS.items():
        samples = [v for run in runs if (v := metric_value(run, metric)) is not None]
        if getattr(budget, limit) is None or len(samples) < 2:
            continue
        judged = against_budget(samples, getattr(budget, limit), "min" if limit.startswith("min_") else "max", confidence)
        if judged.mean:
            found[limit] = round(100 * (judged.ci_high - judged.ci_low) / 2 / abs(judged.mean), 1)
    return found


def load_budgets(path: Path) -> list[Budget]:
    data = load_toml(path)
    tables = data.get("budget")
    if not isinstance(tables, list):
        raise SchemaError(f"{path}: expected [[budget]] tables")
    return [build(Budget, table, f"{path}: budget #{i + 1}") for i, table in enumerate(tables)]


def match_label(match: dict) -> str:
    """engine.deployment.hardware.image.load_point.workload of a budget_match, trailing "*" left out:
    smollm2-135m.inflight.cpu.local."""
    keys = [match.get(k, "*") for k in Budget.KEYS]  # reports older than the workload key lack it
    while len(keys) > 1 and keys[-1] == "*":
        keys.pop()
    return ".".join(keys)


def find_budget(budgets: list[Budget], **identity: str) -> Budget | None:
    """The most specific matching budget (most keys set; then the closest hardware: name, class, cpu, any)."""
    candidates = [b for b in budgets if b.matches(**identity)]
    return max(candidates, key=lambda b: (b.specificity, b.hardware_level(identity))) if candidates else None
