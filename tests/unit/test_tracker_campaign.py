"""The tracker campaign reads pytest's JUnit file back into node ids a user can run, test classes included."""

from pytest_triton_llm.openai.tracker_campaign import _node_id


def test_a_junit_testcase_becomes_the_node_id_pytest_prints():
    assert _node_id("suites.test_properties", "test_effect[echo-completions-unary]") == (
        "suites/test_properties.py::test_effect[echo-completions-unary]"
    )
    assert _node_id("suites.test_robustness.TestOverV1", "test_image") == "suites/test_robustness.py::TestOverV1::test_image"
