"""compat.toml: its images, what a test needs of them, and tox.ini's envs kept in step."""

import configparser
from pathlib import Path

from pytest_triton_llm.stack.compat import load_compat

ROOT = Path(__file__).resolve().parents[2]


def test_known_images_carry_their_documented_versions():
    compat = load_compat()
    assert list(compat.images)[0] == "23.12"  # 23.10 and 23.11 declare UINT32 inputs (see compat.toml)
    assert (compat.entry("24.04").triton, compat.entry("24.04").tensorrt_llm) == ("2.45.0", "0.9.0")
    assert (compat.entry("24.09").triton, compat.entry("24.09").tensorrt_llm) == ("2.50.0", "0.13.0")
    assert compat.entry("24.10").triton == "2.51.0"  # the server inside the nvidia-pytriton 0.7.0 wheel
    assert compat.for_image("nvcr.io/nvidia/tritonserver:24.09-trtllm-python-py3").tag == "24.09"
    assert compat.for_image("pytest-triton-llm/cpu:2.51.0") is None
    for entry in compat.images.values():  # every feature named is defined, every flag is one we render
        assert entry.features <= set(compat.features), entry.tag
        assert entry.build in ("build.py", "trtllm-build") and entry.seq_len_flag in ("max_output_len", "max_seq_len")


def test_a_test_needing_a_feature_the_image_lacks_gets_the_reason():
    compat = load_compat()
    assert compat.lacking(compat.entry("24.09"), {"inflight", "streaming", "lora"}) is None
    reason = compat.lacking(compat.entry("24.02"), {"inflight", "lora"})
    assert reason == (
        "image 24.02-trtllm (Triton 2.43.0, TensorRT-LLM 0.8.0) lacks LoRA adapters cached by lora_task_id "
        "(lora_weights / lora_config sent once; from tensorrtllm_backend v0.9.0)"
    )
    newest = list(compat.images.values())[-1]
    assert "static (V1) batching" in compat.lacking(newest, {"v1"})


def test_tox_has_one_compat_env_per_image_and_the_matrix_env_runs_them_all():
    tox = configparser.ConfigParser(interpolation=None)
    tox.read(ROOT / "tox.ini")
    envs = sorted(s.removeprefix("testenv:compat-") for s in tox.sections() if s.startswith("testenv:compat-"))
    assert envs == sorted(load_compat().images)
    matrix = tox["testenv:compat"]["commands"]
    assert all(f"--triton-image {tag}-trtllm" in matrix for tag in envs) and "pytest-triton-llm matrix reports" in matrix


def test_releases_after_the_newest_image_say_why_no_trtllm_image_is_known_with_a_source():
    compat = load_compat()
    newest = max(compat.images, key=lambda t: tuple(map(int, t.split("."))))
    assert compat.without_trtllm, "compat.toml records no release after the newest trtllm image"
    for tag, release in compat.without_trtllm.items():
        assert tuple(map(int, tag.split("."))) > tuple(map(int, newest.split("."))), tag
        assert release["finding"] and release["sources"] and all(s.startswith("https://") for s in release["sources"])
    why = compat.no_trtllm_image("26.08")
    assert why.startswith("NGC 26.08 has no confirmed tritonserver trtllm-python-py3 image")
    assert f"The newest confirmed is {newest}-trtllm" in why and "nvcr.io/nvidia/tritonserver:26.08-trtllm-python-py3" in why
    assert compat.no_trtllm_image(newest) is None
