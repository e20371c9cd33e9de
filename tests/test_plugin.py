"""The plugin as users meet it on the command line (pytester, no server started)."""

import subprocess
import sys
from pathlib import Path

import pytest

from pytest_triton_llm.plugin.hooks import MARKERS


def test_options_are_in_a_triton_llm_group(pytester):
    result = pytester.runpytest("--help")
    result.stdout.fnmatch_lines(["*Triton + TensorRT-LLM suites (pytest-triton-llm)*"])
    for option in (
        "--triton-image=TAG",
        "--triton-url=URL",
        "--engines-lock=PATH",
        "--engines-cache=DIR",
        "--engines-rebuild",
        "--deployment=NAME",
        "--triton-llm-report=PATH",
        "--accuracy-dataset=PATH",
        "--accuracy-save=PATH",
        "--accuracy-baseline=PATH",
    ):
        result.stdout.fnmatch_lines([f"*{option}*"])


def test_markers_are_registered(pytester):
    result = pytester.runpytest("--markers")
    for marker in (
        "functional",
        "streaming",
        "early_stop",
        "batching",
        "lora",
        "accuracy",
        "perf",
        "robustness",
        "gpu",
        "container",
    ):
        assert marker in MARKERS
        result.stdout.fnmatch_lines([f"@pytest.mark.{marker}:*"])
    # registered markers pass --strict-markers
    pytester.makepyfile("import pytest\n@pytest.mark.perf\n@pytest.mark.container\ndef test_x(): pass\n")
    pytester.runpytest("--strict-markers").assert_outcomes(passed=1)


def test_a_broken_lock_is_one_clear_line_and_exit_4(project):
    text = (project.path / "engines.lock").read_text().replace("max_batch_size = 16", 'max_batch_size = "16"')
    (project.path / "broken.toml").write_text(text)
    project.makepyfile("def test_x(triton_llm): pass")
    result = project.runpytest_subprocess("--engines-lock", "broken.toml")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    errors = [line for line in result.stderr.lines if line.strip()]
    assert errors == ["ERROR: broken.toml: engine 'smollm2-135m': field 'max_batch_size': expected integer, got string '16'"]
    assert "Traceback" not in result.stdout.str() + result.stderr.str()


@pytest.mark.parametrize(
    "args, message",
    [
        (["--triton-image", "24.9"], "*--triton-image '24.9': give YY.MM-trtllm (e.g. 24.09-trtllm*"),
        (
            ["--triton-image", "26.08-trtllm"],
            "*--triton-image 26.08-trtllm: NGC 26.08 has no confirmed tritonserver "
            "trtllm-python-py3 image (compat.toml: *newest confirmed is 26.07-trtllm*",
        ),
        (["--triton-url", "http://h:8001"], "*--triton-url http://...: give grpc:// or grpcs:// (TLS)*"),
        (["--triton-url", "grpc://me:pw@h:8001"], "*--triton-url: no credentials in the URL; send them with --triton-header*"),
        (["--triton-url", "h:8001", "--triton-header", "s3cr3t"], "*--triton-header number 1: expected 'NAME: VALUE'"),
        (["--triton-header", "A: b"], "*apply to --triton-url; give one*"),
        (["--tokenizer", "t"], "*--tokenizer applies to --triton-url or --openai-url; give one"),
        (["--openai-engine", "smollm2-135m"], "*--openai-family and --openai-engine apply to --openai-url; give one"),
        (
            ["--openai-url", "http://127.0.0.1:9/v1", "--openai-engine", "nope"],
            "--openai-engine 'nope': engines.lock has no such engine (smollm2-135m)",
        ),
        (["--triton-url", "h:8001", "--triton-image", "24.09-trtllm"], "*give no --triton-image or --triton-runtime with it*"),
        (
            ["--deployment", "nope:v1"],
            "*no deployment named 'nope:v1' (known: smollm2-135m:inflight, smollm2-135m:llmapi, smollm2-135m:v1)*",
        ),
        (["--accuracy-baseline", "o.json", "--accuracy-save", "o.json"], "*no such file (write one with --accuracy-save)*"),
        (["--accuracy-samples", "0"], "*--accuracy-samples must be > 0*"),
        (["--accuracy-alpha", "0.7"], "*--accuracy-alpha must be in (0, 0.5), e.g. 0.05; got 0.7*"),
        (["--accuracy-power", "0.3"], "*--accuracy-power must be in [[]0.5, 1), e.g. 0.8; got 0.3*"),
        (["--gpus", "all"], "*--gpus is now called --triton-gpus*"),
        (["--tritonserver", "/x"], "*--tritonserver is now called --triton-binary*"),
        (["--cnn-dataset", "d.json"], "*--cnn-dataset is now called --accuracy-dataset*"),
        (["--rebuild-engines"], "*--rebuild-engines is now called --engines-rebuild*"),
        (
            ["--perf-against", "nope:v1", "--perf-repeats", "2", "--perf-compare-fail", "output_tokens_per_s:10"],
            "*--perf-against nope:v1: *engines.lock has no such deployment; it has *",
        ),
        (
            ["--perf-against-url", "http://127.0.0.1:9/v1", "--perf-repeats", "2", "--perf-compare-fail", "throughput_rps:10"],
            "--perf-against-url measures beside the /v1 perf test: give --openai-url too",
        ),
    ],
)
def test_refused_options_say_why(project, args, message):
    result = project.runpytest_subprocess(*args)
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines([f"ERROR: {message}"])


