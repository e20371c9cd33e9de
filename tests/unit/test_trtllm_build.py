"""tensorrtllm engine builds: the build container as docker runs it, the local commands inside a serving
image, and the builder's cache identity, progress and failures (TensorRT-LLM itself faked by scripts)."""

import dataclasses
import hashlib
import os
import sys
from pathlib import Path

import pytest

from pytest_triton_llm.stack.cache import EngineCache
from pytest_triton_llm.stack.compat import load_compat
from pytest_triton_llm.stack.engines import BuildSite
from pytest_triton_llm.stack.engines.tensorrtllm import TensorrtllmBackend
from pytest_triton_llm.stack.engines.tensorrtllm.executors import (
    ContainerExecutor,
    ExecutorError,
    LocalExecutor,
    find_local_examples,
)
from pytest_triton_llm.stack.engines.base import BuildError
from pytest_triton_llm.stack.engines.tensorrtllm.commands import build_commands
from pytest_triton_llm.stack.lock import Engine, Source
from pytest_triton_llm.common.progress import Progress

NEWEST = list(load_compat().images)[-1]
OWNER = {"io.github.pytest-triton-llm": "build", "io.github.pytest-triton-llm.owner": "host:1:2"}


def container_executor(tag, examples=None, gpus=None):
    image = f"nvcr.io/nvidia/tritonserver:{tag}-trtllm-python-py3"
    return ContainerExecutor(None, image, "sha256:abc", load_compat().entry(tag), gpus, examples, OWNER)


@pytest.mark.parametrize("tag", ["24.04", "24.09", NEWEST])
def test_the_build_container_mounts_the_checkpoint_read_only_and_names_the_token_only(tag, monkeypatch):
    pytest.importorskip("docker", reason="the container extra (docker SDK) is not installed")
    monkeypatch.setenv("HF_TOKEN", "hf_planted_secret")
    spec = container_executor(tag).spec(Path("/ckpt"), Path("/cache/engines/.build-1"), Path("/cache/engines/.w"), "b1")
    assert spec.docker_run_argv() == [
        "docker",
        "run",
        "--detach",
        "--name",
        "b1",
        "--shm-size=2g",
        "--ulimit=memlock=-1:-1",
        "--ulimit=stack=67108864:67108864",
        "--gpus",
        "all",
        "--volume=/ckpt:/checkpoint:ro",
        "--volume=/cache/engines/.w:/work:rw",
        "--volume=/cache/engines/.build-1:/engine:rw",
        "--env=HF_TOKEN",
        "--label=io.github.pytest-triton-llm=build",
        "--label=io.github.pytest-triton-llm.owner=host:1:2",
        f"nvcr.io/nvidia/tritonserver:{tag}-trtllm-python-py3",
        "sleep",
        "infinity",
    ]
    assert spec.sdk_kwargs()["environment"] == {"HF_TOKEN": "hf_planted_secret"}  # the value goes by the API only


def test_the_build_container_takes_chosen_gpus_and_a_mounted_examples_checkout():
    executor = container_executor("24.04", examples=Path("/src/TensorRT-LLM/examples"), gpus="1,2")
    argv = executor.spec(Path("/c"), Path("/o"), Path("/w"), "b").docker_run_argv()
    assert argv[argv.index("--gpus") + 1] == '"device=1,2"' and executor.gpu == "1"
    assert "--volume=/src/TensorRT-LLM/examples:/trtllm-examples:ro" in argv
    assert executor.identity == {"executor": "container", "image_digest": "sha256:abc", "tensorrt_llm": "0.9.0"}


def local_commands(tag, tmp_path):
    entry = load_compat().entry(tag)
    executor = LocalExecutor(entry, entry.tensorrt_llm, tmp_path / "examples")
    engine = Engine(
        backend="tensorrtllm",
        source=Source(path="/models/llama", file="m.safetensors", sha256="0" * 64),
        dtype="float16",
        max_batch_size=8,
        max_input_len=2048,
        max_output_len=512,
    )
    with executor.session(Path("/models/llama"), tmp_path / "out", tmp_path / "work") as (paths, _, where):
        assert where == f"local subprocesses of {sys.executable} (tensorrt_llm {entry.tensorrt_llm})"
        return build_commands(engine, entry, paths)


