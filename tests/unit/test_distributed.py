from types import SimpleNamespace

import pytest

from pytest_triton_llm.plugin.distributed import REPORT_KEY, scope_of, send_to_controller
from pytest_triton_llm.stack.runtimes.server import cpu_share, serving_environment

GROUPS = {
    "smollm2-135m:v1": "smollm2-135m:v1",
    "smollm2-135m:inflight": "smollm2-135m:inflight",
    "smollm2-135m:v1-vs-inflight": "smollm2-135m:v1+smollm2-135m:inflight",
}


def test_tests_of_one_deployment_share_a_scope_wherever_its_id_sits():
    assert scope_of("suites/test_functional.py::test_a[smollm2-135m:v1-ensemble]", GROUPS) == "smollm2-135m:v1"
    assert scope_of("suites/test_lora.py::test_b[8-smollm2-135m:v1]", GROUPS) == "smollm2-135m:v1"
    assert scope_of("suites/test_x.py::test_c[smollm2-135m:inflight]", GROUPS) == "smollm2-135m:inflight"


def test_a_pair_is_its_own_scope_not_its_v1_deployments():
    nodeid = "suites/test_batching.py::test_ratio[smollm2-135m:v1-vs-inflight]"
    assert scope_of(nodeid, GROUPS) == "smollm2-135m:v1+smollm2-135m:inflight"


def test_tests_without_a_deployment_are_scheduled_one_by_one():
    assert scope_of("tests/unit/test_lock.py::test_x", GROUPS) == "tests/unit/test_lock.py::test_x"
    # a prefix of a deployment id is not that deployment
    assert scope_of("suites/t.py::test_y[smollm2-135m:v10]", GROUPS) == "suites/t.py::test_y[smollm2-135m:v10]"


def test_servers_split_the_cores_over_xdist_workers_unless_the_user_chose(monkeypatch):
    monkeypatch.setattr("os.sched_getaffinity", lambda pid: set(range(8)))
    assert cpu_share({}) == 8
    assert cpu_share({"PYTEST_XDIST_WORKER_COUNT": "2"}) == 4
    assert cpu_share({"PYTEST_XDIST_WORKER_COUNT": "16"}) == 1
    assert serving_environment({"PYTEST_XDIST_WORKER_COUNT": "4"})["OMP_NUM_THREADS"] == "2"
    assert serving_environment({"OMP_NUM_THREADS": "3"})["OMP_NUM_THREADS"] == "3"


def test_a_workers_report_reaches_the_controller_in_json_types_numpy_numbers_included():
    """execnet refuses numpy numbers: a worker whose report held one lost its whole report (CI runs 27-32)."""
    np = pytest.importorskip("numpy")
    config = SimpleNamespace(workeroutput={})
    send_to_controller(config, {"deployments": {"d": {"metrics": {"rouge1": np.float64(0.25), "ids": np.array([1, 2])}}}})
    sent = config.workeroutput[REPORT_KEY]
    assert sent == {"deployments": {"d": {"metrics": {"rouge1": 0.25, "ids": [1, 2]}}}}
    assert type(sent["deployments"]["d"]["metrics"]["rouge1"]) is float
