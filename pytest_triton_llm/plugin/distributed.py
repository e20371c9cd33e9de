"""pytest-xdist: tests of a deployment run on one worker, which owns its servers; one merged report.

- With `-n N` (xdist's "load" distribution) the controller schedules by deployment: every test whose
  parameters name a deployment goes to the worker that has that deployment, so a worker starts only
  the servers of the deployments it was given and no deployment is served twice. (xdist's own
  `loadgroup` cannot do this on pytest >= 9.2: it rewrites `item._nodeid`, which pytest no longer reads.)
- Workers send their report to the controller, which merges them and writes the one JSON.
- Engines are built once across workers by the engine cache's file lock; ports are free
  loopback ports (a start that loses a port race retries on new ones).
"""

from __future__ import annotations

import re

import pytest

from ..common.files import plain

REPORT_KEY = "triton_llm_report"


def is_worker(config: pytest.Config) -> bool:
    return hasattr(config, "workerinput")


def scope_of(nodeid: str, groups: dict[str, str]) -> str:
    """The deployment group named in a node id's parameters, else the node id (scheduled like `load`)."""
    params = nodeid.partition("[")[2][:-1]
    for param_id in sorted(groups, key=len, reverse=True):  # a pair's id contains its v1 deployment's id
        if re.search(rf"(?:^|-){re.escape(param_id)}(?:-|$)", params):
            return groups[param_id]
    return nodeid


def make_scheduler(config: pytest.Config, log, groups: dict[str, str]):
    """A scheduler for `-n N` with the default distribution; None leaves other `--dist` modes to xdist."""
    if config.getvalue("dist") != "load" or not groups:
        return None
    from xdist.scheduler import LoadScopeScheduling

    class DeploymentScheduling(LoadScopeScheduling):
        def _split_scope(self, nodeid: str) -> str:
            return scope_of(nodeid, groups)

    return DeploymentScheduling(config, log)


def send_to_controller(config: pytest.Config, document: dict) -> None:
    """The worker's report, in JSON's own types: execnet cannot send a numpy number, and the worker's whole report was
    lost with the worker when one held one (its deployment missing from the session's report)."""
    config.workeroutput[REPORT_KEY] = plain(document)  # type: ignore[attr-defined]  # pytest-xdist sets it on a worker's config
