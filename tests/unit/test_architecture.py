"""The import layers are a checked contract: lint-imports keeps them, the reference backend's contract names every
harness module, and no internal import hides inside a function (where it would only dodge a cycle)."""

import ast
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from pytest_triton_llm.schema import load_toml

ROOT = Path(__file__).resolve().parents[2]
PACKAGE = ROOT / "pytest_triton_llm"
# the reference backend's python models import their siblings by bare name, as Triton's stub runs them
MODEL_MODULES = {p.stem for p in (PACKAGE / "reference_backend" / "models").rglob("*.py")}
MODEL_MODULES |= {"tensor_contract", "llmapi_contract", "hf_tokenizer"}


def contracts() -> list[dict]:
    return load_toml(ROOT / "pyproject.toml")["tool"]["importlinter"]["contracts"]


def test_lint_imports_keeps_every_contract():
    lint = shutil.which("lint-imports") or str(Path(sys.executable).parent / "lint-imports")
    done = subprocess.run([lint], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-2000:]
    assert f"Contracts: {len(contracts())} kept, 0 broken." in done.stdout


def test_the_reference_backend_contract_forbids_every_harness_module():
    top_level = {p.stem for p in PACKAGE.glob("*.py") if p.stem != "__init__"}
    top_level |= {p.name for p in PACKAGE.iterdir() if (p / "__init__.py").is_file()}
    forbidden = next(c for c in contracts() if c["type"] == "forbidden")
    assert forbidden["source_modules"] == ["pytest_triton_llm.reference_backend"]
    assert {m.removeprefix("pytest_triton_llm.") for m in forbidden["forbidden_modules"]} == top_level - {"reference_backend"}


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


@pytest.mark.parametrize("tree", ["pytest_triton_llm", "suites"])
def test_no_internal_import_hides_inside_a_function(tree):
    found = [hit for path in sorted((ROOT / tree).rglob("*.py")) for hit in _function_level_internal_imports(path)]
    assert found == [], f"imports of the project's own modules belong at module level: {found}"