def test_tests_are_parametrized_by_deployment(project):
    project.makepyfile("def test_x(triton_llm): pass\ndef test_plain(): pass")
    result = project.runpytest("--collect-only", "-q")
    result.stdout.fnmatch_lines(["*test_plain", "*test_x[[]smollm2-135m:v1[]]"])  # tests needing no server first
    result = project.runpytest("--collect-only", "-q", "--deployment", "smollm2-135m:v1")
    result.stdout.fnmatch_lines(["*test_x[[]smollm2-135m:v1[]]"])


def test_a_suite_without_a_lock_says_how_to_pass_one(pytester):
    pytester.makepyfile("def test_x(triton_llm): pass\ndef test_plain(): pass")
    result = pytester.runpytest()
    result.stderr.fnmatch_lines(
        ["ERROR: no engines lock at *engines.lock: run from the project root or pass --engines-lock PATH"]
    )
    assert result.ret == pytest.ExitCode.USAGE_ERROR  # a setup error stops the run before any test


def test_projects_without_the_plugins_fixtures_are_untouched(pytester):
    pytester.makepyfile("def test_plain(): pass")
    pytester.runpytest().assert_outcomes(passed=1)


REQUIRING_TESTS = """
import pytest

@pytest.mark.triton_llm_requires("streaming")
def test_stream(triton_llm): pass

@pytest.mark.triton_llm_requires("v1")
def test_static(triton_llm): pass

def test_pair(triton_llm_pair): pass
"""


def test_capabilities_and_pairs_select_deployments(project):
    project.makepyfile(REQUIRING_TESTS)
    result = project.runpytest("--collect-only", "-q")
    result.stdout.fnmatch_lines(
        [
            "*test_stream[[]smollm2-135m:inflight[]]",
            "*test_static[[]smollm2-135m:v1[]]",
            "*test_pair[[]smollm2-135m:v1-vs-inflight[]]",
        ]
    )
    assert "test_stream[smollm2-135m:v1]" not in result.stdout.str()
    assert "test_static[smollm2-135m:inflight]" not in result.stdout.str()


def test_a_capability_no_selected_deployment_has_is_an_explicit_skip(project):
    project.makepyfile(
        REQUIRING_TESTS.split('@pytest.mark.triton_llm_requires("v1")')[0] + "def test_pair(triton_llm_pair): pass\n"
    )
    result = project.runpytest("--deployment", "smollm2-135m:v1", "-rs")
    result.assert_outcomes(skipped=2)
    result.stdout.fnmatch_lines(
        [
            "*needs a deployment with streaming (selected: smollm2-135m:v1)*",
            "*needs a v1 and an inflight deployment of the same engine (selected: smollm2-135m:v1)*",
        ],
        consecutive=False,
    )


def test_a_baseline_is_never_the_file_being_saved(project):
    (project.path / "o.json").write_text('{"schema": 1, "kind": "pytest-triton-llm accuracy outputs", "deployments": {}}')
    result = project.runpytest_subprocess("--accuracy-baseline", "o.json", "--accuracy-save", "o.json")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["ERROR: --accuracy-save and --accuracy-baseline name the same file*"])


def fake_tensorrt_llm(root, version: str) -> str:
    """A tensorrt_llm distribution as pip installs it (metadata and package), for the version guard."""
    (root / f"tensorrt_llm-{version}.dist-info").mkdir(parents=True)
    (root / f"tensorrt_llm-{version}.dist-info" / "METADATA").write_text(
        f"Metadata-Version: 2.1\nName: tensorrt_llm\nVersion: {version}\n"
    )
    (root / "tensorrt_llm").mkdir()
    (root / "tensorrt_llm" / "__init__.py").write_text(f"__version__ = {version!r}\n")
    return str(root)


