"""Progress lines for long work (engine builds, downloads, server start-up).

The plugin hands in a writer that bypasses pytest's output capture, so users see
each step as it happens, also from inside fixtures.
"""

from __future__ import annotations

import sys
import time
from contextlib import contextmanager
from typing import Callable, Iterator

Writer = Callable[[str], None]


def _stderr(line: str) -> None:
    print(line, file=sys.stderr, flush=True)


class Progress:
    def __init__(self, write: Writer = _stderr, prefix: str = "[triton-llm]"):
        self._write = write
        self._prefix = prefix

    def say(self, message: str) -> None:
        self._write(f"{self._prefix} {message}")

    @contextmanager
    def step(self, message: str) -> Iterator[None]:
        """Announce `message`, then say how long it took (or that it failed)."""
        self.say(f"{message} ...")
        start = time.monotonic()
        try:
            yield
        except BaseException:
            self.say(f"{message}: failed after {time.monotonic() - start:.1f} s")
            raise
        self.say(f"{message}: done in {time.monotonic() - start:.1f} s")


def human_bytes(n: float) -> str:
    for unit in ("B", "KiB", "MiB", "GiB"):
        if n < 1024 or unit == "GiB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    return f"{n:.1f} GiB"
