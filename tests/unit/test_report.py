from pytest_triton_llm.plugin.report import RunReport


def worker_document(deployment: str, test: str, startup: float) -> dict:
    report = RunReport({})
    report.add_deployment(deployment, {"engine": "e", "engine_digest": "d" * 64})
    report.record(deployment, "accuracy", {"rouge1": 30.0})
    report.record_perf(deployment, "concurrency=1", {"output_tokens_per_s": 10.0})
    report.add_test(test, "passed", 1.0, deployment, ["functional"], None)
    report.record_run(f"seen_by_{deployment}", True)
    return report.document(startup_s=startup, first_test_s=startup + 1)


def test_workers_reports_merge_into_one():
    controller = RunReport({"runtime": "local"})
    controller.merge(worker_document("e:v1", "t1", 7.0))
    controller.merge(worker_document("e:inflight", "t2", 5.0))
    document = controller.document(startup_s=None, first_test_s=None)
    assert sorted(document["deployments"]) == ["e:inflight", "e:v1"]
    assert document["deployments"]["e:v1"]["metrics"] == {
        "accuracy": {"rouge1": 30.0},
        "perf": {"concurrency=1": {"output_tokens_per_s": 10.0}},
    }
    assert [t["nodeid"] for t in document["tests"]] == ["t1", "t2"] and document["summary"] == {"passed": 2}
    assert document["seen_by_e:v1"] and document["seen_by_e:inflight"]
    assert document["run"]["startup_s"] == 5.0 and document["run"]["first_test_s"] == 6.0  # the earliest worker's
    assert controller.perf_results() == {
        "e:v1": {"concurrency=1": {"output_tokens_per_s": 10.0}},
        "e:inflight": {"concurrency=1": {"output_tokens_per_s": 10.0}},
    }


def test_a_run_level_table_keeps_every_workers_entries_and_a_plain_value_is_replaced():
    controller = RunReport({"runtime": "local"})
    for point, rate in (("concurrency=1", 40.0), ("concurrency=4", 41.0)):
        worker = RunReport({"runtime": "local"})
        worker.record_run_entry("v1_perf", point, {"output_tokens_per_s": rate})
        worker.record_run("ratio", rate)
        controller.merge(worker.document(startup_s=None, first_test_s=None))
    document = controller.document(startup_s=None, first_test_s=None)
    assert document["v1_perf"] == {"concurrency=1": {"output_tokens_per_s": 40.0}, "concurrency=4": {"output_tokens_per_s": 41.0}}
    assert document["ratio"] == 41.0
