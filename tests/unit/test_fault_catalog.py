"""The fault catalogs (fixtures/faults.toml and the tracker catalog's fixtures/tracker_faults.toml) and the stand-in
code that reproduces their faults agree."""

import ast
import re
from pathlib import Path

import pytest

from pytest_triton_llm.faults import CATALOG, MODELS, load_catalog
from pytest_triton_llm.faults.catalog import TRACKER
from pytest_triton_llm.stack.lock import load_lock
from pytest_triton_llm.plugin.hooks import MARKERS

ROOT = Path(__file__).resolve().parents[2]
STAND_IN = ROOT / "pytest_triton_llm" / "stand_ins" / "triton_models"
CODE = {path: path.read_text() for path in sorted(STAND_IN.rglob("*.py"))}
CHECKED = re.compile(r"""fault\(\s*["']([a-z0-9_]+)["']\s*\)""")  # fault("name"), self.fault("name"), ...
ISSUE = re.compile(r"^[A-Za-z0-9][\w.-]*/[\w.-]+#[1-9][0-9]*$")
# the shared engine (generation.py, inflight.py, lora.py, outputs and prefix cache): each model hands it its own faults
ENGINE_OWNERS = {"inflight_batcher_llm": STAND_IN / "tensorrt_llm" / "model.py", "llmapi": STAND_IN / "llmapi" / "model.py"}
ENGINE_CODE = ("generation.py", "inflight.py", "lora.py", "outputs.py", "output_faults.py", "prefix_cache.py")


@pytest.fixture(scope="module")
def catalog():
    """Both catalogs' rows: one name space, since one stand-in switch serves them."""
    written, tracker = load_catalog(CATALOG), load_catalog(TRACKER)
    assert sorted(set(written) & set(tracker)) == []
    return {**written, **tracker}


def _checked_names(paths) -> set[str]:
    return {name for path in paths for name in CHECKED.findall(CODE[path])}


def _engine_faults(model_py: Path) -> tuple[str, ...]:
    """The literal ENGINE_FAULTS tuple of a model that owns the shared engine (read, not imported: it needs Triton)."""
    for node in ast.parse(model_py.read_text()).body:
        if isinstance(node, ast.Assign) and any(getattr(t, "id", None) == "ENGINE_FAULTS" for t in node.targets):
            return ast.literal_eval(node.value)
    raise AssertionError(f"{model_py} defines no ENGINE_FAULTS")


def test_the_catalog_loads_with_at_least_40_faults():
    assert len(load_catalog(CATALOG)) >= 40


def test_every_fault_of_the_catalog_is_checked_by_name_in_the_stand_in_code(catalog):
    assert sorted(set(catalog) - _checked_names(CODE)) == []


def test_every_fault_the_stand_in_code_checks_is_in_the_catalog(catalog):
    assert sorted(_checked_names(CODE) - set(catalog)) == []


def test_every_issue_is_owner_repository_number(catalog):
    assert [f.issue for f in catalog.values() if not ISSUE.match(f.issue)] == []


def test_every_fault_names_known_markers_only(catalog):
    known = set(MARKERS) | {"regressions"}
    assert {name: f.markers for name, f in catalog.items() if not f.markers or set(f.markers) - known} == {}


def _deployments_of(fault) -> dict:
    """The deployments of the lock the fault's runs read: its pytest_args' --engines-lock, else the default."""
    args = list(fault.pytest_args)
    lock = args[args.index("--engines-lock") + 1] if "--engines-lock" in args else "fixtures/engines.lock"
    return load_lock(ROOT / lock).deployments()


def test_every_fault_runs_on_a_deployment_of_its_own_layout(catalog):
    deployments = {name: _deployments_of(f) for name, f in catalog.items()}
    assert {name: f.deployment for name, f in catalog.items() if f.deployment not in deployments[name]} == {}
    assert {
        name: (f.layout, deployments[name][f.deployment].layout)
        for name, f in catalog.items()
        if f.layout != deployments[name][f.deployment].layout
    } == {}
    assert {name: f.model for name, f in catalog.items() if f.model not in MODELS} == {}


def test_the_llmapi_layouts_faults_live_in_its_one_model(catalog):
    assert {name: f.model for name, f in catalog.items() if f.layout == "llmapi" and f.model != "tensorrt_llm"} == {}


def test_each_fault_of_the_shared_engine_is_handed_to_it_by_the_model_it_lives_in(catalog):
    in_engine = _checked_names([path for path in CODE if path.name in ENGINE_CODE])
    owned = {layout: set(_engine_faults(model_py)) for layout, model_py in ENGINE_OWNERS.items()}
    assert sorted(in_engine - set.union(*owned.values())) == []  # every fault of the engine has an owner
    assert owned["inflight_batcher_llm"].isdisjoint(owned["llmapi"])
    for layout, names in owned.items():
        assert sorted(names - in_engine) == [], f"{layout}: ENGINE_FAULTS the engine never checks"
        assert {
            n: (catalog[n].model, catalog[n].layout)
            for n in names
            if (catalog[n].model, catalog[n].layout) != ("tensorrt_llm", layout)
        } == {}