def test_tensorrt_llm_0_7_builds_locally_with_build_py_into_the_engine_directory(tmp_path):
    assert local_commands("24.01", tmp_path) == [
        [
            sys.executable,
            f"{tmp_path}/examples/llama/build.py",
            "--model_dir",
            "/models/llama",
            "--dtype",
            "float16",
            "--use_gpt_attention_plugin",
            "float16",
            "--use_gemm_plugin",
            "float16",
            "--remove_input_padding",
            "--paged_kv_cache",
            "--enable_context_fmha",
            "--use_inflight_batching",
            "--max_batch_size",
            "8",
            "--max_input_len",
            "2048",
            "--max_output_len",
            "512",
            "--world_size",
            "1",
            "--tp_size",
            "1",
            "--pp_size",
            "1",
            "--output_dir",
            f"{tmp_path}/out",
        ]
    ]


@pytest.mark.parametrize(("tag", "llama"), [("24.09", "llama"), (NEWEST, "models/core/llama")])
def test_tensorrt_llm_0_13_and_the_newest_convert_then_trtllm_build_locally(tag, llama, tmp_path):
    assert local_commands(tag, tmp_path) == [
        [
            sys.executable,
            f"{tmp_path}/examples/{llama}/convert_checkpoint.py",
            "--model_dir",
            "/models/llama",
            "--output_dir",
            f"{tmp_path}/work",
            "--dtype",
            "float16",
            "--tp_size",
            "1",
            "--pp_size",
            "1",
        ],
        [
            "trtllm-build",
            "--checkpoint_dir",
            f"{tmp_path}/work",
            "--output_dir",
            f"{tmp_path}/out",
            "--max_batch_size",
            "8",
            "--max_input_len",
            "2048",
            "--max_seq_len",
            "2560",
            "--gpt_attention_plugin",
            "float16",
            "--gemm_plugin",
            "float16",
            "--remove_input_padding",
            "enable",
            "--context_fmha",
            "enable",
            "--kv_cache_type",
            "paged",
        ],
    ]


def test_examples_are_found_where_given_or_named_in_the_error(tmp_path):
    entry = load_compat().entry("24.09")
    assert find_local_examples(entry, str(tmp_path), "/site/tensorrt_llm") == tmp_path
    with pytest.raises(ExecutorError, match="--trtllm-examples /nope: no such directory"):
        find_local_examples(entry, "/nope", "/site/tensorrt_llm")


# --- the builder, with TensorRT-LLM's scripts faked: each records its argv; trtllm-build writes an engine


def fake_toolchain(tmp_path: Path, fail: str | None = None) -> Path:
    examples = tmp_path / "examples"
    (examples / "llama").mkdir(parents=True)
    script = "import sys; print('converting', flush=True); sys.exit({code})"
    (examples / "llama" / "convert_checkpoint.py").write_text(script.format(code=3 if fail == "convert" else 0))
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    build = bin_dir / "trtllm-build"
    build.write_text(
        "#!/bin/sh\nout=''\nwhile [ $# -gt 0 ]; do [ \"$1\" = --output_dir ] && out=$2; shift; done\n"
        'echo "[TRT-LLM] building into $out"\necho engine > "$out/rank0.engine"\necho \'{}\' > "$out/config.json"\n'
    )
    build.chmod(0o755)
    return examples


def build_local(cache, engine, entry, tensorrt_llm: str, examples):
    """The tensorrtllm backend's build as a local runtime offers it, with `tensorrt_llm` "installed" (a fake dist)."""
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(
            "pytest_triton_llm.stack.engines.tensorrtllm.executors.installed_tensorrt_llm",
            lambda: (tensorrt_llm, str(examples.parent / "tensorrt_llm")),
        )
        site = BuildSite(entry=entry, examples=str(examples))
        return TensorrtllmBackend().build(cache, "llama", engine, False, lambda: site)


@pytest.fixture
def toolchain(tmp_path, monkeypatch):
    examples = fake_toolchain(tmp_path)
    monkeypatch.setenv("PATH", f"{tmp_path / 'bin'}{os.pathsep}{os.environ['PATH']}")
    monkeypatch.setattr("pytest_triton_llm.stack.engines.tensorrtllm.builder.compute_capability", lambda gpu: "9.0")
    checkpoint = tmp_path / "checkpoint"
    checkpoint.mkdir()
    (checkpoint / "model.safetensors").write_bytes(b"weights")
    (checkpoint / "tokenizer_config.json").write_text('{"tokenizer_class": "GPT2Tokenizer"}')
    (checkpoint / "config.json").write_text('{"model_type": "llama"}')
    source = Source(path=str(checkpoint), file="model.safetensors", sha256=hashlib.sha256(b"weights").hexdigest())
    engine = Engine(backend="tensorrtllm", source=source, dtype="float16", max_batch_size=4, max_input_len=256, max_output_len=64)
    return examples, engine


