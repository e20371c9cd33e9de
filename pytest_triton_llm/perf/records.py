"""--perf-records PATH: one JSON line per request (as aiperf's profile_export.jsonl), its times in ns since the epoch."""

from __future__ import annotations

import fcntl
import json
import os
import time
from pathlib import Path

from ..triton.load import RequestRecord

KIND = "pytest-triton-llm perf records"
SCHEMA = 1
# the file's first line: what the records are and how their times were taken
HEADER = {
    "kind": KIND,
    "schema": SCHEMA,
    "times": "ns since the Unix epoch: the load generator's perf_counter time plus the record's epoch_offset_ns, "
    "time.time_ns() - time.perf_counter_ns() measured once at the start of its load point",
    "fields": "deployment, load_point, workload, repeat (1-based), index (the request's place in the workload), "
    "send_ns, first_token_ns, token_ns (every response that carried tokens), end_ns (the request's last response), "
    "tokens, streamed, error",
}


def epoch_offset_ns() -> int:
    """What to add to a perf_counter time in ns to get ns since the epoch, measured now (at a load point's start)."""
    return time.time_ns() - time.perf_counter_ns()


def _ns(seconds: float | None, offset_ns: int) -> int | None:
    return None if seconds is None else round(seconds * 1e9) + offset_ns


def record_lines(records: list[RequestRecord], offset_ns: int, **identity: str | int) -> list[str]:
    """One JSON line per request, in the order sent; `identity`: deployment, load_point, workload, repeat."""
    return [
        json.dumps(
            {
                **identity,
                "index": r.index,
                "send_ns": _ns(r.sent, offset_ns),
                "first_token_ns": _ns(r.token_times[0], offset_ns) if r.token_times else None,
                "token_ns": [_ns(t, offset_ns) for t in r.token_times],
                "end_ns": _ns(r.done, offset_ns),
                "tokens": r.tokens,
                "streamed": r.streamed,
                "error": r.error,
                "epoch_offset_ns": offset_ns,
            }
        )
        for r in sorted(records, key=lambda r: r.index)
    ]


def append_records(path: str | Path, lines: list[str]) -> None:
    """Append `lines` to `path` in one write under an exclusive lock (pytest-xdist workers share the file); whoever
    finds the file empty writes the header first."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        head = [json.dumps(HEADER)] if os.fstat(fd).st_size == 0 else []
        data = "".join(f"{line}\n" for line in head + lines).encode()
        while data:  # a regular file takes it all at once, unless a signal cuts the write short
            data = data[os.write(fd, data) :]
    finally:
        os.close(fd)  # (releases the lock)


def write_records(path: str | Path, records: list[RequestRecord], offset_ns: int, **identity: str | int) -> None:
    """A load point's (or a repeat's) records, appended to the --perf-records file."""
    Path(path).parent.mkdir(parents=True, exist_ok=True)
    append_records(path, record_lines(records, offset_ns, **identity))


def read_records(path: str | Path) -> tuple[dict, list[dict]]:
    """(header, records) of a --perf-records file."""
    header, *records = (json.loads(line) for line in Path(path).read_text().splitlines())
    return header, records
