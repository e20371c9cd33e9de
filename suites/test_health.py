"""Health that tells the truth: after the engine of a deployment dies, the server says so.

The deployment is served again on a server of its own, its engine process is killed (the tensorrt_llm or llmapi
model's python stub, the workers that stub started, or TensorRT-LLM's orchestrator workers), and within
after_engine_death.DEADLINE_S its readiness must go false or every path must answer with an error (unary and
streamed, through each entry model and tensorrt_llm): never a hang while it says it is ready, never a 200 with an
answer other than the one it gave before (Dynamo's known issue: a worker healthy after its TensorRT-LLM engine died,
still taking requests). Triton 2.51's python backend keeps the model ready and fails each request in about 1 s."""

from __future__ import annotations

import pytest

from pytest_triton_llm.host.engine_processes import engine_processes, kill_engine
from pytest_triton_llm.stack.repository import entry_models
from pytest_triton_llm.triton.after_engine_death import ProbePath, after_engine_death, ask
from pytest_triton_llm.verdicts.health import DEADLINE_S, problems, summary

pytestmark = [pytest.mark.robustness, pytest.mark.health]

PROMPT = "The capital of France is"


def _paths(served) -> list[ProbePath]:
    """Every way in that the deployment serves: its entry models, and tensorrt_llm where it takes token ids."""
    streams = served.client.decoupled
    modes = (False, True) if streams else (False,)
    paths = [ProbePath(model, streamed) for model in entry_models(served.ref) for streamed in modes]
    if not served.ref.serving_layout.one_model:
        paths += [ProbePath(served.client.core_model, streamed, ids=True) for streamed in modes]
    return paths


def test_a_dead_engine_is_not_served_as_healthy(triton_llm, triton_llm_own_server, triton_llm_report):
    pid = getattr(triton_llm.server.process, "pid", None)
    if pid is None:
        pytest.skip("the server runs in a container: its engine's processes are not this machine's to kill")
    served = triton_llm_own_server(triton_llm)
    core = served.client.core_model
    if not engine_processes(served.server.process.pid, core):
        pytest.skip(f"{core}'s engine runs inside tritonserver (the C++ backend in leader mode): killing it stops the server")
    paths, ids = _paths(served), served.encode(PROMPT)
    endpoints = served.server.endpoints
    before = {p.name: ask(endpoints, p, PROMPT, ids, timeout_s=120) for p in paths}

    victims: list = []  # found again at the kill (the first look only decided there is an engine apart to kill)
    not_ready_s, probes = after_engine_death(
        endpoints, paths, PROMPT, ids, lambda: victims.extend(kill_engine(served.server.process.pid, core))
    )
    assert victims, f"{core}'s engine processes were gone before the kill"
    killed = ", ".join(f"{v.role} (pid {v.pid})" for v in victims)
    triton_llm_report.record(triton_llm.id, "after_engine_death", {"killed": killed, "told": summary(not_ready_s, probes)})
    found = problems(not_ready_s, probes, before)
    assert not found, f"killed {killed}; within {DEADLINE_S:g} s: " + "; ".join(found)
