"""The project's stand-in code in a rendered repository: which files make each of its python models, how they are
copied into a model's version directory, and the parameter every model it serves carries.

Only the reference backend and --trtllm-stand-in put this code in a repository; a real tensorrtllm or llmapi
deployment never reads these files (an import-linter contract in pyproject.toml holds the tensorrtllm backend to it).
The parameter STAND_IN_PARAMETER (the project's version) is how a server tells, from outside, that a model is the
project's stand-in and not upstream's python model of the same name: the remote runtime asks for it by name.
"""

from __future__ import annotations

import shutil
import sys
from importlib import metadata, resources
from pathlib import Path
from typing import TYPE_CHECKING

from google.protobuf import text_format
from tritonclient.grpc import model_config_pb2

from . import STAND_IN

if TYPE_CHECKING:
    if sys.version_info >= (3, 11):
        from importlib.resources.abc import Traversable
    else:  # Python 3.10 has it under importlib.abc only
        from importlib.abc import Traversable

# the project's python models (preprocessing, postprocessing, the BLS and the reference tensorrt_llm), read as files
PYTHON_MODELS = resources.files("pytest_triton_llm") / "stand_ins" / "triton_models"
# harness modules the python models import by bare name, copied beside their code
SHARED_MODULES = (
    resources.files("pytest_triton_llm") / "triton" / "tensor_contract.py",
    resources.files("pytest_triton_llm") / "triton" / "hf_tokenizer.py",
)
# the llmapi stand-in: its own model and the reference generation code it shares with the tensorrt_llm stand-in
LLMAPI_SHARED = (
    "generation.py",
    "guided.py",
    "inflight.py",
    "lora.py",
    "errors.py",
    "prefix_cache.py",
    "retention.py",
    "ngram.py",
)
LLMAPI_EXTRA = {
    "llmapi_contract.py": resources.files("pytest_triton_llm") / "triton" / "llmapi_contract.py",
    "lora_convert.py": resources.files("pytest_triton_llm") / "lora" / "convert.py",
}
UPSTREAM_LLMAPI_CODE = ("model.py", "helpers.py")  # what links to the image's llmapi model, replaced by the stand-in
STAND_IN_PARAMETER = "pytest_triton_llm_stand_in"
# the template family a stand-in serves (fixtures/contracts/<family>.toml): its model answers as that version of
# upstream's does where they differ (a stop signal for a request not in flight)
FAMILY_PARAMETER = "stand_in_family"
FAULT_PARAMETER = "stand_in_fault"  # --stand-in-fault NAME: a known upstream bug the stand-in reproduces (faults.py)
ORIGIN = STAND_IN  # what the report says served a model of this code


def version() -> str:
    try:
        return metadata.version("pytest-triton-llm")
    except metadata.PackageNotFoundError:
        return "unknown"


def model_files(model: str) -> list[Traversable]:
    """A stand-in model's code, the helpers every project model shares, and the shared harness modules."""
    code = PYTHON_MODELS / model
    return [
        item for item in [*code.iterdir(), *(PYTHON_MODELS / "common").iterdir(), *SHARED_MODULES] if item.name.endswith(".py")
    ]


def copy_model(model: str, version_dir: Path) -> str:
    """The stand-in's `model` (preprocessing, tensorrt_llm, ...) into `version_dir`; returns its origin for the report."""
    version_dir.mkdir(parents=True, exist_ok=True)
    for item in model_files(model):
        shutil.copyfile(str(item), version_dir / item.name)
    return ORIGIN


def copy_llmapi(version_dir: Path) -> str:
    """The llmapi stand-in into an llmapi model's version directory, in place of links to upstream's code."""
    for name in UPSTREAM_LLMAPI_CODE:
        (version_dir / name).unlink(missing_ok=True)
    copy_model("llmapi", version_dir)
    for name in LLMAPI_SHARED:
        shutil.copyfile(str(PYTHON_MODELS / "tensorrt_llm" / name), version_dir / name)
    for name, item in LLMAPI_EXTRA.items():
        (version_dir / name).write_text(item.read_text())
    return ORIGIN


def _mark(config: model_config_pb2.ModelConfig, family: str | None) -> None:
    config.parameters[STAND_IN_PARAMETER].string_value = version()
    if family is not None:
        config.parameters[FAMILY_PARAMETER].string_value = family


def marked(config_text: str, family: str | None = None) -> str:
    """A stand-in model's config.pbtxt with the stand-in parameter added (and the template family it serves, where
    upstream's answers differ by version), the config's own parameters kept."""
    config = text_format.Parse(config_text, model_config_pb2.ModelConfig())
    _mark(config, family)
    return text_format.MessageToString(config)


def add_fault(repository: Path, fault: str, model_code: dict[str, str]) -> list[str]:
    """A stand-in fault laid over a rendered repository: the parameter that switches it on, in the config of every
    model whose code (`model_code`, as rendered) is the stand-in's; nothing else changes. Returns those models."""
    faulted = []
    for model, origin in sorted(model_code.items()):
        config_path = repository / model / "config.pbtxt"
        if origin != ORIGIN or not config_path.is_file():
            continue
        config = text_format.Parse(config_path.read_text(), model_config_pb2.ModelConfig())
        config.parameters[FAULT_PARAMETER].string_value = fault
        config_path.write_text(text_format.MessageToString(config))
        faulted.append(model)
    return faulted


def swap_in(repository: Path, family: str) -> list[str]:
    """Serve a rendered repository's models on Triton's tensorrtllm backend by the tensorrt_llm stand-in (python
    backend, its config kept but for the backend and the stand-in's parameters); everything else stays as rendered.
    Returns the models swapped."""
    swapped = []
    for config_path in sorted(repository.glob("*/config.pbtxt")):
        config = text_format.Parse(config_path.read_text(), model_config_pb2.ModelConfig())
        if config.backend != "tensorrtllm":
            continue
        config.backend = "python"
        _mark(config, family)
        config_path.write_text(text_format.MessageToString(config))
        version_dir = config_path.parent / "1"
        version_dir.mkdir(exist_ok=True)
        for item in version_dir.glob("*.py"):  # upstream's python-backend variant needs tensorrt_llm itself
            item.unlink()
        copy_model("tensorrt_llm", version_dir)
        swapped.append(config.name or config_path.parent.name)
    return swapped
