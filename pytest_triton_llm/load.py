"""Closed-loop load: N clients, each sends its next request as soon as its last one is answered."""

from __future__ import annotations

import random
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Callable, Sequence


@dataclass
class LoadResult:
    requests: int = 0
    output_tokens: int = 0
    duration_s: float = 0.0
    latencies_s: list[float] = field(default_factory=list)

    @property
    def output_tokens_per_s(self) -> float:
        return self.output_tokens / self.duration_s if self.duration_s else 0.0

    def as_dict(self) -> dict:
        return {
            "requests": self.requests,
            "output_tokens": self.output_tokens,
            "duration_s": round(self.duration_s, 2),
            "output_tokens_per_s": round(self.output_tokens_per_s, 2),
        }


def mixed_lengths(count: int, low: int, high: int, seed: int = 0) -> list[int]:
    """`count` output lengths drawn uniformly from [low, high], the same for every run with `seed`."""
    rng = random.Random(seed)
    return [rng.randint(low, high) for _ in range(count)]


def closed_loop(send: Callable[[object], int], jobs: Sequence, concurrency: int, stagger_s: float = 0.0) -> LoadResult:
    """Run `send(job)` (returns the output tokens it got) for every job with `concurrency` clients.

    stagger_s: client i sends its first request i * stagger_s after the start (a ramp-up), so
    requests do not arrive in lockstep.
    """
    pending = iter(jobs)
    lock = threading.Lock()
    result = LoadResult()

    def client(index: int) -> None:
        time.sleep(index * stagger_s)
        while True:
            with lock:
                job = next(pending, None)
            if job is None:
                return
            start = time.perf_counter()
            tokens = send(job)
            with lock:
                result.requests += 1
                result.output_tokens += tokens
                result.latencies_s.append(time.perf_counter() - start)

    start = time.perf_counter()
    with ThreadPoolExecutor(max_workers=concurrency) as pool:
        for future in [pool.submit(client, i) for i in range(concurrency)]:
            future.result()
    result.duration_s = time.perf_counter() - start
    return result
