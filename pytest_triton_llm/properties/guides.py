"""fixtures/guides.toml, read and checked: the guides the `guided` effect asks with, the guide type no server takes,
and the words of a server without a guided backend."""

from __future__ import annotations

from dataclasses import dataclass
from functools import cache

from ..common.files import fixtures_dir
from ..common.schema import SchemaError, build, load_toml
from ..verdicts.guided import KINDS

GUIDES_FILE = fixtures_dir() / "guides.toml"


@dataclass(frozen=True)
class Guide:
    kind: str  # the executor's guide type (verdicts.guided.KINDS)
    guide: str
    question: str
    max_tokens: int
    # the guide's grammar is finite and ends within max_tokens; false: a text cut short is judged as far as it goes
    ends: bool = True

    def __post_init__(self):
        if self.kind not in KINDS:
            raise ValueError(f"field 'kind': {self.kind!r} is none of {', '.join(KINDS)}")
        if self.max_tokens <= 0:
            raise ValueError("field 'max_tokens' must be > 0")


@dataclass(frozen=True)
class Unknown:
    kind: str
    guide: str
    triton: str  # what the Triton paths do with it, and the source


@dataclass(frozen=True)
class Guides:
    guides: dict[str, Guide]
    unknown: Unknown
    not_set_up: str  # words of the refusal of a server without a guided backend


@cache
def load_guides() -> Guides:
    data = load_toml(GUIDES_FILE)
    guides = {name: build(Guide, entry, f"{GUIDES_FILE}: guides.{name}") for name, entry in data.get("guides", {}).items()}
    if not guides:
        raise SchemaError(f"{GUIDES_FILE}: no [guides.<name>] table")
    unknown = build(Unknown, data.get("unknown", {}), f"{GUIDES_FILE}: unknown")
    if unknown.kind in KINDS:
        raise SchemaError(f"{GUIDES_FILE}: unknown.kind {unknown.kind!r} is a type servers take")
    return Guides(guides, unknown, data.get("not_set_up", {}).get("words", ""))
