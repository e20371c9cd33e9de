import os
import stat
import sys
from types import SimpleNamespace

import pytest

from pytest_triton_llm.host import hardware as hw
from pytest_triton_llm.host.hardware import describe_hardware, first_gpu, gpu_details, hardware_class, visible_gpus

# what `nvidia-smi --query-gpu=index,name,memory.total,compute_cap --format=csv,noheader,nounits` prints on a host
# of two GPUs; `--id N` narrows it to GPU N, as the real one does
FAKE_SMI = """#!/usr/bin/env python3
import sys
rows = {"0": "0, NVIDIA H200, 143771, 9.0", "1": "1, NVIDIA A100-SXM4-80GB, 81920, 8.0",
        "2": "2, NVIDIA A100 MIG 1g.10gb, [N/A], [N/A]"}
if "--id" in sys.argv:
    gpu = sys.argv[sys.argv.index("--id") + 1]
    if gpu not in rows:
        print(f"No devices were found", file=sys.stderr)
        sys.exit(6)
    print(rows[gpu])
else:
    print("\\n".join(rows.values()))
"""


@pytest.fixture
def two_gpus(tmp_path, monkeypatch):
    smi = tmp_path / "nvidia-smi"
    smi.write_text(FAKE_SMI.replace("/usr/bin/env python3", sys.executable))
    smi.chmod(smi.stat().st_mode | stat.S_IXUSR)
    monkeypatch.setenv("PATH", f"{tmp_path}{os.pathsep}{os.environ['PATH']}")
    gpu_details.cache_clear()
    yield
    gpu_details.cache_clear()


def test_gpu_details_name_memory_and_compute_capability_of_the_gpu_asked_for(two_gpus):
    assert gpu_details() == {"index": 0, "name": "NVIDIA H200", "memory_mib": 143771, "compute_capability": "9.0"}
    assert gpu_details("1")["name"] == "NVIDIA A100-SXM4-80GB"
    assert gpu_details("7") is None
    assert gpu_details("2") == {"index": 2, "name": "NVIDIA A100 MIG 1g.10gb", "memory_mib": None, "compute_capability": None}
    assert describe_hardware("2") == "NVIDIA A100 MIG 1g.10gb, memory not reported, compute capability ? (GPU 2)"
    assert hw.hardware("1") == "NVIDIA A100-SXM4-80GB"
    assert hardware_class(hw.hardware("1")) == "a100"
    assert describe_hardware("0") == "NVIDIA H200, 143771 MiB, compute capability 9.0 (GPU 0)"


def test_without_nvidia_smi_the_hardware_is_the_cpu_and_its_cores(tmp_path, monkeypatch):
    monkeypatch.setenv("PATH", str(tmp_path))  # no nvidia-smi here
    gpu_details.cache_clear()
    assert hw.hardware() == "cpu"
    assert describe_hardware(None) == f"cpu, {len(os.sched_getaffinity(0))} cores"
    assert describe_hardware("none") == describe_hardware(None)
    gpu_details.cache_clear()


@pytest.mark.parametrize(
    "gpus, inherited, expected",
    [
        (None, {}, None),  # the first GPU
        ("all", {"CUDA_VISIBLE_DEVICES": "3,1"}, "3"),
        ("2,3", {"CUDA_VISIBLE_DEVICES": "1"}, "2"),  # --triton-gpus wins over the shell's
        ("none", {"CUDA_VISIBLE_DEVICES": "1"}, "none"),
        (None, {"CUDA_VISIBLE_DEVICES": ""}, "none"),
        (None, {"CUDA_VISIBLE_DEVICES": "GPU-5e1c"}, None),  # a UUID: nvidia-smi's first stands for it
    ],
)
def test_the_gpu_a_server_computes_on_follows_triton_gpus_then_cuda_visible_devices(gpus, inherited, expected):
    assert first_gpu(gpus, inherited) == expected


def test_triton_gpus_becomes_the_local_servers_cuda_visible_devices_in_nvidia_smi_order():
    assert visible_gpus("1") == {"CUDA_VISIBLE_DEVICES": "1", "CUDA_DEVICE_ORDER": "PCI_BUS_ID"}
    assert visible_gpus("none") == {"CUDA_VISIBLE_DEVICES": ""}
    assert visible_gpus("all") == visible_gpus(None) == {}


def test_the_local_and_container_runtimes_report_the_gpu_triton_gpus_names(two_gpus, tmp_path, monkeypatch):
    from pytest_triton_llm.common.progress import Progress
    from pytest_triton_llm.stack.runtimes.container import ContainerRuntime
    from pytest_triton_llm.stack.runtimes.local import LocalRuntime

    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    found = SimpleNamespace(declared_version="2.51.0")  # the tritonserver found: not started here
    local = lambda gpus: LocalRuntime(tmp_path, Progress(lambda line: None), found, gpus=gpus)  # noqa: E731
    assert local("1").hardware == "NVIDIA A100-SXM4-80GB"
    assert local(None).hardware == "NVIDIA H200"
    assert local("none").hardware == "cpu"
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "1")
    assert local(None).hardware == "NVIDIA A100-SXM4-80GB"
    image = SimpleNamespace(reference="pytest-triton-llm/cpu:2.51.0")
    container = ContainerRuntime(image=image, gpus="1", progress=Progress(lambda line: None))
    assert (container.gpu, container.hardware) == ("1", "NVIDIA A100-SXM4-80GB")
