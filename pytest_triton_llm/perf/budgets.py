"""Perf budgets (fixtures/perf_budgets.toml, or --perf-budgets): limits per engine, deployment, hardware and image.

A budget applies when every key matches ("*" matches anything); the most specific one wins.
Where none applies, the load point is measured and reported, not judged.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from ..schema import SchemaError, build, load_toml


@dataclass(frozen=True)
class Budget:
    engine: str
    deployment: str = "*"  # the deployment's name within the engine, e.g. inflight
    hardware: str = "*"  # GPU name as nvidia-smi prints it, or cpu
    image: str = "*"  # the Triton image; the embedded runtime is "local"
    load_point: str = "*"  # e.g. concurrency=4
    min_output_tokens_per_s: float | None = None
    min_throughput_rps: float | None = None
    max_latency_p99_ms: float | None = None
    max_ttft_p99_ms: float | None = None
    # the migration gate (load_point "migration", deployment the llmapi one): its throughput / the engine deployment's
    min_throughput_ratio_vs_engine: float | None = None

    KEYS = ("engine", "deployment", "hardware", "image", "load_point")

    def matches(self, **identity: str) -> bool:
        return all(getattr(self, k) in ("*", identity[k]) for k in self.KEYS)

    def match(self, entry: int) -> dict:
        """What this budget matches, and its place in the file (1-based, as schema errors count): the report's budget_match."""
        return {"entry": entry, **{k: getattr(self, k) for k in self.KEYS}}

    @property
    def specificity(self) -> int:
        return sum(getattr(self, k) != "*" for k in self.KEYS)

    def check(self, result: dict) -> list[list[str]]:
        """Rows of (limit, measured, budget, verdict) for every limit this budget sets."""
        measured = {
            "min_output_tokens_per_s": result.get("output_tokens_per_s"),
            "min_throughput_rps": result.get("throughput_rps"),
            "max_latency_p99_ms": (result.get("latency_ms") or {}).get("p99"),
            "max_ttft_p99_ms": (result.get("ttft_ms") or {}).get("p99"),
            "min_throughput_ratio_vs_engine": result.get("throughput_ratio_vs_engine"),
        }
        rows = []
        for limit, value in measured.items():
            bound = getattr(self, limit)
            if bound is None:
                continue
            if value is None:  # e.g. TTFT of a deployment that does not stream
                rows.append([limit, "not measured", f"{bound:g}", "n/a"])
                continue
            ok = value >= bound if limit.startswith("min_") else value <= bound
            rows.append(
                [limit, f"{value:g}", f"{'>=' if limit.startswith('min_') else '<='} {bound:g}", "ok" if ok else "MISSED"]
            )
        return rows


def load_budgets(path: Path) -> list[Budget]:
    data = load_toml(path)
    tables = data.get("budget")
    if not isinstance(tables, list):
        raise SchemaError(f"{path}: expected [[budget]] tables")
    return [build(Budget, table, f"{path}: budget #{i + 1}") for i, table in enumerate(tables)]


def match_label(match: dict) -> str:
    """engine.deployment.hardware.image.load_point of a budget_match, trailing "*" left out: smollm2-135m.inflight.cpu.local."""
    keys = [match[k] for k in Budget.KEYS]
    while len(keys) > 1 and keys[-1] == "*":
        keys.pop()
    return ".".join(keys)


def find_budget(budgets: list[Budget], **identity: str) -> Budget | None:
    candidates = [b for b in budgets if b.matches(**identity)]
    return max(candidates, key=lambda b: b.specificity) if candidates else None
