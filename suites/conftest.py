"""The suites' fixtures: prompts, the upstream tensor contract, equality rules, adapters, datasets and perf workloads
(their verdicts are library code: pytest_triton_llm.perf.judge, pytest_triton_llm.accuracy.judge)."""

from __future__ import annotations

import pytest

from pytest_triton_llm.accuracy.dataset import DatasetError, load_cnn_dailymail
from pytest_triton_llm.accuracy.drift import OutputsWriter
from pytest_triton_llm.verdicts.equality import rule_for, rule_of
from pytest_triton_llm.common.files import fixtures_dir
from pytest_triton_llm.lora import build_adapter
from pytest_triton_llm.lora.recipes import load_recipes
from pytest_triton_llm.plugin.hooks import deselect, perf_settings
from pytest_triton_llm.common.prompts import Prompts, load_prompts
from pytest_triton_llm.stack.repository import served_family
from pytest_triton_llm.common.schema import load_toml

FIXTURES = fixtures_dir()


@pytest.fixture(scope="session")
def prompts() -> Prompts:
    return load_prompts(FIXTURES / "prompts.toml")


@pytest.fixture(scope="session")
def contract(triton_llm) -> dict:
    """The inflight_batcher_llm contract of the served Triton version's template family."""
    return load_toml(FIXTURES / "contracts" / f"{served_family(triton_llm.ref, triton_llm.server.version)}.toml")


@pytest.fixture(scope="session")
def equality_rule(triton_llm):
    return rule_of(triton_llm)


@pytest.fixture(scope="session")
def openai_equality_rule(openai_target):
    """The rule of --openai-engine's engine on the endpoint's hardware; without one, the half-precision rule: a /v1
    server of unknown dtype batches as it likes (real batched bf16 servers are not batch-invariant)."""
    return rule_for(openai_target.engine, openai_target.hardware)


@pytest.fixture(scope="session")
def pair_equality_rule(triton_llm_pair):
    """The rule of the pair's engine (both deployments serve one engine)."""
    return rule_of(triton_llm_pair[0])


@pytest.fixture(scope="session")
def migration_equality_rule(triton_llm_migration):
    """The rule of the llmapi side's engine: how equal its answers must be to the engine deployment's."""
    return rule_of(triton_llm_migration[1])


@pytest.fixture(scope="session")
def lora_adapters(triton_llm, triton_llm_engine_cache) -> dict:
    """fixtures/lora_adapters.toml's adapters for the deployment's engine, built once and cached."""
    recipes = {n: r for n, r in load_recipes(FIXTURES / "lora_adapters.toml").items() if r.engine == triton_llm.ref.engine_name}
    if not recipes:
        pytest.fail(f"fixtures/lora_adapters.toml has no adapter for engine {triton_llm.ref.engine_name}", pytrace=False)
    return {name: build_adapter(triton_llm_engine_cache, name, recipe, triton_llm.engine) for name, recipe in recipes.items()}


@pytest.fixture(scope="session")
def cnn(triton_llm_accuracy_options, triton_llm_progress):
    """CNN/DailyMail articles: --accuracy-dataset PATH, else the Hub's cnn_dailymail 3.0.0 (100 by default)."""
    options = triton_llm_accuracy_options
    try:
        with triton_llm_progress.step(f"accuracy: loading CNN/DailyMail from {options.dataset or 'the Hugging Face Hub'}"):
            return load_cnn_dailymail(options.dataset, options.split, options.articles)
    except DatasetError as exc:
        pytest.fail(str(exc), pytrace=False)


@pytest.fixture(scope="session")
def accuracy_outputs(triton_llm_accuracy_options):
    """Where --accuracy-save writes each deployment's outputs (None without the option)."""
    path = triton_llm_accuracy_options.save
    return OutputsWriter(path) if path else None


def pytest_generate_tests(metafunc):
    if "load_point" in metafunc.fixturenames:  # the perf suite: one test per load point of the workload
        _, workload = perf_settings(metafunc.config).workload_from(FIXTURES / "perf_workloads.toml")
        points = workload.load_points()
        metafunc.parametrize("load_point", points, ids=[name for name, _ in points])


def pytest_collection_modifyitems(config, items):
    """The perf suite's saturation sweep runs only when asked for (--perf-sweep): deselected, not skipped, without."""
    if perf_settings(config).sweep:
        return
    deselect(config, items, [item for item in items if getattr(item, "originalname", None) == "test_saturation_sweep"])


@pytest.fixture(scope="session")
def perf_workload(triton_llm_perf_options):
    """(name, workload): --perf-workload of --perf-workloads's file, else of fixtures/perf_workloads.toml."""
    return triton_llm_perf_options.workload_from(FIXTURES / "perf_workloads.toml")


@pytest.fixture(scope="session")
def perf_budgets(triton_llm_perf_options):
    """(file, budgets): --perf-budgets's file, which replaces fixtures/perf_budgets.toml, else that one."""
    return triton_llm_perf_options.budgets_from(FIXTURES / "perf_budgets.toml")
