"""Engine backends by name: the lock's `backend = "..."` picks one. A new backend is one module
implementing base.Backend plus one line here."""

from __future__ import annotations

from ..lock import DeploymentRef, Lock, LockError
from .base import Backend, BuildError, BuildSite
from .llmapi import LlmapiBackend
from .reference import ReferenceBackend
from .tensorrtllm import TensorrtllmBackend

BACKENDS: dict[str, Backend] = {
    "reference": ReferenceBackend(),
    "tensorrtllm": TensorrtllmBackend(),
    "llmapi": LlmapiBackend(),
}

__all__ = ["BACKENDS", "Backend", "BuildError", "BuildSite", "backend_of", "check_lock", "served_by_stand_in"]


def backend_of(name: str) -> Backend:
    return BACKENDS[name]


def served_by_stand_in(ref: DeploymentRef, swapped_in: bool) -> bool:
    """Whether the project's reference stand-in answers as `ref`'s tensorrt_llm model: its backend is the stand-in (also
    as a remote server's model publishes it), or `swapped_in` (--trtllm-stand-in, on a runtime that renders the
    repository) puts it in place of a real engine's. The one definition: the session, the deployments and the suites
    ask it."""
    return backend_of(ref.engine.backend).stand_in or swapped_in


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
