"""The conformance suites; shipped in the wheel as pytest_triton_llm.suites."""
