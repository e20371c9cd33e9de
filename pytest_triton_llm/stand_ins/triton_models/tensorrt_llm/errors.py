"""Errors the reference tensorrt_llm model answers with, worded as TensorRT-LLM words them (0.14 era)."""

from __future__ import annotations

from served_contract import RequestError


class ExecutorError(RequestError):
    """Refused by TensorRT-LLM's executor once enqueued; the backend answers "Executor failed process requestId N
    due to the following error: <message>"."""


def assertion(expression: str) -> RequestError:
    """A TLLM_CHECK that failed while the backend built the request (no executor prefix)."""
    return RequestError(f"[TensorRT-LLM][ERROR] Assertion failed: {expression}")
