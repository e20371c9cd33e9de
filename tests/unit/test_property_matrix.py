"""fixtures/properties.toml and the coverage it gives: every input of every served contract has a cell, every effect
and every checked_by test exists, and a new input that no property names is a missing cell that fails the command."""

from __future__ import annotations

from pathlib import Path

import pytest

from pytest_triton_llm.cli.main import main
from pytest_triton_llm.properties.coverage import cells, render
from pytest_triton_llm.properties.effects import EFFECTS
from pytest_triton_llm.properties.matrix import PropertiesError, load_properties

ROOT = Path(__file__).resolve().parents[2]


def test_every_effect_named_by_the_data_is_written():
    properties = load_properties()
    assert {p.effect for p in properties.values() if p.effect} <= set(EFFECTS)


def test_every_marker_the_data_gives_a_property_is_registered():
    from pytest_triton_llm.plugin.hooks import MARKERS

    given = {p.marker for p in load_properties().values() if p.marker}
    assert given == {"guided", "speculative"} and given <= set(MARKERS)


def test_every_input_of_every_served_contract_has_a_cell_and_none_is_missing():
    properties = load_properties()
    found = cells(properties)
    assert [c for c in found if c.status == "missing"] == []
    report, passed = render(found, properties, ROOT)
    assert passed, report
    # every path of every contract family is laid out: 17 tensor-contract files and 5 /v1 families
    assert {c.path for c in found} == {
        "ensemble",
        "tensorrt_llm_bls",
        "tensorrt_llm",
        "llmapi",
        "/v1/completions",
        "/v1/chat/completions",
    }
    assert len({c.contract for c in found}) == 22


def test_an_input_no_property_names_is_missing_and_fails_the_matrix(tmp_path):
    contracts = tmp_path / "contracts"
    contracts.mkdir()
    (contracts / "trtllm-9.9.toml").write_text(
        '[ensemble.inputs]\ntext_input = { dtype = "TYPE_STRING", dims = [1] }\n'
        'shiny_new_knob = { dtype = "TYPE_FP32", dims = [1], optional = true }\n'
    )
    properties = load_properties()
    found = [c for c in cells(properties, contracts) if c.contract == "trtllm-9.9"]
    assert {(c.name, c.status) for c in found} == {("text_input", "checked"), ("shiny_new_knob", "missing")}
    report, passed = render(found, properties, ROOT)
    assert not passed and "missing: trtllm-9.9 ensemble shiny_new_knob" in report


def test_a_field_a_family_refuses_is_checked_by_the_refused_check():
    found = {(c.contract, c.path, c.name): c for c in cells(load_properties())}
    suffix = found["openai:trtllm-serve", "/v1/completions", "suffix"]
    assert (suffix.status, suffix.how) == ("checked", "the refused check (the family refused it)")
    top_k = found["openai:triton-openai", "/v1/chat/completions", "top_k"]
    assert top_k.status == "checked" and "refused" in top_k.how


def test_a_property_with_two_verdicts_is_one_line_naming_it(tmp_path):
    data = tmp_path / "properties.toml"
    data.write_text('[properties.knob]\nnames = { triton = ["knob"] }\neffect = "greedy"\nskip = "why"\n')
    with pytest.raises(PropertiesError, match=r"properties\.knob: give exactly one of effect, checked_by, skip, pending"):
        load_properties(data)


def test_an_input_in_two_properties_is_refused(tmp_path):
    data = tmp_path / "properties.toml"
    data.write_text(
        '[properties.a]\nnames = { triton = ["knob"] }\nskip = "x"\n[properties.b]\nnames = { triton = ["knob"] }\nskip = "y"\n'
    )
    with pytest.raises(PropertiesError, match="triton input 'knob' is in both a and b"):
        load_properties(data)


def test_the_coverage_command_prints_the_matrix_and_passes(capsys):
    assert main(["coverage"]) == 0
    out = capsys.readouterr().out
    assert "contract" in out and "0 missing" in out and "trtllm-0.19" in out and "openai:llama-cpp-python" in out
