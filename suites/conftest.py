"""Shared data for the suites: prompts and the upstream tensor contract."""

from __future__ import annotations

from pathlib import Path

import pytest

from pytest_triton_llm.lora import build_adapter
from pytest_triton_llm.lora.recipes import load_recipes
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


@pytest.fixture(scope="session")
def lora_adapters(triton_llm, triton_llm_engine_cache) -> dict:
    """fixtures/lora_adapters.toml's adapters for the deployment's engine, built once and cached."""
    recipes = {n: r for n, r in load_recipes(FIXTURES / "lora_adapters.toml").items() if r.engine == triton_llm.ref.engine_name}
    if not recipes:
        pytest.fail(f"fixtures/lora_adapters.toml has no adapter for engine {triton_llm.ref.engine_name}", pytrace=False)
    return {name: build_adapter(triton_llm_engine_cache, name, recipe, triton_llm.engine) for name, recipe in recipes.items()}


@pytest.fixture(scope="session")
def cnn(pytestconfig, triton_llm_progress):
    """CNN/DailyMail articles: --cnn-dataset PATH, else the Hub's cnn_dailymail 3.0.0 (100 by default)."""
    from pytest_triton_llm.accuracy.dataset import DatasetError, load_cnn_dailymail

    path, split, samples = (pytestconfig.getoption(o) for o in ("cnn_dataset", "cnn_split", "cnn_samples"))
    if path is None and samples is None:
        samples = 100
    try:
        with triton_llm_progress.step(f"accuracy: loading CNN/DailyMail from {path or 'the Hugging Face Hub'}"):
            return load_cnn_dailymail(path, split, samples)
    except DatasetError as exc:
        pytest.fail(str(exc), pytrace=False)


@pytest.fixture(scope="session")
def accuracy_outputs(pytestconfig):
    """Where --accuracy-save writes each deployment's outputs (None without the option)."""
    from pytest_triton_llm.accuracy.drift import OutputsWriter

    path = pytestconfig.getoption("accuracy_save")
    return OutputsWriter(path) if path else None


def _perf_workload(config):
    from pytest_triton_llm.perf.workload import load_workloads

    workloads = load_workloads(FIXTURES / "perf_workloads.toml")
    name = config.getoption("perf_workload")
    if name not in workloads:
        raise pytest.UsageError(f"--perf-workload {name}: fixtures/perf_workloads.toml has {', '.join(sorted(workloads))}")
    return name, workloads[name]


def pytest_generate_tests(metafunc):
    if "load_point" in metafunc.fixturenames:  # the perf suite: one test per load point of the workload
        _, workload = _perf_workload(metafunc.config)
        points = workload.load_points()
        metafunc.parametrize("load_point", points, ids=[name for name, _ in points])


@pytest.fixture(scope="session")
def perf_workload(pytestconfig):
    return _perf_workload(pytestconfig)


@pytest.fixture(scope="session")
def perf_budgets():
    from pytest_triton_llm.perf.budgets import load_budgets

    return load_budgets(FIXTURES / "perf_budgets.toml")
