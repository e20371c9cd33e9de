"""The verdict on a deployment whose engine died: it must say so. Either its readiness goes false within the deadline,
or every request fails fast with an error; a request may also be answered where the server brought the engine back,
but only with the answer it gave before. Never a hang while ready, never a 200 with another (or an empty) answer:
the symptom of Dynamo's known issue, a worker that stays healthy and keeps taking requests after its engine died."""

from __future__ import annotations

from dataclasses import dataclass

# Triton 2.51's python backend answers a request to a model whose stub died with an error after about 1 s ("Stub
# process 'tensorrt_llm_0_0' is not healthy."), one request after another: 6 paths took 1-6 s on 2 cores. A path that
# answers nothing for 20 s is taken for a hang
DEADLINE_S = 20.0
ANSWER, ERROR, HANG = "answer", "error", "no answer"  # what a probe got


@dataclass(frozen=True)
class Probe:
    path: str
    outcome: str  # ANSWER, ERROR or HANG
    seconds: float
    detail: str  # the answer's text or ids, or the error's message


def problems(not_ready_after_s: float | None, probes: list[Probe], before: dict[str, str]) -> list[str]:
    """What is wrong, one line each; `before`: each path's answer while the engine lived."""
    found = []
    for probe in probes:
        if probe.outcome == ANSWER and probe.detail != before[probe.path]:
            found.append(
                f"{probe.path}: answered {probe.detail!r} after its engine died (before: {before[probe.path]!r}), not an error"
            )
        if probe.outcome == HANG and not_ready_after_s is None:
            found.append(
                f"{probe.path}: no answer and no error within {DEADLINE_S:g} s while the server and its models said "
                f"they were ready ({probe.detail})"
            )
    return found


def readiness_matters(probes: list[Probe]) -> bool:
    """Whether the verdict depends on readiness: only a path that hung is excused by a server that said not ready."""
    return any(probe.outcome == HANG for probe in probes)


def summary(not_ready_after_s: float | None, probes: list[Probe]) -> str:
    """One line for the report: how the deployment told."""
    ready = "ready while polled" if not_ready_after_s is None else f"not ready after {not_ready_after_s:g} s"
    return f"{ready}; " + "; ".join(f"{p.path}: {p.outcome} in {p.seconds:g} s" for p in probes)
