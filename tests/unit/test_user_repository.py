"""A user's own model repository (a lock deployment's `repository`): filled byte for byte as upstream's
tools/fill_template.py fills it, every config parsed, and only the tensorrtllm-backend model swapped for the
reference stand-in where no GPU engine runs. The repository is upstream's v0.14.0 inflight_batcher_llm, read from
../shared/upstream (third-party test data, never copied into the project)."""

import subprocess
import sys
from pathlib import Path

import pytest
from google.protobuf import text_format
from tritonclient.grpc import model_config_pb2

from pytest_triton_llm.stack.cache import BuiltEngine
from pytest_triton_llm.stack.engines import backend_of
from pytest_triton_llm.stack.lock import load_lock
from pytest_triton_llm.stack.repository.fill import TemplateError
from pytest_triton_llm.stack.repository.stand_in import FAMILY_PARAMETER, STAND_IN_PARAMETER
from pytest_triton_llm.stack.repository.stand_in import version as stand_in_version
from pytest_triton_llm.stack.repository.user import fill_like_upstream, placeholder_values
from ..third_party import UPSTREAM, UPSTREAM_MODELS, needs_upstream

ROOT = Path(__file__).resolve().parents[2]
MODELS = UPSTREAM_MODELS
pytestmark = needs_upstream

LOCK = """
version = 1
[engines.tiny]
backend = "{backend}"
dtype = "float16"
max_batch_size = 4
max_input_len = 64
max_output_len = 16
[engines.tiny.source]
path = "/ckpt"
file = "model.safetensors"
sha256 = "{zeros}"
[engines.tiny.deployments.upstream]
batching = "inflight"
decoupled = true
repository = "{repository}"
{fill}
"""


def ref_of(tmp_path: Path, backend: str = "reference", fill: str = "", repository: Path = MODELS):
    lock = tmp_path / "engines.lock"
    lock.write_text(LOCK.format(backend=backend, zeros="0" * 64, repository=repository, fill=fill))
    return load_lock(lock).deployments()["tiny:upstream"]


def test_placeholders_are_filled_byte_for_byte_as_fill_template_py_fills_them(tmp_path):
    values = placeholder_values(ref_of(tmp_path), "/engines/tiny", "/engines/tiny")
    pairs = ",".join(f"{k}:{v}" for k, v in values.items())
    for config in sorted(MODELS.glob("*/config.pbtxt")):
        theirs = tmp_path / f"{config.parent.name}.pbtxt"
        theirs.write_text(config.read_text())
        subprocess.run([sys.executable, str(UPSTREAM / "tools" / "fill_template.py"), "-i", str(theirs), pairs], check=True)
        assert fill_like_upstream(config.read_text(), values).encode() == theirs.read_bytes(), config.parent.name


def render(tmp_path: Path, backend: str, fill: str = "") -> Path:
    ref = ref_of(tmp_path, backend, fill)
    built = BuiltEngine("tiny", tmp_path / "engine", {"digest": "0" * 64}, True, 0.0)
    return backend_of(backend).render(ref, built, tmp_path / "repo", "2.51.0", None)


def config(repo: Path, model: str) -> model_config_pb2.ModelConfig:
    return text_format.Parse((repo / model / "config.pbtxt").read_text(), model_config_pb2.ModelConfig())


def test_without_a_gpu_engine_only_the_tensorrtllm_model_is_served_by_the_stand_in(tmp_path):
    repo = render(tmp_path, "reference")
    trt = config(repo, "tensorrt_llm")
    assert trt.backend == "python" and trt.model_transaction_policy.decoupled
    assert trt.parameters["gpt_model_path"].string_value == str(tmp_path / "engine")
    assert trt.parameters["gpt_model_type"].string_value == "inflight_fused_batching"
    values = placeholder_values(ref_of(tmp_path), str(tmp_path / "engine"), str(tmp_path / "engine"))
    upstream = text_format.Parse(
        fill_like_upstream((MODELS / "tensorrt_llm" / "config.pbtxt").read_text(), values), model_config_pb2.ModelConfig()
    )
    upstream.backend = "python"
    upstream.parameters[STAND_IN_PARAMETER].string_value = stand_in_version()  # how a server tells the stand-in
    upstream.parameters[FAMILY_PARAMETER].string_value = "trtllm-0.14"  # Triton 2.51's: answers as v0.14.0 does
    assert trt == upstream  # the rest of its config is kept
    assert (repo / "tensorrt_llm" / "1" / "model.py").read_text().startswith('"""Reference `tensorrt_llm` model')
    assert (repo / "tensorrt_llm" / "1" / "tensor_contract.py").is_file()
    for model in ("preprocessing", "postprocessing", "tensorrt_llm_bls"):  # the user's own code, unchanged
        assert (repo / model / "1" / "model.py").read_bytes() == (MODELS / model / "1" / "model.py").read_bytes()
        assert config(repo, model).backend == "python"
    assert (repo / "tensorrt_llm_bls" / "1" / "lib" / "decode.py").is_file()
    assert config(repo, "ensemble").platform == "ensemble"


def test_a_gpu_engine_serves_the_users_repository_as_filled(tmp_path):
    repo = render(tmp_path, "tensorrtllm")
    assert config(repo, "tensorrt_llm").backend == "tensorrtllm"
    assert (repo / "tensorrt_llm" / "1" / "model.py").read_bytes() == (MODELS / "tensorrt_llm" / "1" / "model.py").read_bytes()


def test_the_deployments_fill_table_wins_and_an_unfilled_placeholder_that_breaks_a_config_is_named(tmp_path):
    repo = render(tmp_path, "reference", '[engines.tiny.deployments.upstream.fill]\nbls_instance_count = "3"')
    assert config(repo, "tensorrt_llm_bls").instance_group[0].count == 3
    custom = tmp_path / "custom"
    (custom / "echo").mkdir(parents=True)
    (custom / "echo" / "config.pbtxt").write_text('name: "echo"\nbackend: "python"\nmax_batch_size: ${my_batch}\n')
    ref = ref_of(tmp_path, repository=custom)
    built = BuiltEngine("tiny", tmp_path / "engine", {"digest": "0" * 64}, True, 0.0)
    with pytest.raises(
        TemplateError,
        match=r"echo/config.pbtxt: .*unfilled: my_batch \(give them in "
        r"\[engines.tiny.deployments.upstream.fill\]\)",
    ):
        backend_of("reference").render(ref, built, tmp_path / "repo2", "2.51.0", None)
