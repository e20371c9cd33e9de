"""fixtures/properties.toml, read and checked: which property each request input of each surface belongs to, and how
its effect is judged. The suite (suites/test_properties.py) runs the effect checks; coverage.py lays the cells out."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from ..common.files import fixtures_dir
from ..common.schema import load_toml

# surfaces: the names an input has on a path (fixtures/properties.toml's `names` keys)
TRITON, TENSORRT_LLM, LLMAPI, OPENAI = "triton", "tensorrt_llm", "llmapi_model", "openai"
SURFACES = (TRITON, TENSORRT_LLM, LLMAPI, OPENAI)
VERDICTS = ("effect", "checked_by", "skip", "pending")
PROPERTIES_FILE = fixtures_dir() / "properties.toml"


class PropertiesError(ValueError):
    """fixtures/properties.toml is malformed: one line naming the property and what to fix."""


@dataclass(frozen=True)
class Property:
    name: str
    names: dict[str, tuple[str, ...]]  # surface -> its input names (or field names, on openai)
    effect: str | None = None
    checked_by: tuple[str, ...] = ()
    skip: str | None = None
    pending: str | None = None
    doc: str = ""
    marker: str | None = None  # the suites' marker of the capability its cells check (`-m guided`), beside the mode's

    @property
    def status(self) -> str:
        """checked (an effect or tests elsewhere), skipped or pending."""
        if self.effect or self.checked_by:
            return "checked"
        return "skipped" if self.skip else "pending"

    @property
    def how(self) -> str:
        if self.effect:
            return f"effect {self.effect}"
        if self.checked_by:
            return "; ".join(self.checked_by)
        return self.skip or self.pending or ""


def load_properties(path: Path = PROPERTIES_FILE) -> dict[str, Property]:
    table = load_toml(path).get("properties", {})
    properties = {name: _property(name, entry) for name, entry in table.items()}
    seen: dict[tuple[str, str], str] = {}
    for prop in properties.values():
        for surface, names in prop.names.items():
            for name in names:
                if (surface, name) in seen:
                    raise PropertiesError(f"{path}: {surface} input {name!r} is in both {seen[surface, name]} and {prop.name}")
                seen[surface, name] = prop.name
    return properties


def _property(name: str, entry: dict) -> Property:
    given = [key for key in VERDICTS if key in entry]
    if len(given) != 1:
        raise PropertiesError(f"properties.{name}: give exactly one of {', '.join(VERDICTS)} (found {given or 'none'})")
    unknown = set(entry.get("names", {})) - set(SURFACES)
    if unknown or not entry.get("names"):
        raise PropertiesError(f"properties.{name}: names must map surfaces ({', '.join(SURFACES)}) to input names")
    names = {surface: tuple(entry["names"][surface]) for surface in SURFACES if surface in entry["names"]}
    return Property(
        name,
        names,
        effect=entry.get("effect"),
        checked_by=tuple(entry.get("checked_by", ())),
        skip=entry.get("skip"),
        pending=entry.get("pending"),
        doc=entry.get("doc", ""),
        marker=entry.get("marker"),
    )


def property_of(properties: dict[str, Property], surface: str, name: str) -> Property | None:
    return next((p for p in properties.values() if name in p.names.get(surface, ())), None)


def effect_properties(properties: dict[str, Property]) -> list[Property]:
    return [p for p in properties.values() if p.effect]


def missing_tests(properties: dict[str, Property], root: Path) -> list[str]:
    """checked_by entries naming a file or test function that does not exist under `root`."""
    missing = []
    for prop in properties.values():
        for test in prop.checked_by:
            file, *classes, function = test.split("::")  # suites/test_x.py[::TestOverV1]::test_name
            path = root / file
            text = path.read_text() if path.is_file() else ""
            if f"def {function}(" not in text or any(f"class {c}:" not in text for c in classes):
                missing.append(f"properties.{prop.name}: {test}")
    return missing
