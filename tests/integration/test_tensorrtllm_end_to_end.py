"""A tensorrtllm deployment end to end, as far as this host goes: a Hugging Face checkpoint with its tokenizer,
built by the stand-in TensorRT-LLM 0.14.0 (tests/stand_ins/tensorrt_llm: convert_checkpoint.py -> trtllm-build ->
engine directory) through the product's local build, rendered from the 24.10 templates for Triton's tensorrtllm
backend with upstream's own preprocessing, postprocessing and BLS of tensorrtllm_backend v0.14.0 (--trtllm-models:
../shared/upstream, checked file by file against stack/repository/upstream_models.toml), served on the embedded Triton 2.51
with only its tensorrt_llm model swapped for the reference stand-in (--trtllm-stand-in), and the functional suite
passing through it. What is not proved here: real TensorRT-LLM kernels and the C++ backend."""

import json
import os
import shutil
import sys
from pathlib import Path

import pytest

from pytest_triton_llm.stack.cache import EngineCache, file_sha256
from pytest_triton_llm.stack.engines import backend_of
from pytest_triton_llm.stack.lock import load_lock
from pytest_triton_llm.plugin.options import DEFAULT_CACHE
from pytest_triton_llm.common.progress import Progress

from ..conftest import run_child
from ..third_party import UPSTREAM, needs_upstream

ROOT = Path(__file__).resolve().parents[2]
STAND_IN = ROOT / "tests" / "stand_ins" / "tensorrt_llm"
UPSTREAM_CODE = "upstream triton-inference-server/tensorrtllm_backend v0.14.0 (9958c21167e1)"
# upstream's v0.14.0 BLS (lib/decode.py: a numpy array as a dataclass default) loads on its image's Python 3.10 only;
# the stub runs this interpreter's Python, so on 3.11 the deployment serves the ensemble without it
BLS_LOADS = sys.version_info < (3, 11)
MODELS_SERVED = "" if BLS_LOADS else 'models = ["preprocessing", "tensorrt_llm", "postprocessing", "ensemble"]'
PYTHON_MODELS = ("preprocessing", "postprocessing", "tensorrt_llm_bls") if BLS_LOADS else ("preprocessing", "postprocessing")
pytestmark = [pytest.mark.integration, pytest.mark.timeout(1800), needs_upstream]


def hf_checkpoint(tmp_path: Path) -> Path:
    """The embedded default's model as a Hugging Face checkpoint: its reference engine (cached) without engine.json."""
    lock = load_lock(ROOT / "engines.lock")
    built = backend_of("reference").build(
        EngineCache(DEFAULT_CACHE, Progress()), "smollm2-135m", lock.engines["smollm2-135m"], False, lambda: None
    )
    checkpoint = tmp_path / "SmolLM2-135M-Instruct"
    checkpoint.mkdir()
    for path in built.path.iterdir():
        if path.is_file() and path.name not in ("engine.json", "manifest.json"):
            try:
                os.link(path, checkpoint / path.name)  # the same files, only read: no 0.5 GB copy
            except OSError:  # another filesystem
                shutil.copy2(path, checkpoint / path.name)
    return checkpoint


def tensorrtllm_lock(tmp_path: Path, checkpoint: Path, checkpoint_there: Path | None = None) -> Path:
    """The lock of one tensorrtllm engine built from `checkpoint` (named as `checkpoint_there` where the run that reads
    the lock sees it elsewhere, e.g. inside a container)."""
    lock = tmp_path / "tensorrtllm.lock"
    lock.write_text(f"""version = 1

[engines.smollm2-trtllm]
backend = "tensorrtllm"
dtype = "float32"
max_batch_size = 8
max_input_len = 1024
max_output_len = 256

[engines.smollm2-trtllm.source]
path = "{checkpoint_there or checkpoint}"
file = "model.safetensors"
sha256 = "{file_sha256(checkpoint / "model.safetensors")}"

[engines.smollm2-trtllm.deployments.inflight]
batching = "inflight"
decoupled = true
exclude_input_in_output = true
{MODELS_SERVED}
""")
    return lock


