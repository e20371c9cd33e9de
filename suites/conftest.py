"""Shared data for the suites: prompts and the upstream tensor contract."""

from __future__ import annotations

from pathlib import Path

import pytest

from pytest_triton_llm.repository import template_family
from pytest_triton_llm.schema import load_toml

FIXTURES = Path(__file__).resolve().parent.parent / "fixtures"


@pytest.fixture(scope="session")
def prompts() -> dict:
    return load_toml(FIXTURES / "prompts.toml")


@pytest.fixture(scope="session")
def contract(triton_llm) -> dict:
    """The inflight_batcher_llm contract of the served Triton version's template family."""
    return load_toml(FIXTURES / "contracts" / f"{template_family(triton_llm.server.version)}.toml")
