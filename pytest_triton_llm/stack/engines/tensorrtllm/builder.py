"""The tensorrtllm "engine build": the lock's recipe rendered to the TensorRT-LLM commands of the target
version (tensorrtllm.build_commands) and run one after another by an executor, with progress.

The cache key covers the recipe, the TensorRT-LLM version, the image digest (container builds) and
the GPU's compute capability: an engine only runs on the architecture and version that built it.
Every command's output goes to logs/<engine>-build.log in the cache (kept when a build fails) and into
the engine directory as build.log. The checkpoint's tokenizer is copied into the engine (tokenizer/, part of
its digest): preprocessing, postprocessing and the harness read it there, the engine carries all it serves.
A dummy-weight engine (lock source `dummy`) downloads no weights: its tokenizer comes from the tokenizer engine's
source, and trtllm-build reads the PretrainedConfig written into the work directory (dummy.py).
"""

from __future__ import annotations

import json
import shlex
import shutil
import tempfile
import time
from pathlib import Path

from ....host.hardware import compute_capability
from ...lock import DUMMY, Engine
from ....common.progress import Progress
from ..base import BuildError
from ..sources import TOKENIZER_FILES, fetch_checkpoint, fetch_dummy_tokenizer
from .commands import build_commands
from .dummy import MODEL_CONFIG, pretrained_config

BUILD_LOG = "build.log"
TOKENIZER_DIR = "tokenizer"
_TOKENIZER_CORE = ("tokenizer.json", "tokenizer_config.json", "tokenizer.model", "vocab.json", "vocab.txt")
_HEARTBEAT_S = 20.0


def command_label(argv: list[str]) -> str:
    """`convert_checkpoint.py`, `trtllm-build`: what a progress line calls a command."""
    program = argv[1] if Path(argv[0]).name.startswith("python") and len(argv) > 1 else argv[0]
    return Path(program).name


def tokenizer_files(checkpoint: Path) -> list[Path]:
    """The checkpoint's tokenizer files; BuildError, before any build command runs, when it has none."""
    found = sorted({path for pattern in TOKENIZER_FILES for path in checkpoint.glob(pattern) if path.is_file()})
    if not any(path.name in _TOKENIZER_CORE for path in found):
        raise BuildError(
            f"the checkpoint {checkpoint} has no tokenizer (none of {', '.join(_TOKENIZER_CORE)}): the engine serves "
            "its tokenizer to preprocessing and postprocessing; use a checkpoint directory that holds one"
        )
    return found


class TrtllmBuilder:
    def __init__(self, executor, cache_root: Path, progress: Progress, gpu: str | None = None):
        capability = compute_capability(gpu)
        if capability is None and gpu is not None:
            raise BuildError(f"nvidia-smi knows no GPU {gpu!r} (from --triton-gpus or CUDA_VISIBLE_DEVICES): name one it lists")
        if capability is None:
            raise BuildError(
                "tensorrtllm engines are built on the NVIDIA GPU that serves them, and nvidia-smi reports none "
                'here; run on a GPU host, or use a reference engine (backend = "reference") on CPU'
            )
        self.executor, self.cache_root, self.progress = executor, cache_root, progress
        # builder_version 2: the engine carries its tokenizer (engines of version 1 lack it and are rebuilt)
        self.identity = {"backend": "tensorrtllm", "builder_version": 2, **executor.identity, "compute_capability": capability}

    def build(self, name: str, engine: Engine, out: Path) -> dict:
        dummy = engine.source.dummy
        if dummy is None:
            checkpoint = fetch_checkpoint(engine.source, self.cache_root / "sources", self.progress)
        else:  # mounted where a checkpoint would be: only the tokenizer engine's tokenizer files, no weights
            checkpoint = fetch_dummy_tokenizer(name, dummy, self.cache_root / "sources", self.progress)
        tokenizer = tokenizer_files(checkpoint)
        origin = f"dummy weights of {dummy.config}" if dummy else str(checkpoint)
        self.progress.say(f"engine {name}: building with {self.executor.describe()} from {origin}")
        log_path = self.cache_root / "logs" / f"{name}-build.log"
        log_path.parent.mkdir(parents=True, exist_ok=True)
        work = Path(tempfile.mkdtemp(prefix=".trtllm-work-", dir=out.parent))  # the converted checkpoint
        model_config = pretrained_config(engine) if dummy is not None else None
        if model_config is not None:
            (work / MODEL_CONFIG).write_text(json.dumps(model_config, indent=2, sort_keys=True))
        try:
            with self.executor.session(checkpoint, out, work) as (paths, run, where), open(log_path, "w") as log:
                log.write(f"# {where}\n")
                commands = build_commands(engine, self.executor.entry, paths)
                for number, argv in enumerate(commands, start=1):
                    self._run(name, f"[{number}/{len(commands)}] {command_label(argv)}", argv, run, log)
        finally:
            shutil.rmtree(work, ignore_errors=True)
        shutil.copy2(log_path, out / BUILD_LOG)
        (out / TOKENIZER_DIR).mkdir()
        for path in tokenizer:
            shutil.copy2(path, out / TOKENIZER_DIR / path.name)
        extra = {"weights": DUMMY, "dummy": {**dummy.describe(), "pretrained_config": model_config}} if dummy else {}
        return {
            "commands": [shlex.join(argv) for argv in commands],
            "tensorrt_llm": self.executor.entry.tensorrt_llm,
            "tokenizer": TOKENIZER_DIR,
            **extra,
        }

    def _run(self, name: str, step: str, argv: list[str], run, log) -> None:
        log.write(f"$ {shlex.join(argv)}\n")
        lines: list[str] = []
        next_note = time.monotonic() + _HEARTBEAT_S

        def on_line(line: str) -> None:
            nonlocal next_note
            log.write(line + "\n")
            lines.append(line)
            del lines[:-20]
            if time.monotonic() >= next_note and line.strip():  # a long build says where it is now and then
                self.progress.say(f"engine {name}: {step}: {line.strip()[:160]}")
                next_note = time.monotonic() + _HEARTBEAT_S

        with self.progress.step(f"engine {name}: {step}"):
            code = run(argv, on_line)
            log.flush()
            if code != 0:
                tail = "\n".join(lines[-15:])
                raise BuildError(
                    f"engine {name}: {command_label(argv)} failed (exit {code}); log {log.name}:\n$ {shlex.join(argv)}\n{tail}"
                )
