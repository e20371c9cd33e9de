"""Engine backends by name: the lock's `backend = "..."` picks one. A new backend is one module
implementing base.Backend plus one line here."""

from __future__ import annotations

from ..lock import Lock, LockError
from .base import Backend, BuildError, BuildSite
from .llmapi import LlmapiBackend
from .reference import ReferenceBackend
from .tensorrtllm import TensorrtllmBackend

BACKENDS: dict[str, Backend] = {
    "reference": ReferenceBackend(),
    "tensorrtllm": TensorrtllmBackend(),
    "llmapi": LlmapiBackend(),
}

__all__ = ["BACKENDS", "Backend", "BuildError", "BuildSite", "backend_of", "check_lock"]


def backend_of(name: str) -> Backend:
    return BACKENDS[name]


def check_lock(lock: Lock) -> Lock:
    """Every engine names a known backend and asks only for what that backend has (LockError: one line)."""
    for name, engine in lock.engines.items():
        entry = f"{lock.path}: engine '{name}'"
        if engine.backend not in BACKENDS:
            known = ", ".join(repr(b) for b in BACKENDS)
            raise LockError(f"{entry}: field 'backend': expected one of {known}, got string {engine.backend!r}")
        try:
            BACKENDS[engine.backend].check_recipe(engine)
        except ValueError as exc:
            raise LockError(f"{entry}: {exc}") from None
    return lock
