"""The fault catalog (fixtures/faults.toml): known upstream bugs that the project's stand-ins reproduce on demand
(--stand-in-fault NAME), so that the suites can be shown to catch them.

Each row names the bug (repository, number, title), the versions it hit, what the stand-in does to reproduce its
observable symptom, the model it lives in and the markers whose tests must catch it. The behaviour itself is code in
the stand-in models (stand_ins/triton_models/*), switched on by a config parameter of the same name; it can only be
injected where the project's stand-in serves that model, never into upstream's code or TensorRT-LLM.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from ..common.files import fixtures_dir
from ..common.schema import SchemaError, build, load_toml

MODELS = ("tensorrt_llm", "preprocessing", "postprocessing", "tensorrt_llm_bls")
NOT_CLEAN = "this is not a clean run: its results say what the suites catch, nothing about the stack"


CATALOG = fixtures_dir() / "faults.toml"
# the tracker catalog: rows chosen from upstream's trackers by a fixed rule (docs/tracker-catalog.md), not written
# against the suites; its rows share the gate a user runs, given once in its [defaults]
TRACKER = fixtures_dir() / "tracker_faults.toml"
CATALOGS = {"faults": CATALOG, "tracker": TRACKER}


@dataclass(frozen=True)
class Fault:
    name: str
    issue: str  # owner/repository#number (a pull request counts)
    title: str  # the issue's title, as upstream wrote it
    versions: str  # the versions it hit, as the issue says them
    does: str  # what the stand-in does: the observable symptom it reproduces
    model: Literal["tensorrt_llm", "preprocessing", "postprocessing", "tensorrt_llm_bls"]
    layout: Literal["inflight_batcher_llm", "llmapi", "multimodal"]  # the engine ensemble's, the llmapi model, images
    kind: str  # the class of bug: streaming text, stop conditions, sampling, ...
    markers: tuple[str, ...]  # the suites' markers whose tests must catch it
    deployment: str  # the deployment the campaign runs it on
    approximate: str = ""  # where the stand-in can only approximate the symptom, why
    pytest_args: tuple[str, ...] = ()  # what else the campaign passes (a saved baseline, a workload)
    keyword: str = ""  # the campaign's -k: only the tests that can see it (a perf fault's load points)
    smoke: bool = False  # the campaign's --smoke runs it (a quick sample of the catalog, with the clean runs)
    stops_loading: bool = False  # it keeps its deployment from loading: a session that stops before ready catches it
    # why it needs a server of its own (its model reads it while loading, or it leaves the model changed after it is
    # off); "": a warm server switches it on for one session and off after (stack/runtimes/warm.py)
    own_server: str = ""

    def __post_init__(self):
        owner, _, number = self.issue.partition("#")
        if owner.count("/") != 1 or not number.isdigit():
            raise ValueError(f"field 'issue': expected owner/repository#number, got {self.issue!r}")

    @property
    def url(self) -> str:
        repo, number = self.issue.split("#")
        return f"https://github.com/{repo}/issues/{number}"

    def headline(self) -> str:
        return f"{self.name} ({self.issue}: {self.title}): {self.does}"

    def record(self) -> dict:
        """The report's run.stand_in_fault."""
        return {
            "name": self.name,
            "issue": self.issue,
            "title": self.title,
            "model": self.model,
            "layout": self.layout,
            "does": self.does,
            "clean": False,
        }


def load_catalog(path: Path = CATALOG) -> dict[str, Fault]:
    data = load_toml(path)
    rows = data.get("fault")
    if not isinstance(rows, list):
        raise SchemaError(f"{path}: expected [[fault]] tables")
    defaults = data.get("defaults", {})
    faults: dict[str, Fault] = {}
    for number, row in enumerate(rows, 1):
        fault = build(Fault, {**defaults, **row}, f"{path}: fault #{number}")
        if fault.name in faults:
            raise SchemaError(f"{path}: fault #{number}: name {fault.name!r} is taken by an earlier row")
        faults[fault.name] = fault
    return faults


def fault_named(name: str) -> Fault:
    """The row of either catalog; ValueError naming where to look otherwise."""
    for path in CATALOGS.values():
        faults = load_catalog(path)
        if name in faults:
            return faults[name]
    raise ValueError(
        f"--stand-in-fault {name}: no such fault in {' or '.join(p.name for p in CATALOGS.values())} "
        "(pytest-triton-llm faults --list [--catalog tracker] names them)"
    )


def injected(fault: Fault, layout: str, model_code: dict[str, str], stand_in: str) -> str | None:
    """Why `fault` is not in a deployment rendered with `model_code` (model -> origin), or None: it is."""
    if fault.layout != layout:
        return f"it lives in the {fault.layout} model, and this deployment serves the {layout} layout"
    origin = model_code.get(fault.model)
    if origin != stand_in:
        return f"its model {fault.model} is served by {origin or 'no python code'}, not the project's stand-in"
    return None