def test_a_mismatched_tensorrt_llm_stops_the_run_before_any_build(project, monkeypatch):
    monkeypatch.setenv("PYTHONPATH", fake_tensorrt_llm(project.path / "site", "0.13.0"))
    project.makepyfile("def test_x(triton_llm): pass")
    result = project.runpytest_subprocess("--triton-image", "24.10-trtllm", "--triton-runtime", "local")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(
        [
            "ERROR: --triton-image 24.10-trtllm ships TensorRT-LLM 0.14.0 (compat.toml), but tensorrt_llm 0.13.0 is "
            f"installed here ({project.path}/site/tensorrt_llm); run inside that image or name the image you are in"
        ]
    )
    assert not (project.path / ".cache").exists()
    # the found server's version is checked the same way (the wheel's tritonserver is Triton 2.51.0)
    result = project.runpytest_subprocess("--triton-image", "24.09-trtllm", "--triton-runtime", "local")
    result.stderr.fnmatch_lines(
        [
            "ERROR: --triton-image 24.09-trtllm ships Triton 2.50.0 (compat.toml), but the "
            "tritonserver found is Triton 2.51.0: *tritonserver (nvidia-pytriton 0.7.0)*"
        ]
    )


def test_the_header_names_the_server_binary_and_its_backends(project):
    project.makepyfile("def test_x(triton_llm): pass")
    result = project.runpytest("--collect-only")
    result.stdout.fnmatch_lines(
        [
            "triton-llm: local runtime: tritonserver */pytriton/tritonserver/bin/tritonserver (nvidia-pytriton 0.7.0; "
            "Triton 2.51.0), backends the wheel's python backend (prepared in the engine cache)",
            "triton-llm: versions as image 24.10-trtllm (Triton 2.51.0, TensorRT-LLM 0.14.0) (compat.toml)",
        ]
    )


TRTLLM_LOCK = """version = 1
[engines.llama]
backend = "tensorrtllm"
dtype = "float16"
max_batch_size = 8
max_input_len = 512
max_output_len = 64
[engines.llama.source]
hf = "org/llama"
revision = "0123456789abcdef0123456789abcdef01234567"
[engines.llama.lora]
max_rank = 8
target_modules = ["attn_q"]
[engines.llama.deployments.inflight]
batching = "inflight"
decoupled = true
"""


def test_a_test_the_image_cannot_run_is_skipped_with_the_images_reason(pytester):
    (pytester.path / "gpu.lock").write_text(TRTLLM_LOCK)
    pytester.makepyfile("import pytest\n@pytest.mark.triton_llm_requires('lora')\ndef test_x(triton_llm): pass\n")
    result = pytester.runpytest("--engines-lock", "gpu.lock", "--triton-image", "24.02-trtllm", "-rs")
    result.assert_outcomes(skipped=1)  # decided at collection: no docker, no build
    result.stdout.fnmatch_lines(
        [
            "SKIPPED*image 24.02-trtllm (Triton 2.43.0, TensorRT-LLM 0.8.0) lacks LoRA adapters cached by lora_task_id "
            "(lora_weights / lora_config sent once; from tensorrtllm_backend v0.9.0)"
        ]
    )


def test_triton_image_without_the_docker_sdk_is_one_line_and_exit_4_once_a_test_needs_a_server(project):
    (project.path / "docker").mkdir()
    (project.path / "docker" / "__init__.py").write_text("raise ImportError('no docker SDK here')\n")  # shadows the SDK
    project.makepyfile("def test_x(triton_llm): pass\ndef test_y(triton_llm): pass\ndef test_plain(): pass")
    result = project.runpytest_subprocess("--triton-image", "24.09-trtllm")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    errors = [line for line in result.stderr.lines if line.strip()]
    assert errors == [
        "ERROR: --triton-image 24.09-trtllm: the container runtime needs the docker SDK: "
        "pip install 'pytest-triton-llm[container]'"
    ]
    assert "Traceback" not in result.stdout.str() + result.stderr.str()
    # collecting needs no docker, and tests that need no server run
    project.runpytest_subprocess("--triton-image", "24.09-trtllm", "--collect-only", "-q").stdout.fnmatch_lines(
        ["*test_x[[]smollm2-135m:v1[]]*"]
    )
    project.runpytest_subprocess("--triton-image", "24.09-trtllm", "-k", "plain").assert_outcomes(passed=1)


ENTRY_TESTS = """
import pytest

def test_first(triton_llm): pass

@pytest.mark.triton_llm_entry_models
def test_text(triton_llm): pass

def test_last(triton_llm): pass
"""


