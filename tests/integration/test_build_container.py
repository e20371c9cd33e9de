"""The tensorrtllm build container through real docker, on the local CPU image: mounts, exec with streamed
output, the token by environment only, and removal. (TensorRT-LLM itself is not in that image: a script
stands in for convert_checkpoint.py; GPUs are left out because this docker has none.)"""

import dataclasses
import subprocess

import docker
import pytest

from pytest_triton_llm.stack.compat import load_compat
from pytest_triton_llm.stack.engines.tensorrtllm.executors import ContainerExecutor

pytestmark = pytest.mark.container


class CpuBuildExecutor(ContainerExecutor):
    def spec(self, *args):
        return dataclasses.replace(super().spec(*args), gpus=None, ulimits=(("stack", 67108864, 67108864),))


def test_commands_run_in_the_build_container_which_is_removed_after(cpu_image, tmp_path, monkeypatch):
    monkeypatch.setenv("HF_TOKEN", "hf_planted_build_secret")
    examples, checkpoint, out, work = (tmp_path / name for name in ("examples", "checkpoint", "out", "work"))
    for directory in (examples / "llama", checkpoint, out, work):
        directory.mkdir(parents=True)
    (checkpoint / "config.json").write_text("{}")
    (examples / "llama" / "convert_checkpoint.py").write_text(
        "import os, sys; print('args', *sys.argv[1:3]); print('token set:', bool(os.environ.get('HF_TOKEN')))\n"
        "open('/work/rank0.safetensors', 'w').write('converted')\n"
    )
    labels = {"io.github.pytest-triton-llm": "build", "io.github.pytest-triton-llm.owner": "test"}
    executor = CpuBuildExecutor(docker.from_env(), cpu_image, "sha256:x", load_compat().entry("24.09"), None, examples, labels)
    lines = []
    with executor.session(checkpoint, out, work) as (paths, run, where):
        assert where.startswith("docker run --detach --name triton-llm-build-") and "--env=HF_TOKEN" in where
        assert "hf_planted_build_secret" not in where
        assert paths.examples == "/trtllm-examples" and paths.checkpoint == "/checkpoint"
        convert = [paths.python, f"{paths.examples}/llama/convert_checkpoint.py", "--model_dir", paths.checkpoint]
        assert run(convert, lines.append) == 0
        assert run(["touch", "/checkpoint/written"], lines.append) != 0  # read-only
        assert run(["sh", "-c", "echo built > /engine/rank0.engine"], lines.append) == 0
        name = where.split("--name ")[1].split()[0]
    assert lines[:2] == ["args --model_dir /checkpoint", "token set: True"]
    assert (work / "rank0.safetensors").read_text() == "converted" and (out / "rank0.engine").read_text() == "built\n"
    assert not (checkpoint / "written").exists()
    gone = subprocess.run(["docker", "ps", "-a", "-q", "--filter", f"name={name}"], capture_output=True, text=True)
    assert gone.stdout.strip() == "", f"build container {name} was left behind"
