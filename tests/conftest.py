"""Shared helpers for the plugin's own tests."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
LOCK = ROOT / "engines.lock"


@pytest.fixture
def lock_text() -> str:
    return LOCK.read_text()


@pytest.fixture
def project(pytester: pytest.Pytester) -> pytest.Pytester:
    """A pytester directory holding the project's engines.lock."""
    shutil.copy(LOCK, pytester.path / "engines.lock")
    return pytester


def processes_mentioning(text: str) -> list[str]:
    """Command lines of live processes that mention `text` (a path unique to one session)."""
    found = []
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit() or int(proc.name) == os.getpid():
            continue
        try:
            cmdline = (proc / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
        except OSError:
            continue
        if text in cmdline:
            found.append(f"{proc.name}: {cmdline[:200]}")
    return found
