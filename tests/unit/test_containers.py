"""The container runtime's pinned parts: image references, the server container, mpirun per rank."""

from pathlib import Path

import pytest

from pytest_triton_llm.host.containers import ContainerSpec
from pytest_triton_llm.stack.runtimes.container import serving_spec, server_command
from pytest_triton_llm.host.images import ImageError, parse_image, short_tag
from pytest_triton_llm.stack.runtimes.server import container_environment


def test_short_tags_expand_to_the_ngc_trtllm_image_and_full_references_pass_through():
    assert parse_image("24.09-trtllm").reference == "nvcr.io/nvidia/tritonserver:24.09-trtllm-python-py3"
    assert parse_image("24.04-trtllm").tag == "24.04" and parse_image("24.04-trtllm").given == "24.04-trtllm"
    assert parse_image("pytest-triton-llm/cpu:2.51.0").reference == "pytest-triton-llm/cpu:2.51.0"
    assert parse_image("registry.example.com:5000/triton@sha256:" + "a" * 64).reference.endswith("a" * 64)
    assert short_tag("pytest-triton-llm/cpu:2.51.0") is None and parse_image("pytest-triton-llm/cpu:2.51.0").tag is None
    for bad in ("24.9-trtllm", "latest", "Triton Server"):
        with pytest.raises(ImageError, match="give YY.MM-trtllm"):
            parse_image(bad)


def spec(gpus=None, world_size=1, same_path=()) -> ContainerSpec:
    return serving_spec(
        "nvcr.io/nvidia/tritonserver:24.09-trtllm-python-py3",
        "triton-llm-7-1-m-v1",
        "/tmp/repo",
        "/cache/engines/m-abc",
        "/engines/m",
        {"OMP_NUM_THREADS": "4"},
        gpus,
        world_size,
        same_path,
    )


def test_a_gpu_server_container_runs_as_upstream_documents_on_loopback_ports(monkeypatch):
    pytest.importorskip("docker", reason="the container extra (docker SDK) is not installed")
    monkeypatch.setattr("pytest_triton_llm.host.containers.owner_label", lambda: "host:7:99")
    argv = spec(gpus="all").docker_run_argv()
    assert argv == [
        "docker",
        "run",
        "--detach",
        "--name",
        "triton-llm-7-1-m-v1",
        "--shm-size=2g",
        "--ulimit=memlock=-1:-1",
        "--ulimit=stack=67108864:67108864",
        "--gpus",
        "all",
        "--publish=127.0.0.1::8000",
        "--publish=127.0.0.1::8001",
        "--publish=127.0.0.1::8002",
        "--volume=/tmp/repo:/models:ro",
        "--volume=/cache/engines/m-abc:/engines/m:ro",
        "--env=OMP_NUM_THREADS=4",
        "--label=io.github.pytest-triton-llm=server",
        "--label=io.github.pytest-triton-llm.owner=host:7:99",
        "nvcr.io/nvidia/tritonserver:24.09-trtllm-python-py3",
        "tritonserver",
        "--model-repository=/models",
        "--disable-auto-complete-config",
        "--strict-readiness=true",
        "--exit-timeout-secs=1",
        "--http-port=8000",
        "--grpc-port=8001",
        "--metrics-port=8002",
    ]
    kwargs = spec(gpus="0,1").sdk_kwargs()
    assert kwargs["ports"] == {"8000/tcp": ("127.0.0.1", None), "8001/tcp": ("127.0.0.1", None), "8002/tcp": ("127.0.0.1", None)}
    assert kwargs["device_requests"][0]["DeviceIDs"] == ["0", "1"]
    assert kwargs["volumes"]["/tmp/repo"] == {"bind": "/models", "mode": "ro"}


def test_the_adapter_cache_is_mounted_read_only_at_its_host_path_so_lora_path_names_it_inside():
    pytest.importorskip("docker", reason="the container extra (docker SDK) is not installed")
    argv = spec(same_path=(Path("/cache/adapters"),)).docker_run_argv()
    assert "--volume=/cache/adapters:/cache/adapters:ro" in argv
    assert argv.index("--volume=/cache/adapters:/cache/adapters:ro") > argv.index("--volume=/tmp/repo:/models:ro")


def test_a_cpu_container_asks_for_no_gpu_and_no_memlock():
    pytest.importorskip("docker", reason="the container extra (docker SDK) is not installed")
    argv = spec().docker_run_argv()
    assert "--gpus" not in argv and not [a for a in argv if "memlock" in a]
    assert "device_requests" not in spec().sdk_kwargs()


def test_world_size_2_runs_one_tritonserver_per_rank_under_mpirun_as_launch_triton_server():
    assert server_command(2) == [
        "mpirun",
        "--allow-run-as-root",
        "-n",
        "1",
        "tritonserver",
        "--model-repository=/models",
        "--disable-auto-complete-config",
        "--strict-readiness=true",
        "--exit-timeout-secs=1",
        "--http-port=8000",
        "--grpc-port=8001",
        "--metrics-port=8002",
        "--backend-config=python,shm-region-prefix-name=prefix0_",
        ":",
        "-n",
        "1",
        "tritonserver",
        "--model-repository=/models",
        "--disable-auto-complete-config",
        "--strict-readiness=true",
        "--exit-timeout-secs=1",
        "--allow-http=false",
        "--allow-grpc=false",
        "--allow-metrics=false",
        "--backend-config=python,shm-region-prefix-name=prefix1_",
        "--model-control-mode=explicit",
        "--load-model=tensorrt_llm",
    ]


def test_a_server_container_gets_no_credentials_from_the_host():
    env = container_environment({"HF_TOKEN": "hf_secret", "NGC_API_KEY": "k", "PATH": "/x", "OMP_NUM_THREADS": "3"})
    assert env["OMP_NUM_THREADS"] == "3" and env["HF_HUB_OFFLINE"] == "1"
    assert "HF_TOKEN" not in env and "NGC_API_KEY" not in env and "PATH" not in env
