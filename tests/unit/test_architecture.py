"""The import layers are a checked contract: lint-imports keeps them, the reference backend's contract names every
harness module, the engines contract every engine backend but the reference one, and no internal import hides inside a
function (where it would only dodge a cycle). No runtime or layout name is compared outside its own module, and the
stand-in shares with the client's half of the tensor contract only what both sides must agree on."""

import ast
import shutil
import subprocess
import sys
import typing
from pathlib import Path

import pytest

from pytest_triton_llm.stack import lock
from pytest_triton_llm.stack.runtimes import RUNTIMES
from pytest_triton_llm.common.schema import load_toml

ROOT = Path(__file__).resolve().parents[2]
PACKAGE = ROOT / "pytest_triton_llm"
# the reference backend's python models import their siblings by bare name, as Triton's stub runs them
MODEL_MODULES = {p.stem for p in (PACKAGE / "stand_ins" / "triton_models").rglob("*.py")}
MODEL_MODULES |= {"tensor_contract", "llmapi_contract", "hf_tokenizer"}


def contracts() -> list[dict]:
    return load_toml(ROOT / "pyproject.toml")["tool"]["importlinter"]["contracts"]


def test_lint_imports_keeps_every_contract():
    lint = shutil.which("lint-imports") or str(Path(sys.executable).parent / "lint-imports")
    done = subprocess.run([lint], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-2000:]
    assert f"Contracts: {len(contracts())} kept, 0 broken." in done.stdout


def test_the_stand_ins_contract_forbids_every_harness_module():
    top_level = {p.stem for p in PACKAGE.glob("*.py") if p.stem != "__init__"}
    top_level |= {p.name for p in PACKAGE.iterdir() if (p / "__init__.py").is_file()}
    forbidden = next(c for c in contracts() if c["type"] == "forbidden")
    assert forbidden["source_modules"] == ["pytest_triton_llm.stand_ins"]
    assert {m.removeprefix("pytest_triton_llm.") for m in forbidden["forbidden_modules"]} == top_level - {"stand_ins"}


def _function_level_internal_imports(path: Path) -> list[str]:
    found = []
    for function in (n for n in ast.walk(ast.parse(path.read_text())) if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))):
        for node in ast.walk(function):
            if isinstance(node, ast.ImportFrom):
                internal = node.level > 0 or (node.module or "").startswith("pytest_triton_llm") or node.module in MODEL_MODULES
            elif isinstance(node, ast.Import):
                internal = any(a.name.startswith("pytest_triton_llm") or a.name in MODEL_MODULES for a in node.names)
            else:
                continue
            if internal:
                found.append(f"{path.relative_to(ROOT)}:{node.lineno}")
    return found


MAX_FUNCTION_LINES = 60


def test_no_function_of_the_package_is_over_60_lines():
    long = [
        f"{path.relative_to(ROOT)}:{node.lineno} {node.name} ({node.end_lineno - node.lineno + 1} lines)"
        for path in sorted(PACKAGE.rglob("*.py"))
        for node in ast.walk(ast.parse(path.read_text()))
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and node.end_lineno - node.lineno + 1 > MAX_FUNCTION_LINES
    ]
    assert long == [], f"split these into functions of one job each: {long}"


@pytest.mark.parametrize("tree", ["pytest_triton_llm", "suites"])
def test_no_internal_import_hides_inside_a_function(tree):
    found = [hit for path in sorted((ROOT / tree).rglob("*.py")) for hit in _function_level_internal_imports(path)]
    assert found == [], f"imports of the project's own modules belong at module level: {found}"


def test_the_engines_contract_holds_every_engine_backend_but_the_reference_one():
    engines = PACKAGE / "stack" / "engines"
    modules = {p.stem for p in engines.glob("*.py")} | {p.name for p in engines.iterdir() if (p / "__init__.py").is_file()}
    contract = next(c for c in contracts() if "pytest_triton_llm.stack.engines.reference" in c.get("forbidden_modules", []))
    held = {m.removeprefix("pytest_triton_llm.stack.engines.") for m in contract["source_modules"]}
    assert held == modules - {"__init__", "reference"}  # the registry imports every backend, the reference one included


def _strings_in_code(path: Path) -> list[tuple[str, int]]:
    """(string, line) of every string constant of `path` but its docstrings."""
    tree = ast.parse(path.read_text())
    docstrings = {
        id(node.body[0].value)
        for node in ast.walk(tree)
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef))
        and node.body
        and isinstance(node.body[0], ast.Expr)
    }
    return [
        (node.value, node.lineno)
        for node in ast.walk(tree)
        if isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in docstrings
    ]


