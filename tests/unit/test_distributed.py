from pytest_triton_llm.plugin.distributed import scope_of
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
