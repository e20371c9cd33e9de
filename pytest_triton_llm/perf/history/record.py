"""--perf-history: a session's report appended to the history, with the commit it ran at."""

from __future__ import annotations

from pathlib import Path

from .commit import current_commit
from .judge import load_settings
from .store import append


def record_session(path: Path, document: dict) -> int:
    """Append the session's report `document` (its perf load points) to the history at `path`; the runs added."""
    return append(path, document, load_settings().metrics, current_commit())
