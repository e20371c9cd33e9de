"""pytest inside the serving image (images/pytest-in-image.sh), as nightly GPU CI jobs run it inside NGC
images: the image's /opt/tritonserver/bin/tritonserver serves, the version guard checks it, no docker inside.

Uses the locally built CPU image; skipped, saying why, where no docker daemon answers."""

import os
import subprocess
from pathlib import Path

import pytest

from ..conftest import run_child

pytestmark = pytest.mark.container
ROOT = Path(__file__).resolve().parents[2]


def in_image(image: str, *args: str, docker_args: str = "") -> subprocess.CompletedProcess:
    env = {**os.environ, "DOCKER_RUN_ARGS": docker_args}
    return run_child(["bash", str(ROOT / "images" / "pytest-in-image.sh"), image, *args], timeout=900, env=env)


def test_a_suite_test_is_served_by_the_images_own_tritonserver(cpu_image):
    done = in_image(
        cpu_image,
        "suites/test_functional.py",
        "-k",
        "greedy_output_is_deterministic and ensemble",
        "--deployment",
        "smollm2-135m:v1",
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-2000:]
    assert (
        "triton-llm: local runtime: tritonserver /opt/tritonserver/bin/tritonserver (the serving image's; "
        "Triton 2.51.0), backends /opt/tritonserver/backends" in done.stdout
    )
    assert "starting /opt/tritonserver/bin/tritonserver (the serving image's)" in done.stdout + done.stderr
    assert "server: /opt/tritonserver/bin/tritonserver (the serving image's), Triton 2.51.0 = image 24.10-trtllm" in done.stdout
    assert "1 passed" in done.stdout


def test_naming_another_image_stops_before_any_build_with_both_versions(cpu_image):
    done = in_image(
        cpu_image, "suites", "-m", "functional and not properties", "--triton-image", "24.09-trtllm", "--triton-runtime", "local"
    )
    assert done.returncode == 4
    assert done.stderr.strip() == (
        "ERROR: --triton-image 24.09-trtllm ships Triton 2.50.0 (compat.toml), but the tritonserver found is Triton "
        "2.51.0: /opt/tritonserver/bin/tritonserver (the serving image's); run inside that image or name the image "
        "you are in"
    )


def test_a_server_of_undeclared_version_is_asked_for_it_once_started(cpu_image):
    # without TRITON_SERVER_VERSION the templates wait for the server's own answer on /v2
    done = in_image(
        cpu_image,
        "suites/test_functional.py",
        "-k",
        "greedy_output_is_deterministic and ensemble",
        "--deployment",
        "smollm2-135m:v1",
        docker_args="--env TRITON_SERVER_VERSION=",
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-2000:]
    assert "(the serving image's; version read once started)" in done.stdout
    assert "/opt/tritonserver/bin/tritonserver: Triton 2.51.0" in done.stdout + done.stderr
