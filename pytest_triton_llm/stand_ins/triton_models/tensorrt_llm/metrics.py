"""TensorRT-LLM's metric families, published with the names, labels and meaning of tensorrtllm_backend's
custom_metrics_reporter (v0.14.0): gauges labelled `model`, `version` and one category, set from the latest
iteration's statistics, so dashboards and suites read the same series from the stand-in and from a real engine.

  nv_trt_llm_request_metrics{request_type=active|max|scheduled|context}
  nv_trt_llm_runtime_memory_metrics{memory_type=cpu|gpu|pinned}
  nv_trt_llm_kv_cache_block_metrics{kv_cache_block_type=max|free|used|tokens_per|reused}
  nv_trt_llm_v1_metrics{v1_specific_metric=total_context_tokens|total_generation_tokens|empty_generation_slots}  (V1)
  nv_trt_llm_inflight_batcher_metrics{inflight_batcher_specific_metric=total_context_tokens|generation_requests|
                                      micro_batch_id|paused_requests}                                 (in-flight)
  nv_trt_llm_general_metrics{general_type=timestamp|iteration_counter}

The stand-in keeps its KV cache per sequence, not in blocks; its block gauges count the blocks of
TOKENS_PER_BLOCK tokens that its sequences occupy, out of what max_batch_size x max_seq_len would need.
With the fault metrics_families_missing (stand_in_faults.py) the request family is not published.
"""

from __future__ import annotations

import os
import time

import triton_python_backend_utils as pb_utils

TOKENS_PER_BLOCK = 64  # TensorRT-LLM's default tokens_per_block for the paged KV cache

FAMILIES = {
    "request": (
        "nv_trt_llm_request_metrics",
        "TRT LLM request metrics",
        "request_type",
        ("active", "max", "scheduled", "context"),
    ),
    "runtime_memory": (
        "nv_trt_llm_runtime_memory_metrics",
        "TRT LLM runtime memory metrics",
        "memory_type",
        ("cpu", "gpu", "pinned"),
    ),
    "kv_cache": (
        "nv_trt_llm_kv_cache_block_metrics",
        "TRT LLM KV cache block metrics",
        "kv_cache_block_type",
        ("max", "free", "used", "tokens_per", "reused"),
    ),
    "v1": (
        "nv_trt_llm_v1_metrics",
        "TRT LLM v1-specific metrics",
        "v1_specific_metric",
        ("total_context_tokens", "total_generation_tokens", "empty_generation_slots"),
    ),
    "inflight": (
        "nv_trt_llm_inflight_batcher_metrics",
        "TRT LLM inflight_batcher-specific metrics",
        "inflight_batcher_specific_metric",
        ("total_context_tokens", "generation_requests", "micro_batch_id", "paused_requests"),
    ),
    "general": ("nv_trt_llm_general_metrics", "General TRT LLM metrics", "general_type", ("timestamp", "iteration_counter")),
}


def _blocks(tokens: int) -> int:
    return -(-tokens // TOKENS_PER_BLOCK)


def _rss_bytes() -> int:
    try:
        with open("/proc/self/statm") as statm:
            return int(statm.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
    except (OSError, ValueError, IndexError):
        return 0


class TrtllmMetrics:
    def __init__(
        self,
        model_name: str,
        version: str,
        v1: bool,
        max_batch_size: int,
        max_seq_len: int,
        gpu_bytes=None,
        fault=lambda name: False,
        kv_blocks: int | None = None,  # what max_tokens_in_paged_kv_cache caps the cache at, if set
    ):
        self.kind = "v1" if v1 else "inflight"
        self.max_batch_size = max_batch_size
        full = max_batch_size * _blocks(max_seq_len)
        self.max_blocks = min(full, kv_blocks) if kv_blocks else full
        self.gpu_bytes = gpu_bytes or (lambda: 0)
        self.iterations = 0
        self._families, self._gauges = [], {}
        labels = {"model": model_name, "version": version}
        published = ("request", "runtime_memory", "kv_cache", self.kind, "general")
        if fault("metrics_families_missing"):
            published = published[1:]
        for key in published:
            name, description, category, values = FAMILIES[key]
            family = pb_utils.MetricFamily(name=name, description=description, kind=pb_utils.MetricFamily.GAUGE)
            self._families.append(family)  # a family must outlive its metrics
            for value in values:
                self._gauges[(key, value)] = family.Metric(labels={**labels, category: value})
        self.iteration(active=0, scheduled=0, context=0, context_tokens=0, generation=0, sequence_lengths=[])

    def iteration(
        self,
        *,
        active: int,
        scheduled: int,
        context: int,
        context_tokens: int,
        generation: int,
        sequence_lengths: list[int],
        empty_slots: int = 0,
    ) -> None:
        """One engine iteration: `scheduled` requests ran, `context` of them in their context phase (together
        `context_tokens` prompt tokens), `generation` produced a token; `sequence_lengths` of every sequence
        holding KV cache; V1: `empty_slots` finished rows its static batch still carries."""
        self.iterations += 1
        used = sum(_blocks(n) for n in sequence_lengths)
        values = {
            ("request", "active"): active,
            ("request", "max"): self.max_batch_size,
            ("request", "scheduled"): scheduled,
            ("request", "context"): context,
            ("runtime_memory", "cpu"): _rss_bytes(),
            ("runtime_memory", "gpu"): self.gpu_bytes(),
            ("runtime_memory", "pinned"): 0,
            ("kv_cache", "max"): self.max_blocks,
            ("kv_cache", "free"): max(0, self.max_blocks - used),
            ("kv_cache", "used"): used,
            ("kv_cache", "tokens_per"): TOKENS_PER_BLOCK,
            ("kv_cache", "reused"): 0,
            ("v1", "total_context_tokens"): context_tokens,
            ("v1", "total_generation_tokens"): generation,
            ("v1", "empty_generation_slots"): empty_slots,
            ("inflight", "total_context_tokens"): context_tokens,
            ("inflight", "generation_requests"): generation,
            ("inflight", "micro_batch_id"): 0,
            ("inflight", "paused_requests"): 0,
            ("general", "timestamp"): int(time.time() * 1e6),
            ("general", "iteration_counter"): self.iterations,
        }
        for key, gauge in self._gauges.items():
            gauge.set(values[key])