def test_a_local_build_runs_each_command_with_progress_and_keys_the_cache_by_version_and_gpu(tmp_path, toolchain, monkeypatch):
    examples, engine = toolchain
    said = []
    cache = EngineCache(tmp_path / "cache", Progress(said.append))
    entry = load_compat().entry("24.09")
    built = build_local(cache, engine, entry, "0.13.0", examples)
    assert (built.path / "rank0.engine").read_text() == "engine\n"
    assert built.manifest["builder"] == {
        "backend": "tensorrtllm",
        "builder_version": 2,
        "executor": "local",
        "tensorrt_llm": "0.13.0",
        "compute_capability": "9.0",
    }
    # the checkpoint's tokenizer travels in the engine, beside (not over) the engine's own config.json
    assert built.manifest["tokenizer"] == "tokenizer" and built.tokenizer_path == built.path / "tokenizer"
    assert sorted(p.name for p in built.tokenizer_path.iterdir()) == ["config.json", "tokenizer_config.json"]
    assert "tokenizer/tokenizer_config.json" in built.manifest["files"]  # part of the digest
    assert (built.path / "config.json").read_text() == "{}\n"
    assert [c.split()[1 if c.startswith(sys.executable) else 0] for c in built.manifest["commands"]] == [
        f"{examples}/llama/convert_checkpoint.py",
        "trtllm-build",
    ]
    log = (built.path / "build.log").read_text()
    assert log.startswith(f"# local subprocesses of {sys.executable}") and "[TRT-LLM] building into" in log
    assert any("engine llama: [1/2] convert_checkpoint.py: done in" in line for line in said)
    assert any("engine llama: [2/2] trtllm-build: done in" in line for line in said)
    again = build_local(cache, engine, entry, "0.13.0", examples)
    assert again.cached and again.path == built.path
    monkeypatch.setattr("pytest_triton_llm.stack.engines.tensorrtllm.builder.compute_capability", lambda gpu: "8.0")
    ampere = build_local(cache, engine, entry, "0.13.0", examples)
    assert not ampere.cached and ampere.path != built.path
    newer = dataclasses.replace(entry, tensorrt_llm="0.14.0")
    assert build_local(cache, engine, newer, "0.14.0", examples).path not in (
        built.path,
        ampere.path,
    )


def test_a_failing_command_names_itself_keeps_its_log_and_publishes_nothing(tmp_path, toolchain, monkeypatch):
    examples, engine = toolchain
    fake_toolchain(tmp_path / "failing", fail="convert")
    cache = EngineCache(tmp_path / "cache", Progress(lambda line: None))
    entry = load_compat().entry("24.09")
    with pytest.raises(BuildError, match=r"convert_checkpoint\.py failed \(exit 3\)(.|\n)*converting"):
        build_local(cache, engine, entry, "0.13.0", tmp_path / "failing" / "examples")
    assert not list((cache.root / "engines").iterdir())
    assert "converting" in (cache.root / "logs" / "llama-build.log").read_text()


def test_a_checkpoint_without_a_tokenizer_is_refused_before_any_command_runs(tmp_path, toolchain):
    examples, engine = toolchain
    (Path(engine.source.path) / "tokenizer_config.json").unlink()
    cache = EngineCache(tmp_path / "cache", Progress(lambda line: None))
    with pytest.raises(BuildError, match="has no tokenizer \\(none of tokenizer.json, tokenizer_config.json"):
        build_local(cache, engine, load_compat().entry("24.09"), "0.13.0", examples)
    assert not (cache.root / "logs").exists()  # nothing ran


def test_no_gpu_means_no_tensorrtllm_build(tmp_path, toolchain, monkeypatch):
    examples, engine = toolchain
    monkeypatch.setattr("pytest_triton_llm.stack.engines.tensorrtllm.builder.compute_capability", lambda gpu: None)
    cache = EngineCache(tmp_path / "cache", Progress(lambda line: None))
    entry = load_compat().entry("24.09")
    with pytest.raises(BuildError, match="nvidia-smi reports none"):
        build_local(cache, engine, entry, "0.13.0", examples)
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "7")
    with pytest.raises(BuildError, match="nvidia-smi knows no GPU '7' \\(from --triton-gpus or CUDA_VISIBLE_DEVICES\\)"):
        build_local(cache, engine, entry, "0.13.0", examples)
