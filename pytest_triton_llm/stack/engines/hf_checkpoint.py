"""The Hugging Face checkpoint a reference or llmapi engine is made of: the embedded default's GGUF converted to
safetensors + tokenizer, or (a `dummy` source) seeded random weights of a config's shape (dummy_weights.py) with the
tokenizer engine's tokenizer; plus engine.json, which mirrors the `build_config` of a TensorRT-LLM engine's config.json
so that the reference model enforces the same limits a real engine would. Cached like a TensorRT-LLM engine.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from importlib import metadata
from pathlib import Path

from ..lock import DUMMY, LOGITS_GATHERING, Engine
from ...common.progress import Progress
from .base import BuildError
from .sources import fetch_dummy_tokenizer, fetch_source

ENGINE_CONFIG = "engine.json"
_VERSIONED = ("torch", "transformers", "gguf", "safetensors", "pytest-triton-llm")


def _versions() -> dict[str, str]:
    found = {}
    for dist in _VERSIONED:
        try:
            found[dist] = metadata.version(dist)
        except metadata.PackageNotFoundError:
            found[dist] = "not installed"
    return found


def convert_command(gguf: Path, out: Path, dtype: str) -> list[str]:
    return [
        sys.executable,
        "-m",
        "pytest_triton_llm.stack.engines.gguf_to_hf",
        "--gguf",
        str(gguf),
        "--out",
        str(out),
        "--dtype",
        dtype,
    ]


def vision_command(engine_dir: Path, engine: Engine) -> list[str]:
    """vision_tower.py's argv: the lock's [vision] encoder, built into the converted checkpoint's directory."""
    vision = engine.vision
    assert vision is not None
    return [
        sys.executable,
        "-m",
        "pytest_triton_llm.stack.engines.vision_tower",
        "--engine",
        str(engine_dir),
        "--model-type",
        vision.model_type,
        "--image-size",
        str(vision.image_size),
        "--patch-size",
        str(vision.patch_size),
        "--hidden-size",
        str(vision.hidden_size),
        "--layers",
        str(vision.layers),
        "--seed",
        str(vision.seed),
        "--dtype",
        engine.dtype,
    ]


def draft_command(engine_dir: Path, engine: Engine) -> list[str]:
    """draft_checkpoint.py's argv: the lock's [draft] engine, written into the converted checkpoint's directory."""
    assert engine.draft is not None
    layers = ",".join(str(i) for i in engine.draft.drop_layers)
    module = "pytest_triton_llm.stack.engines.draft_checkpoint"
    return [sys.executable, "-m", module, "--engine", str(engine_dir), "--drop-layers", layers]


def dummy_command(config: Path, seed: int, dtype: str, out: Path, tokenizer: Path) -> list[str]:
    """dummy_weights.py's argv; `tokenizer` is a checkpoint directory or a GGUF file that carries one."""
    flag = "--tokenizer-gguf" if tokenizer.is_file() else "--tokenizer-dir"
    return [
        sys.executable,
        "-m",
        "pytest_triton_llm.stack.engines.dummy_weights",
        "--config",
        str(config),
        "--seed",
        str(seed),
        "--dtype",
        dtype,
        "--out",
        str(out),
        flag,
        str(tokenizer),
    ]


class ReferenceBuilder:
    # bump when the conversion's output changes: engines built by an older builder are rebuilt
    identity = {"backend": "reference", "builder_version": 2}

    def __init__(self, sources_dir: Path, progress: Progress):
        self.sources_dir = sources_dir
        self.progress = progress

    def build(self, name: str, engine: Engine, out: Path) -> dict:
        dummy = engine.source.dummy
        if dummy is None:
            source = fetch_source(engine.source, self.sources_dir, self.progress)
        else:
            source = fetch_dummy_tokenizer(name, dummy, self.sources_dir, self.progress)
        versions = _versions()
        if "not installed" in (versions["torch"], versions["transformers"]):
            raise BuildError("the reference backend needs torch and transformers: pip install 'pytest-triton-llm[reference]'")
        if dummy is None:
            self._run(name, "GGUF conversion", convert_command(source, out, engine.dtype))
        else:
            self.progress.say(
                f"engine {name}: dummy weights of {dummy.config} (seed {dummy.seed}), tokenizer of engine {dummy.tokenizer}"
            )
            self._run(name, "dummy weights", dummy_command(Path(dummy.config), dummy.seed, engine.dtype, out, source))
        if engine.vision is not None:
            self._run(name, "vision encoder", vision_command(out, engine))
        build_config: dict[str, object] = {
            "max_batch_size": engine.max_batch_size,
            "max_input_len": engine.max_input_len,
            "max_output_len": engine.max_output_len,
            "max_seq_len": engine.max_input_len + engine.max_output_len,
        }
        if engine.max_prompt_embedding_table_size:  # named as in a TensorRT-LLM engine's build_config
            build_config["max_prompt_embedding_table_size"] = engine.max_prompt_embedding_table_size
        if engine.max_draft_len:
            build_config["max_draft_len"] = engine.max_draft_len
        build_config |= {gather: True for gather in LOGITS_GATHERING if getattr(engine, gather)}
        if engine.lora is not None:  # named as in a TensorRT-LLM engine's build_config
            build_config["lora_config"] = {
                "max_lora_rank": engine.lora.max_rank,
                "lora_target_modules": list(engine.lora.target_modules),
            }
        weights = {"weights": DUMMY, "seed": dummy.seed} if dummy else {}  # what the engine says of itself
        (out / ENGINE_CONFIG).write_text(
            json.dumps({"backend": "reference", "dtype": engine.dtype, "build_config": build_config, **weights}, indent=2)
        )
        if engine.draft is not None:  # from the engine's weights and engine.json, both written above
            self._run(name, "draft engine", draft_command(out, engine))
        origin: dict[str, object] = {"source_file": str(source)}
        if dummy is not None:
            origin = {"weights": DUMMY, "dummy": {**dummy.describe(), "tokenizer_from": str(source)}}
        return {"versions": versions, "build_config": build_config, **origin}

    def _run(self, name: str, what: str, argv: list[str]) -> None:
        """A build subprocess, its lines as progress; BuildError with its last lines when it fails."""
        # a fixed hash seed: safetensors lays out tied tensors in set order, and the engine's digest
        # should not depend on the process (two clean builds once differed in model.safetensors only)
        proc = subprocess.Popen(
            argv,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            env={**os.environ, "PYTHONHASHSEED": "0"},
        )
        lines = []
        assert proc.stdout is not None  # stdout=PIPE
        for line in proc.stdout:
            line = line.rstrip()
            lines.append(line)
            if line and not line.startswith(("Warning", "warn")):
                self.progress.say(f"engine {name}: {line}")
        if proc.wait() != 0:
            tail = "\n".join(lines[-15:])
            raise BuildError(f"engine {name}: {what} failed (exit {proc.returncode}):\n{tail}")
