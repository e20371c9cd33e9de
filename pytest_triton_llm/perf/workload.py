"""Perf workloads (fixtures/perf_workloads.toml): token-length distributions, as upstream's
benchmark_core_model draws them; load points by concurrency or rate; the requests, encoded for tensorrt_llm."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Literal

import random

import numpy as np

from ..triton.client import LLMClient
from ..common.schema import SchemaError, build, load_toml
from ..triton.tensor_contract import NO_END, Inputs, Sampling


@dataclass(frozen=True)
class Lengths:
    mean: int
    stdev: float = 0.0

    def __post_init__(self):
        if self.mean <= 0 or self.stdev < 0:
            raise ValueError("fields 'mean' must be > 0 and 'stdev' >= 0")


@dataclass(frozen=True)
class Workload:
    input_tokens: Lengths
    output_tokens: Lengths
    requests: int  # measured requests per load point
    warmup: int = 2  # sent first, not measured
    concurrency: tuple[int, ...] = ()  # closed-loop load points
    request_rate: tuple[float, ...] = ()  # open-loop load points (requests/s)
    arrival: Literal["poisson", "constant"] = "poisson"
    fixed_output: bool = True  # ignore EOS (end_id -1, min_length = max_tokens) so every request yields its length
    seed: int = 0

    def __post_init__(self):
        if self.requests <= 0 or self.warmup < 0:
            raise ValueError("fields 'requests' must be > 0 and 'warmup' >= 0")
        if not self.concurrency and not self.request_rate:
            raise ValueError("give load points: 'concurrency' and/or 'request_rate'")
        if any(c <= 0 for c in self.concurrency) or any(r <= 0 for r in self.request_rate):
            raise ValueError("load points must be > 0")

    def load_points(self) -> list[tuple[str, dict]]:
        """(name, kwargs for the load generator) per load point: concurrency=4, rate=2.0, ..."""
        points: list[tuple[str, dict]] = [(f"concurrency={c}", {"concurrency": c}) for c in self.concurrency]
        points += [(f"rate={r:g}", {"request_rate": r, "arrival": self.arrival}) for r in self.request_rate]
        return points


@dataclass(frozen=True)
class PerfRequest:
    input_ids: list[int]
    max_tokens: int


def load_workloads(path: Path) -> dict[str, Workload]:
    data = load_toml(path)
    if "workload" not in data:
        raise SchemaError(f"{path}: no [workload.<name>] table")
    return {name: build(Workload, table, f"{path}: workload '{name}'") for name, table in data["workload"].items()}


def _draw(rng: np.random.Generator, lengths: Lengths, count: int, limit: int) -> list[int]:
    values = rng.normal(lengths.mean, lengths.stdev, count) if lengths.stdev else np.full(count, lengths.mean)
    return [int(min(max(1, round(v)), limit)) for v in values]


def synthetic_requests(
    workload: Workload, count: int, vocab: range, max_input: int, max_output: int, seed_offset: int = 0
) -> list[PerfRequest]:
    """`count` requests of random token ids with lengths from the workload's distributions."""
    rng = np.random.default_rng(workload.seed + seed_offset)
    inputs = _draw(rng, workload.input_tokens, count, max_input)
    outputs = _draw(rng, workload.output_tokens, count, max_output)
    return [PerfRequest(rng.integers(vocab.start, vocab.stop, n).tolist(), m) for n, m in zip(inputs, outputs, strict=True)]


def encode(
    requests: list[PerfRequest], client: LLMClient, fixed_output: bool, streaming: bool, draft_counts: bool = False
) -> list[Inputs]:
    """tensorrt_llm inputs, named as the served model has them. fixed_output: no end_id and min_length =
    max_tokens, so every request yields its length; streaming: token by token (decoupled deployments).
    The llmapi model takes text and has no end_id or min_tokens input: its prompts are the ids decoded, and its
    outputs end where the model ends them (at most max_tokens): `fixed_output` cannot hold there. draft_counts: a
    speculating llmapi model is asked for its perf metrics, whose draft counts the load point reports."""
    if client.speaks_llmapi:
        assert client.decode is not None, "an llmapi deployment's client decodes with its tokenizer"
        perf = {"return_perf_metrics": True} if draft_counts else {}
        return [
            client.ensemble_inputs(client.decode(r.input_ids), r.max_tokens, stream=streaming or None, **perf) for r in requests
        ]
    encoded = []
    for r in requests:
        fixed = {"end_id": NO_END, "sampling": Sampling(min_length=r.max_tokens)} if fixed_output else {}
        encoded.append(client.core_inputs(r.input_ids, r.max_tokens, streaming=streaming or None, **fixed))
    return encoded


def mixed_lengths(count: int, low: int, high: int, seed: int = 0) -> list[int]:
    """`count` output lengths drawn uniformly from [low, high], the same for every run with `seed`."""
    rng = random.Random(seed)
    return [rng.randint(low, high) for _ in range(count)]