def test_only_repository_stand_in_reads_the_stand_ins_files():
    """With the engines contract: no engine backend but the reference one reads them (through repository.stand_in)."""
    readers = {
        str(path.relative_to(ROOT))
        for path in PACKAGE.rglob("*.py")
        if "stand_ins" not in path.relative_to(PACKAGE).parts and any("stand_ins" in text for text, _ in _strings_in_code(path))
    }
    # and the trtllm-serve stand-in's launcher, which copies the stand-in's server (no engine backend serves it)
    assert readers == {"pytest_triton_llm/stack/repository/stand_in.py", "pytest_triton_llm/openai/trtllm_serve.py"}


# what the stand-in and the client must agree on: input names, the word-list format, how parameters read
SHARED_WITH_THE_STAND_IN = {"RENAMED", "pack_word_ids", "config_parameters", "flag"}


def test_the_stand_in_takes_only_the_shared_names_from_the_clients_tensor_contract():
    """The serving half (models/common/served_contract.py) is the stand-in's own: a bug in the client's encoders or
    response readers cannot hide behind the same code on the server."""
    taken = {}
    for path in sorted((PACKAGE / "stand_ins").rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom) and node.module == "tensor_contract":
                taken.update({alias.name: f"{path.relative_to(ROOT)}:{node.lineno}" for alias in node.names})
            elif isinstance(node, ast.Import) and any(alias.name == "tensor_contract" for alias in node.names):
                taken["the whole module"] = f"{path.relative_to(ROOT)}:{node.lineno}"
    assert {name: where for name, where in taken.items() if name not in SHARED_WITH_THE_STAND_IN} == {}


_COMPARING = (ast.Eq, ast.NotEq, ast.In, ast.NotIn)


def _name_modules() -> dict[str, Path]:
    """Each runtime's name (the registry's keys) -> its runtime's module; each layout's name -> lock.py, which describes
    the layouts (lock.LAYOUTS)."""
    where = {name: Path(sys.modules[runtime.__module__].__file__).resolve() for name, runtime in RUNTIMES.items()}
    where.update({layout: Path(lock.__file__).resolve() for layout in typing.get_args(lock.Layout)})
    return where


def _literals(node: ast.AST) -> list[str]:
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return [node.value]
    if isinstance(node, (ast.Tuple, ast.List, ast.Set)):
        return [literal for element in node.elts for literal in _literals(element)]
    return []


def _compared(source: str) -> list[tuple[str, int]]:
    """(string, line) of every string literal compared in `source`: an operand of ==, !=, in or not in (alone or in a
    literal tuple, list or set), or a match statement's case."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Compare) and any(isinstance(op, _COMPARING) for op in node.ops):
            operands = [node.left, *node.comparators]
        elif isinstance(node, ast.MatchValue):
            operands = [node.value]
        else:
            continue
        found += [(literal, node.lineno) for operand in operands for literal in _literals(operand)]
    return found


def test_the_name_check_sees_every_form_of_comparison():
    source = """
if runtime == "container": pass
if "remote" != name: pass
if layout in ("llmapi", None): pass
if layout not in {"inflight_batcher_llm"}: pass
x = "local" if a == b else "llmapi"
match runtime:
    case "local": pass
"""
    assert sorted(_compared(source)) == [
        ("container", 2),
        ("inflight_batcher_llm", 5),
        ("llmapi", 4),
        ("local", 8),
        ("remote", 3),
    ]


@pytest.mark.parametrize("tree", ["pytest_triton_llm", "suites", "benchmarks", "scripts"])
def test_no_runtime_or_layout_name_is_compared_outside_its_own_module(tree):
    """A runtime (runtimes/) or a layout (lock.py) is one definition: what differs is a member of the runtime (Runtime,
    stack/runtimes/base.py) or a field of the layout (lock.ServingLayout), never a comparison of its name elsewhere."""
    assert set(typing.get_args(lock.Layout)) == set(lock.LAYOUTS)  # every layout is described, once
    where = _name_modules()
    found = [
        f"{path.relative_to(ROOT)}:{line}: {literal!r}"
        for path in sorted((ROOT / tree).rglob("*.py"))
        for literal, line in _compared(path.read_text())
        if literal in where and where[literal] != path.resolve()
    ]
    assert found == [], f"compared by name outside the module that defines it (give the runtime or layout a member): {found}"


def test_the_client_users_import_by_its_old_name_still_imports_with_a_deprecation_warning():
    code = "from pytest_triton_llm.client import LLMClient; print(LLMClient.__module__)"
    done = subprocess.run([sys.executable, "-W", "always::DeprecationWarning", "-c", code], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "pytest_triton_llm.triton.client"
    assert "pytest_triton_llm.client moved to pytest_triton_llm.triton.client" in done.stderr


def test_the_package_root_holds_only_its_init_and_the_concept_folders():
    assert sorted(p.name for p in PACKAGE.glob("*.py")) == ["__init__.py"]
