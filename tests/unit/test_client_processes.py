"""How many load processes send a perf load point, and the report's word on whether they kept up."""

from pytest_triton_llm.triton.load import LoadRecords
from pytest_triton_llm.perf.client_processes import client_figures, free_cores, load_processes


def test_perf_workers_wins_over_the_rule():
    assert load_processes(3, {"concurrency": 64}, free_cores(False, 16)) == 3


def test_one_process_per_16_clients_within_the_cores_a_gpu_server_leaves():
    assert [load_processes(None, {"concurrency": c}, free_cores(False, 16)) for c in (1, 16, 17, 64, 512)] == [1, 1, 2, 4, 15]
    assert load_processes(None, {"request_rate": 100.0}, free_cores(False, 16)) == 1


def test_a_cpu_served_model_gets_one_process_whatever_the_concurrency():
    assert load_processes(None, {"concurrency": 64}, free_cores(True, 16)) == 1


def test_a_loop_busy_most_of_the_run_did_not_keep_up():
    calm = LoadRecords([], client_cpu_s=3.0, workers=2, loop_cpu_s=2.0)
    busy = LoadRecords([], client_cpu_s=9.0, workers=2, loop_cpu_s=8.0)
    assert client_figures(calm, 5.0) == {"processes": 2, "loop_busy": 0.2, "kept_up": True}
    assert client_figures(busy, 5.0) == {"processes": 2, "loop_busy": 0.8, "kept_up": False}
