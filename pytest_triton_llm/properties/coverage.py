"""The property matrix laid out: every input of every served contract (fixtures/contracts/*.toml, openai_families.toml)
on every path that serves it, with how it is judged: checked (an effect check, or tests elsewhere), skipped (why),
pending (listed in fixtures/properties.toml, with why) or missing (no property names it)."""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass
from pathlib import Path

from ..common.files import fixtures_dir
from ..common.schema import load_toml
from ..common.tables import table
from ..openai.contract import load_families
from .matrix import LLMAPI, OPENAI, TENSORRT_LLM, TRITON, Property, missing_tests, property_of

CONTRACT_PATHS = {"ensemble": TRITON, "tensorrt_llm_bls": TRITON, "tensorrt_llm": TENSORRT_LLM}  # trtllm-* sections
OPENAI_ONLY = {"/v1/completions": "messages", "/v1/chat/completions": "prompt"}  # the field the other endpoint has


@dataclass(frozen=True)
class Cell:
    contract: str  # trtllm-0.19, llmapi-1.0, openai:llama-cpp-python
    path: str
    name: str  # the input (or request field)
    prop: str  # its property, or "" when none names it
    status: str  # checked | skipped | pending | missing
    how: str


def contract_inputs(contracts_dir: Path) -> list[tuple[str, str, str, list[str]]]:
    """(contract, path, surface, input names) of every served contract file."""
    found = []
    for path in sorted(contracts_dir.glob("*.toml")):
        data = load_toml(path)
        if "inputs" in data:  # the llmapi model's contract
            found.append((path.stem, "llmapi", LLMAPI, sorted(data["inputs"])))
            continue
        for model, surface in CONTRACT_PATHS.items():
            if model in data:
                found.append((path.stem, model, surface, sorted(data[model]["inputs"])))
    return found


def _cell(contract: str, path: str, surface: str, name: str, properties: dict[str, Property], support: str | None = None) -> Cell:
    prop = property_of(properties, surface, name)
    if support in ("refused", "ignored") and "." not in name:
        return Cell(contract, path, name, prop.name if prop else "", "checked", f"the {support} check (the family {support} it)")
    if support == "unknown":
        return Cell(contract, path, name, prop.name if prop else "", "skipped", "the family's contract does not know it")
    if prop is None:
        return Cell(
            contract, path, name, "", "missing", f"no property of fixtures/properties.toml names {surface} input {name!r}"
        )
    return Cell(contract, path, name, prop.name, prop.status, prop.how)


def cells(properties: dict[str, Property], contracts_dir: Path | None = None) -> list[Cell]:
    contracts_dir = contracts_dir or fixtures_dir() / "contracts"
    found = [
        _cell(contract, path, surface, name, properties)
        for contract, path, surface, names in contract_inputs(contracts_dir)
        for name in names
    ]
    for family_name, family in load_families().items():
        for path, other in OPENAI_ONLY.items():
            for name, field in family.fields.items():
                if name != other:
                    found.append(_cell(f"openai:{family_name}", path, OPENAI, name, properties, field.supported))
    return found


def render(found: list[Cell], properties: dict[str, Property], root: Path, detail: bool = False) -> tuple[str, bool]:
    """(the report, whether it passes: no missing cell and every checked_by test exists)."""
    counts = Counter((c.contract, c.path, c.status) for c in found)
    pairs = sorted({(c.contract, c.path) for c in found})
    rows = [
        [contract, path, *(counts[contract, path, s] for s in ("checked", "skipped", "pending", "missing"))]
        for contract, path in pairs
    ]
    lines = ["# property matrix: inputs x paths (fixtures/properties.toml)", ""]
    lines += table(["contract", "path", "checked", "skipped", "pending", "missing"], rows)
    by_prop = Counter(c.prop for c in found if c.status == "pending")
    if by_prop:
        lines += ["", "pending (not checked yet; each property says why):", ""]
        lines += table(["property", "cells", "why"], [[p, n, properties[p].pending] for p, n in sorted(by_prop.items())])
    problems = [f"missing: {c.contract} {c.path} {c.name}: {c.how}" for c in found if c.status == "missing"]
    problems += [f"checked_by names no such test: {m}" for m in missing_tests(properties, root)]
    if detail:
        lines += [
            "",
            *table(
                ["contract", "path", "input", "property", "status", "how"],
                [[c.contract, c.path, c.name, c.prop, c.status, c.how] for c in found],
            ),
        ]
    total = Counter(c.status for c in found)
    lines += ["", f"{len(found)} cells: " + ", ".join(f"{total[s]} {s}" for s in ("checked", "skipped", "pending", "missing"))]
    lines += problems
    return "\n".join(lines) + "\n", not problems
