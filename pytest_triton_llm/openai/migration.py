"""fixtures/openai_migration.toml, checked: per pair of a Triton engine and an OpenAI server family, the migration
gate's equality rule, throughput floor and ROUGE allowance (suites/test_migration.py, class TestOverV1)."""

from __future__ import annotations

from pathlib import Path

from ..verdicts.equality import Rule
from ..common.errors import TritonLLMError
from ..common.files import fixtures_dir
from ..common.schema import load_toml

PAIRS_FILE = fixtures_dir() / "openai_migration.toml"
KEYS = {"equality", "min_throughput_ratio", "max_rouge_drop"}


class PairsFileError(TritonLLMError, ValueError):
    """The pairs file has an entry the gate cannot read: one line naming the entry and what to fix."""


def pair_entry(engine: str, family: str, path: Path = PAIRS_FILE) -> dict:
    """The checked entry for (engine, family), or {} (the gate then uses the engine's own rule and judges no floor)."""
    pairs = load_pairs(path)
    return pairs.get(engine, {}).get(family, {})


def load_pairs(path: Path = PAIRS_FILE) -> dict[str, dict[str, dict]]:
    pairs = load_toml(path).get("pairs", {})
    for engine, families in pairs.items():
        for family, entry in families.items():
            _check(f"{path.name} [pairs.{engine}.{family}]", entry)
    return pairs


def _check(where: str, entry: dict) -> None:
    unknown = sorted(set(entry) - KEYS)
    if unknown:
        raise PairsFileError(f"{where}: unknown key(s) {', '.join(unknown)}; the keys are {', '.join(sorted(KEYS))}")
    for key in ("min_throughput_ratio", "max_rouge_drop"):
        value = entry.get(key)
        if value is not None and (isinstance(value, bool) or not isinstance(value, (int, float)) or value < 0):
            raise PairsFileError(f"{where}: {key} must be a number >= 0; got {value!r}")
    if "equality" in entry:
        if not isinstance(entry["equality"], dict):
            raise PairsFileError(f"{where}: equality must be a table {{ min_identical_prefix_tokens, min_identical_pct }}")
        try:
            Rule(**entry["equality"])
        except (TypeError, ValueError) as exc:
            raise PairsFileError(f"{where}: equality: {exc} (equality.Rule's fields)") from None
