"""LoRA adapters: recipes, deterministic creation with peft, conversion to TensorRT-LLM tensors.

recipes      fixtures/lora_adapters.toml -> AdapterRecipe
make_adapter peft adapter from a recipe (subprocess: torch stays out of pytest)
convert      peft/HF adapter -> lora_weights [1, rows, size] + lora_config [1, rows, 3]
build_adapter  all of it, cached like an engine
"""

from __future__ import annotations

import subprocess
import sys
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np

from ..stack.cache import BuiltEngine, EngineCache
from .convert import peft_to_trtllm
from .recipes import AdapterRecipe
from ..common.errors import TritonLLMError

ADAPTER_BUILDER = {"backend": "peft", "builder_version": 1}


class AdapterError(TritonLLMError, RuntimeError):
    pass


@dataclass(frozen=True)
class Adapter:
    name: str
    path: Path  # the peft adapter directory
    lora_weights: np.ndarray  # [1, rows, size] float16
    lora_config: np.ndarray  # [1, rows, 3] int32: module id, layer, rank


def make_command(engine_dir: Path, recipe: AdapterRecipe, out: Path) -> list[str]:
    return [
        sys.executable,
        "-m",
        "pytest_triton_llm.lora.make_adapter",
        "--engine",
        str(engine_dir),
        "--out",
        str(out),
        "--rank",
        str(recipe.rank),
        "--alpha",
        str(recipe.alpha),
        "--seed",
        str(recipe.seed),
        "--b-std",
        str(recipe.b_std),
        "--target-modules",
        *recipe.target_modules,
    ]


def build_adapter(cache: EngineCache, name: str, recipe: AdapterRecipe, engine: BuiltEngine) -> Adapter:
    """The adapter for `recipe` on `engine`, made once and reused from the cache."""

    def build(out: Path) -> dict:
        result = subprocess.run(make_command(engine.path, recipe, out), capture_output=True, text=True)
        if result.returncode != 0:
            tail = "\n".join((result.stdout + result.stderr).strip().splitlines()[-10:])
            raise AdapterError(f"adapter {name}: peft failed (exit {result.returncode}):\n{tail}")
        weights, config = peft_to_trtllm(out)
        np.save(out / "model.lora_weights.npy", weights)
        np.save(out / "model.lora_config.npy", config)
        return {"engine_digest": engine.digest}

    # the adapter depends on the engine's weights, so their digest is part of its key
    recipe_key = dict(asdict(recipe), engine_digest=engine.digest)
    built = cache.get_or_build(name, recipe_key, ADAPTER_BUILDER, build, kind="adapter")
    return Adapter(
        name, built.path, np.load(built.path / "model.lora_weights.npy"), np.load(built.path / "model.lora_config.npy")
    )