def test_entry_model_tests_run_once_per_entry_model_and_each_deployment_runs_in_one_block(project):
    project.makepyfile(ENTRY_TESTS)
    result = project.runpytest("--collect-only", "-q")
    ids = [line.split("[", 1)[1].rstrip("]") for line in result.stdout.lines if "::test_" in line]
    plain = [f"smollm2-135m:{d}" for d in ("v1", "inflight", "llmapi") for _test in ("first", "last")]
    per_entry = [f"smollm2-135m:{d}-{e}" for d in ("v1", "inflight") for e in ("ensemble", "tensorrt_llm_bls")]
    assert sorted(ids) == sorted(plain + per_entry + ["smollm2-135m:llmapi-tensorrt_llm"])  # llmapi: one entry model
    deployments = [i.split("-tensorrt_llm")[0].split("-ensemble")[0] for i in ids]
    blocks = [d for n, d in enumerate(deployments) if n == 0 or deployments[n - 1] != d]
    assert sorted(blocks) == ["smollm2-135m:inflight", "smollm2-135m:llmapi", "smollm2-135m:v1"]  # one server start each


PERF_SUITES = ("suites/test_perf.py::", "suites/test_anti_caching.py::", "suites/test_speculative.py::")  # marked perf


def test_the_product_command_from_the_repository_root_selects_the_suites():
    root = Path(__file__).resolve().parents[1]
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "pytest",
            "--collect-only",
            "-q",
            "-p",
            "no:cacheprovider",
            "--triton-image",
            "24.09-trtllm",
            "-m",
            "perf",
        ],
        cwd=root,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    collected = [line for line in done.stdout.splitlines() if "::" in line]
    assert collected and all(line.startswith(PERF_SUITES) for line in collected)


def test_the_cards_command_collects_the_suites_and_marks_gpu_and_container_deployments():
    """`pytest --triton-image 24.09-trtllm -m perf` from the repository root, as the product card writes it (collect only:
    no docker needed); the GPU lock's tensorrtllm deployments carry `gpu`, the embedded default's do not."""
    root = Path(__file__).resolve().parents[1]

    def collect(*args):
        done = subprocess.run(
            [sys.executable, "-m", "pytest", "--collect-only", "-q", "-p", "no:cacheprovider", *args],
            cwd=root,
            capture_output=True,
            text=True,
            timeout=300,
        )
        return [line for line in done.stdout.splitlines() if line.startswith("suites/")]

    perf = collect("--triton-image", "24.09-trtllm", "-m", "perf")
    assert perf and all(line.startswith(PERF_SUITES) for line in perf)
    assert collect("--triton-image", "24.09-trtllm", "-m", "container and functional")  # served in containers
    gpu_lock = collect("--engines-lock", "engines.gpu.lock", "-m", "gpu and functional")
    assert gpu_lock and all("smollm2-135m-trt:" in line or "smollm2-1.7b-dummy:" in line for line in gpu_lock)
    assert any("smollm2-1.7b-dummy:" in line for line in gpu_lock)  # the dummy-weight engine is a tensorrtllm one too
    assert collect("-m", "gpu") == [] and collect("-m", "container") == []  # local, stand-in: neither


def test_a_test_marked_gpu_is_skipped_with_the_reason_where_the_servers_see_no_gpu(project):
    project.makepyfile("import pytest\n@pytest.mark.gpu\ndef test_on_cuda(): pass\ndef test_anywhere(): pass\n")
    result = project.runpytest("--triton-gpus", "none", "-rs")
    result.assert_outcomes(passed=1, skipped=1)
    result.stdout.fnmatch_lines(
        ["triton-llm: hardware: cpu, * cores", "*SKIPPED*needs an NVIDIA GPU: --triton-gpus none hides them*"]
    )


def test_a_gpu_engines_deployments_are_skipped_with_the_reason_where_no_gpu_serves(project):
    """A tensorrtllm deployment on a host whose servers see no GPU (--triton-gpus none hides any) is skipped saying so,
    never built and errored; stand-in deployments of the same run are not."""
    lock = Path(__file__).resolve().parents[1] / "engines.gpu.lock"
    project.makepyfile("def test_served(triton_llm):\n    pass\n")
    result = project.runpytest("--engines-lock", str(lock), "--triton-gpus", "none", "-rs", "-p", "no:cacheprovider")
    outcomes = result.parseoutcomes()
    assert outcomes.get("skipped", 0) >= 2 and "passed" not in outcomes and "error" not in outcomes, outcomes
    result.stdout.fnmatch_lines(["*SKIPPED*needs an NVIDIA GPU: --triton-gpus none hides them*"])
