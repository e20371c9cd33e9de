"""A request's KV-cache retention config (retention_token_range_* and retention_decode_* inputs), read and checked as
tensorrtllm_backend's utils.cc getKvCacheRetentionConfigFromTensors and TensorRT-LLM's KvCacheRetentionConfig do, and
turned into a priority and duration per prompt block (getPerBlockRetentionPriorityDuration): a block takes the range
its first token falls in, None (the default priority, 35) where none covers it."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from errors import assertion
from served_contract import RequestError

DEFAULT_PRIORITY = 35  # KvCacheRetentionConfig::kDefaultRetentionPriority
MIN_PRIORITY, MAX_PRIORITY = 0, 100
NO_RANGE_END = -1  # kRetentionNoRangeEnd: the range runs to the end of the sequence
NO_EXPIRATION = -1  # kRetentionNoExpirationTime


@dataclass(frozen=True)
class TokenRange:
    start: int
    end: int | None
    priority: int
    duration_ms: int | None


@dataclass(frozen=True)
class Retention:
    ranges: tuple[TokenRange, ...]
    decode_priority: int = DEFAULT_PRIORITY
    decode_duration_ms: int | None = None

    def per_block(self, block: int, length: int, context: int | None = None) -> list[tuple[int | None, int | None]]:
        """(priority, duration ms) of each block of a sequence of `length` tokens, None where no range sets it. Where
        `context` (the prompt's length) is given, the blocks past the context phase's, which the decode phase
        allocates (WindowBlockManager::allocateBlock), take the decode priority and duration instead."""
        context_blocks = -(-(length if context is None else context) // block)
        out = []
        for index, first in enumerate(range(0, length, block)):
            if index >= context_blocks:
                out.append((self.decode_priority, self.decode_duration_ms))
                continue
            entry = next((r for r in self.ranges if r.start <= first and (r.end is None or first < r.end)), None)
            out.append((entry.priority, entry.duration_ms) if entry else (None, None))
        return out


def _row(tensors: dict, name: str, row: int) -> list[int] | None:
    value = tensors.get(name)
    if value is None:
        return None
    value = np.asarray(value)
    value = value[min(row, value.shape[0] - 1)] if value.ndim > 1 else value
    return [int(v) for v in np.asarray(value).reshape(-1)]


def read(tensors: dict, row: int) -> Retention | None:
    """The row's retention config, None where it sent no retention_token_range_starts (the decode inputs alone are
    not read then, as upstream)."""
    starts = _row(tensors, "retention_token_range_starts", row)
    if starts is None:
        return None
    ends = _row(tensors, "retention_token_range_ends", row)
    if ends is None or len(ends) != len(starts):
        raise RequestError(
            "retention_token_range_ends must be provided, and have the same length as retention_token_range_starts"
        )
    priorities = _row(tensors, "retention_token_range_priorities", row)
    if priorities is None or len(priorities) != len(starts):
        raise RequestError(
            "retention_token_range_priorities must be provided, and have the same length as retention_token_range_starts"
        )
    durations = _row(tensors, "retention_token_range_durations_ms", row)
    if durations is not None and len(durations) != len(starts):
        raise RequestError("retention_token_range_durations_ms must have the same length as retention_token_range_starts")
    durations = durations or [NO_EXPIRATION] * len(starts)
    ranges = [
        TokenRange(s, None if e == NO_RANGE_END else e, _priority(p), None if d == NO_EXPIRATION else d)
        for s, e, p, d in zip(starts, ends, priorities, durations, strict=True)
    ]
    decode = _row(tensors, "retention_decode_priority", row)
    decode_duration = _row(tensors, "retention_decode_duration_ms", row)
    return Retention(
        _checked(ranges),
        decode[0] if decode else DEFAULT_PRIORITY,
        decode_duration[0] if decode_duration else None,
    )


def _priority(value: int) -> int:
    if not MIN_PRIORITY <= value <= MAX_PRIORITY:
        raise assertion(f"Invalid priority value. Must be between {MIN_PRIORITY} and {MAX_PRIORITY}")
    return value


def _checked(ranges: list[TokenRange]) -> tuple[TokenRange, ...]:
    """KvCacheRetentionConfig's constructor: sorted by start, non-overlapping, only the last one open-ended."""
    ranges = sorted(ranges, key=lambda r: r.start)
    for i, entry in enumerate(ranges):
        if entry.end is None and i != len(ranges) - 1:
            raise RequestError("Invalid use of end indicator.")
        if entry.start < 0:
            raise RequestError("Token indices must be non-negative.")
        if entry.end is not None and entry.start >= entry.end:
            raise RequestError("Range must have a positive, non-zero length.")
        if i != len(ranges) - 1 and entry.end is not None and entry.end > ranges[i + 1].start:
            raise RequestError("Token ranges must be non-overlapping.")
    return tuple(ranges)
