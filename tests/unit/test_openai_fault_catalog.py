"""fixtures/openai_faults.toml and the fault proxy agree: every row is injected by exactly one of the proxy's
mechanisms, each names catching tests that exist, and a row names its Triton deployment exactly when the migration
gate catches it."""

from __future__ import annotations

import re

from pytest_triton_llm.openai import fault_proxy as proxy
from pytest_triton_llm.openai.fault_proxy import FAULTS_FILE
from pytest_triton_llm.common.schema import load_toml

from ..conftest import ROOT

FAULTS = load_toml(FAULTS_FILE)["faults"]
MECHANISMS = {
    "stream": set(proxy.STREAM_FAULTS),
    "unary": set(proxy.UNARY_FAULTS),
    "request": set(proxy.REQUEST_FAULTS),
    "drain": proxy.DRAINS,
    "no done": proxy.NO_DONE,
    "delay": set(proxy.EVENT_DELAY_S),
    "generic chat template": proxy.GENERIC_TEMPLATE,
    "server path": set(proxy.SERVER_PATH_FAULTS),
}


def test_every_fault_is_injected_by_exactly_one_mechanism_and_every_mechanism_has_its_row():
    injected_by = {name: [m for m, names in MECHANISMS.items() if name in names] for name in FAULTS}
    assert {name: len(ways) for name, ways in injected_by.items()} == dict.fromkeys(FAULTS, 1), injected_by
    assert set().union(*MECHANISMS.values()) == set(FAULTS)


def test_every_catching_test_exists_in_the_suites():
    for name, row in FAULTS.items():
        assert row["caught_by"], name
        for node in row["caught_by"]:
            path, *classes, test = node.split("::")  # the /v1 tests are methods of the module's TestOverV1
            function, text = re.sub(r"\[.*\]$", "", test), (ROOT / path).read_text()
            indent = "    " * len(classes)
            assert f"\n{indent}def {function}(" in text and all(f"\nclass {c}:" in text for c in classes), (name, node)


def test_a_row_names_its_triton_deployment_exactly_when_the_migration_gate_catches_it():
    for name, row in FAULTS.items():
        migration = [n for n in row["caught_by"] if n.startswith("suites/test_migration.py::TestOverV1::")]
        assert ("deployment" in row) == bool(migration), name
        assert all(n.endswith(f"[{row['deployment']}]") for n in migration), name
