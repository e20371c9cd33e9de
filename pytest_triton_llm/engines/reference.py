"""The reference backend: a Triton python-backend model with the tensorrt_llm tensor contract that runs a
Hugging Face model (reference_backend/models/tensorrt_llm), on any machine.

Its "engine build": GGUF -> safetensors + tokenizer + engine.json, or for a `dummy` source random weights of the
config's shape (dummy_weights.py) with the tokenizer engine's tokenizer. engine.json mirrors the `build_config`
of a TensorRT-LLM engine's config.json, so the reference model enforces the same limits a real engine would.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from importlib import metadata
from pathlib import Path

from ..cache import BuiltEngine, EngineCache
from ..compat import ImageEntry
from ..lock import DUMMY, DeploymentRef, Engine
from ..progress import Progress
from ..repository import PYTHON_MODELS, python_model_files, render_repository
from ..repository.llmapi import check_arguments, render_llmapi_repository
from ..repository.user import render_user_repository
from .base import BuildError, SiteFn
from .sources import fetch_dummy_tokenizer, fetch_source

ENGINE_CONFIG = "engine.json"
_VERSIONED = ("torch", "transformers", "gguf", "safetensors", "pytest-triton-llm")
# what the reference model implements (see the triton_llm_requires marker)
CAPABILITIES = frozenset({"v1", "inflight", "streaming", "cancellation", "lora", "inflight_batcher_llm", "llmapi"})


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
        "pytest_triton_llm.engines.gguf_to_hf",
        "--gguf",
        str(gguf),
        "--out",
        str(out),
        "--dtype",
        dtype,
    ]


def dummy_command(config: Path, seed: int, dtype: str, out: Path, tokenizer: Path) -> list[str]:
    """dummy_weights.py's argv; `tokenizer` is a checkpoint directory or a GGUF file that carries one."""
    flag = "--tokenizer-gguf" if tokenizer.is_file() else "--tokenizer-dir"
    return [sys.executable, "-m", "pytest_triton_llm.engines.dummy_weights", "--config", str(config), "--seed", str(seed),
            "--dtype", dtype, "--out", str(out), flag, str(tokenizer)]  # fmt: skip


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
            self.progress.say(f"engine {name}: dummy weights of {dummy.config} (seed {dummy.seed}), tokenizer of engine "
                              f"{dummy.tokenizer}")  # fmt: skip
            self._run(name, "dummy weights", dummy_command(Path(dummy.config), dummy.seed, engine.dtype, out, source))
        build_config = {
            "max_batch_size": engine.max_batch_size,
            "max_input_len": engine.max_input_len,
            "max_output_len": engine.max_output_len,
            "max_seq_len": engine.max_input_len + engine.max_output_len,
        }
        if engine.lora is not None:  # named as in a TensorRT-LLM engine's build_config
            build_config["lora_config"] = {
                "max_lora_rank": engine.lora.max_rank,
                "lora_target_modules": list(engine.lora.target_modules),
            }
        weights = {"weights": DUMMY, "seed": dummy.seed} if dummy else {}  # what the engine says of itself
        (out / ENGINE_CONFIG).write_text(
            json.dumps({"backend": "reference", "dtype": engine.dtype, "build_config": build_config, **weights}, indent=2)
        )
        origin = {"source_file": str(source)}
        if dummy is not None:
            origin = {"weights": DUMMY, "dummy": {**dummy.describe(), "tokenizer_from": str(source)}}
        return {"versions": versions, "build_config": build_config, **origin}

    def _run(self, name: str, what: str, argv: list[str]) -> None:
        """A build subprocess, its lines as progress; BuildError with its last lines when it fails."""
        # a fixed hash seed: safetensors lays out tied tensors in set order, and the engine's digest
        # should not depend on the process (two clean builds once differed in model.safetensors only)
        proc = subprocess.Popen(
            argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env={**os.environ, "PYTHONHASHSEED": "0"},
        )  # fmt: skip
        lines = []
        for line in proc.stdout:
            line = line.rstrip()
            lines.append(line)
            if line and not line.startswith(("Warning", "warn")):
                self.progress.say(f"engine {name}: {line}")
        if proc.wait() != 0:
            tail = "\n".join(lines[-15:])
            raise BuildError(f"engine {name}: {what} failed (exit {proc.returncode}):\n{tail}")


class ReferenceBackend:
    name = "reference"
    stand_in = True
    needs_gpu = False

    def check_recipe(self, engine: Engine) -> None:
        if engine.world_size != 1 or engine.quantization:
            raise ValueError("fields 'tp_size', 'pp_size', 'quantization': only the tensorrtllm backend has them")
        check_arguments(engine)

    def build(self, cache: EngineCache, name: str, engine: Engine, rebuild: bool, site: SiteFn) -> BuiltEngine:
        builder = ReferenceBuilder(cache.sources_dir(), cache.progress)  # converts here, whatever the runtime
        return cache.get_or_build(name, engine.recipe(), builder.identity, lambda out: builder.build(name, engine, out),
                                  rebuild=rebuild)  # fmt: skip

    def render(self, ref: DeploymentRef, built: BuiltEngine, out: Path, triton_version: str,
               engine_dir: str | None) -> Path:  # fmt: skip
        if ref.layout == "llmapi":  # the PyTorch path's one python model, the checkpoint loaded as converted
            return render_llmapi_repository(ref, built, out, triton_version, engine_dir, code=True)
        if ref.options.repository is not None:  # the user's own, its tensorrtllm models served by the stand-in
            stand_in = python_model_files(PYTHON_MODELS / "tensorrt_llm")
            return render_user_repository(ref, built, out, engine_dir or str(built.path), stand_in)
        code = {model: PYTHON_MODELS / model for model in ("preprocessing", "tensorrt_llm", "postprocessing", "tensorrt_llm_bls")}
        return render_repository(ref, built, out, triton_version, engine_dir, "python", code)

    def lacking(self, needs: set[str], entry: ImageEntry | None) -> str | None:
        missing = sorted(needs - CAPABILITIES)
        return f"the reference backend has no {', '.join(missing)}" if missing else None
