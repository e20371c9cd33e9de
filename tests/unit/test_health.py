"""The health verdict after an engine died, and how the engine's processes are found among a server's descendants (a
real process tree: a stand-in "server" whose children are named as Triton's python backend stubs are)."""

import subprocess
import sys
import time

from pytest_triton_llm.host.engine_processes import STUB, engine_processes
from pytest_triton_llm.verdicts.health import ANSWER, ERROR, HANG, Probe
from pytest_triton_llm.verdicts.health import problems, readiness_matters, summary

BEFORE = {"ensemble unary": "Paris.", "tensorrt_llm_bls unary": "Paris."}


def test_errors_on_every_path_while_ready_pass():
    probes = [Probe("ensemble unary", ERROR, 1.0, "Stub process is not healthy"), Probe("tensorrt_llm_bls unary", ERROR, 2.0, "")]
    assert problems(None, probes, BEFORE) == []
    assert summary(None, probes) == "ready while polled; ensemble unary: error in 1 s; tensorrt_llm_bls unary: error in 2 s"


def test_a_hang_fails_while_ready_and_passes_once_readiness_went_false():
    probes = [Probe("ensemble unary", ERROR, 1.0, "x"), Probe("tensorrt_llm_bls unary", HANG, 20.0, "no final response")]
    [problem] = problems(None, probes, BEFORE)
    assert problem.startswith("tensorrt_llm_bls unary: no answer and no error within 20 s while")
    assert problems(0.4, probes, BEFORE) == []


def test_readiness_is_polled_on_only_while_a_path_hangs():
    # its polling ends with the probes otherwise: only a hang's verdict depends on it
    errors = [Probe("ensemble unary", ERROR, 1.0, "x"), Probe("ensemble streamed", ANSWER, 0.3, "Paris.")]
    assert not readiness_matters(errors)
    assert readiness_matters([*errors, Probe("tensorrt_llm_bls unary", HANG, 20.0, "")])
    for told in (None, 0.4):  # whatever readiness said, the verdict on errors and answers is the same
        assert problems(told, errors, {**BEFORE, "ensemble streamed": "Paris."}) == []


def test_an_answer_after_death_must_be_the_answer_given_before_whatever_readiness_says():
    recovered = [Probe("ensemble unary", ANSWER, 3.0, "Paris.")]
    assert problems(None, recovered, BEFORE) == []
    for told in (None, 0.2):
        [problem] = problems(told, [Probe("ensemble unary", ANSWER, 0.1, "")], BEFORE)
        assert "answered '' after its engine died (before: 'Paris.')" in problem


def _tree(tmp_path, *children: tuple[str, str]) -> subprocess.Popen:
    """A process standing in for tritonserver whose children run as `name model.py`: `name` a link to python, so that
    their argv is what Triton's stubs' is (the binary, then the model's file)."""
    argvs = []
    for name, model in children:
        binary, script = tmp_path / name, tmp_path / "repo" / model / "1" / "model.py"
        binary.unlink(missing_ok=True)
        binary.symlink_to(sys.executable)
        script.parent.mkdir(parents=True, exist_ok=True)
        script.write_text("import time\ntime.sleep(60)\n")
        argvs.append([str(binary), str(script)])
    code = "import subprocess, sys, time\nfor argv in sys.argv[1:]: subprocess.Popen(argv.split())\ntime.sleep(60)"
    server = subprocess.Popen([sys.executable, "-c", code, *(" ".join(a) for a in argvs)])
    time.sleep(1.0)
    return server


def _stop(server: subprocess.Popen) -> None:
    subprocess.run(["pkill", "-P", str(server.pid)], check=False)
    server.kill()
    server.wait()


def test_the_core_models_stub_is_found_and_no_other(tmp_path):
    server = _tree(tmp_path, (STUB, "tensorrt_llm"), (STUB, "preprocessing"))
    try:
        [found] = engine_processes(server.pid, "tensorrt_llm")
        assert found.role == "tensorrt_llm's python backend stub"
        assert "/repo/tensorrt_llm/1/model.py" in open(f"/proc/{found.pid}/cmdline").read()
        assert engine_processes(server.pid, "tensorrt_llm_bls") == []  # as for the C++ backend in leader mode
    finally:
        _stop(server)


def test_orchestrator_workers_come_first(tmp_path):
    server = _tree(tmp_path, ("trtllmExecutorWorker", "worker"), (STUB, "tensorrt_llm"))
    try:
        found = engine_processes(server.pid, "tensorrt_llm")
        assert [p.role for p in found] == ["TensorRT-LLM orchestrator worker trtllmExecutorWorker"]
    finally:
        _stop(server)