def test_a_tensorrtllm_engine_built_by_the_stand_in_scripts_passes_the_functional_suite_end_to_end(tmp_path):
    checkpoint = hf_checkpoint(tmp_path)
    lock, cache, report = tensorrtllm_lock(tmp_path, checkpoint), tmp_path / "cache", tmp_path / "report.json"
    env = {
        **os.environ,
        "PATH": f"{STAND_IN / 'bin'}{os.pathsep}{os.environ['PATH']}",
        "PYTHONPATH": os.pathsep.join(filter(None, [str(STAND_IN / "site"), os.environ.get("PYTHONPATH")])),
    }
    argv = [
        sys.executable,
        "-m",
        "pytest",
        "suites",
        "-m",
        "functional and not properties",
        "-p",
        "no:cacheprovider",
        "--engines-lock",
        str(lock),
        "--engines-cache",
        str(cache),
        "--trtllm-examples",
        str(STAND_IN / "examples"),
        "--trtllm-stand-in",
        "--trtllm-models",
        str(UPSTREAM),
        "--triton-image",
        "24.10-trtllm",
        "--triton-runtime",
        "local",
        "--triton-llm-report",
        str(report),
        f"--basetemp={tmp_path / 'basetemp'}",
        "-q",
        "-rfEs",
    ]
    done = run_child(argv, cwd=ROOT, env=env, timeout=1700)
    tail = done.stdout[-4000:] + done.stderr[-2000:]
    assert done.returncode == 0, tail
    summary = done.stdout.strip().splitlines()[-1]
    assert " failed" not in summary and int(summary.split(" passed")[0].split()[-1]) >= 15, summary

    [engine] = (cache / "engines").glob("smollm2-trtllm-*")
    manifest = json.loads((engine / "manifest.json").read_text())
    assert manifest["builder"]["backend"] == "tensorrtllm" and manifest["tensorrt_llm"] == "0.14.0"
    assert [c.split()[1].rsplit("/", 1)[-1] if c.startswith(sys.executable) else c.split()[0] for c in manifest["commands"]] == [
        "convert_checkpoint.py",
        "trtllm-build",
    ]
    # the tokenizer travelled into the engine and is part of its digest
    assert manifest["tokenizer"] == "tokenizer" and "tokenizer/tokenizer_config.json" in manifest["files"]
    assert "[TRT-LLM stand-in] engine written to" in (engine / "build.log").read_text()

    record = json.loads(report.read_text())["deployments"]["smollm2-trtllm:inflight"]
    assert record["backend"] == "tensorrtllm" and record["tensorrt_llm_model"].startswith("reference stand-in")
    # upstream's own python models of the image's version served the text around the engine, never the stand-in's
    code = record["model_code"]
    assert code["tensorrt_llm"] == "project stand-in"
    for model in PYTHON_MODELS:
        assert code[model] == f"{UPSTREAM_CODE}, from --trtllm-models {UPSTREAM}", code
    assert (
        "pytest_triton_llm_stand_in"
        not in Path(record["server_log"]).parent.joinpath("model_repository", "preprocessing", "config.pbtxt").read_text()
    )
    rendered = json.loads(Path(record["server_log"]).parent.joinpath("model_repository.rendered.json").read_text())
    assert rendered["values"]["tokenizer_dir"] == str(engine / "tokenizer")
    assert rendered["values"]["triton_backend"] == "tensorrtllm"  # rendered for the C++ backend, then swapped


@pytest.mark.container
def test_in_the_local_cpu_image_the_same_deployment_serves_upstreams_python_models_of_the_tag(cpu_image):
    """The same deployment inside the local CPU image (images/pytest-in-image.sh, as a nightly job runs in an NGC
    image): the image's /opt/tritonserver serves the 24.10 family's repository, upstream's v0.14.0 python models
    serve the text around the stand-in engine, the report names their tag and commit, and the functional suite passes."""
    work = ROOT / "out" / "e2e-in-image"  # the checkout's out/ is the container's /src/out (read-write)
    shutil.rmtree(work, ignore_errors=True)
    work.mkdir(parents=True)
    inside = Path("/src/out/e2e-in-image")
    checkpoint = hf_checkpoint(work)
    tensorrtllm_lock(work, checkpoint, inside / checkpoint.name)
    stand_in = "/src/tests/stand_ins/tensorrt_llm"
    docker_args = (
        f"--volume {UPSTREAM}:/upstream:ro --env PYTHONPATH=/src:{stand_in}/site --env "
        f"PATH={stand_in}/bin:/opt/venv/bin:/opt/tritonserver/bin:/usr/local/bin:/usr/bin:/bin"
    )
    argv = [
        "bash",
        str(ROOT / "images" / "pytest-in-image.sh"),
        cpu_image,
        "suites",
        "-m",
        "functional and not properties",
        "--engines-lock",
        str(inside / "tensorrtllm.lock"),
        "--trtllm-examples",
        f"{stand_in}/examples",
        "--trtllm-stand-in",
        "--trtllm-models",
        "/upstream",
        "--triton-image",
        "24.10-trtllm",
        "--triton-runtime",
        "local",
        "--triton-llm-report",
        str(inside / "report.json"),
        "-q",
        "-rfEs",
    ]
    done = run_child(argv, cwd=ROOT, env={**os.environ, "DOCKER_RUN_ARGS": docker_args}, timeout=1700)
    assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-2000:]
    summary = done.stdout.strip().splitlines()[-1]
    assert " failed" not in summary and int(summary.split(" passed")[0].split()[-1]) >= 15, summary
    assert "starting /opt/tritonserver/bin/tritonserver (the serving image's)" in done.stdout + done.stderr
    record = json.loads((work / "report.json").read_text())["deployments"]["smollm2-trtllm:inflight"]
    assert record["backend"] == "tensorrtllm" and record["tensorrt_llm_model"].startswith("reference stand-in")
    code = record["model_code"]
    assert code["tensorrt_llm"] == "project stand-in"
    for model in PYTHON_MODELS:
        assert code[model] == f"{UPSTREAM_CODE}, from --trtllm-models /upstream", code
