"""LoRA adapter recipes (fixtures/lora_adapters.toml)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from ..common.schema import SchemaError, build, load_toml


@dataclass(frozen=True)
class AdapterRecipe:
    engine: str
    rank: int
    alpha: int
    target_modules: tuple[str, ...]  # Hugging Face module names, e.g. q_proj
    seed: int
    b_std: float  # lora_B ~ N(0, b_std); peft's default zeros would leave the output unchanged

    def __post_init__(self):
        if self.rank <= 0 or self.b_std <= 0:
            raise ValueError("fields 'rank' and 'b_std' must be > 0")


def load_recipes(path: Path) -> dict[str, AdapterRecipe]:
    data = load_toml(path)
    try:
        return {name: build(AdapterRecipe, table, f"{path}: adapter '{name}'") for name, table in data["adapters"].items()}
    except KeyError:
        raise SchemaError(f"{path}: no [adapters.<name>] table") from None
