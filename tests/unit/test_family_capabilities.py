"""Per template family: no suite test that would run sends an input its family lacks; it is skipped with the family's
reason instead. The suites are collected for the first image of every family (--triton-image YY.MM-trtllm, nothing
served); a collected test that is not skipped may only need capabilities whose inputs the family's contract declares.
The other half of the proof runs in every real run: the plugin fails a test that sends a family-dependent input without
declaring the capability that needs it (capabilities.ServedInputs.undeclared, checked in plugin.pytest_runtest_call)."""

from pathlib import Path

import pytest

from pytest_triton_llm.stack.capabilities import ServedInputs, family_inputs
from pytest_triton_llm.stack.compat import load_compat
from pytest_triton_llm.stack.lock import Deployment
from pytest_triton_llm.plugin.hooks import REQUIRES
from pytest_triton_llm.stack.repository import template_family

ROOT = Path(__file__).resolve().parents[2]
FIRST_IMAGE = {}  # family -> the first image that serves it
for _tag, _entry in sorted(load_compat().images.items(), key=lambda kv: tuple(int(p) for p in kv[0].split("."))):
    FIRST_IMAGE.setdefault(template_family(_entry.triton), _tag)


@pytest.mark.parametrize("family", sorted(FIRST_IMAGE, key=lambda f: tuple(int(p) for p in f.split("-")[1].split("."))))
def test_no_test_that_runs_on_a_family_needs_an_input_the_family_lacks(pytester, family):
    tag = FIRST_IMAGE[family]
    recorder = pytester.inline_run(
        str(ROOT / "suites"),
        "--collect-only",
        "--rootdir",
        str(ROOT),
        "--engines-lock",
        str(ROOT / "engines.lock"),
        "--triton-image",
        f"{tag}-trtllm",
        "-p",
        "no:cacheprovider",
    )
    items = recorder.getcalls("pytest_collection_finish")[0].session.items
    assert items, f"nothing collected for {tag}"
    served = ServedInputs(family_inputs(family), family)
    skipped_for_family = 0
    for item in items:
        if item.get_closest_marker("skip") is not None:
            skipped_for_family += family in item.get_closest_marker("skip").kwargs.get("reason", "")
            continue
        needs = {cap for mark in item.iter_markers(REQUIRES) for cap in mark.args}
        callspec = getattr(item, "callspec", None)
        param = callspec.params.get("triton_llm") if callspec else None
        entry = getattr(param, "model", "ensemble")
        options = getattr(getattr(param, "ref", param), "options", Deployment(batching="inflight"))
        if getattr(getattr(param, "ref", param), "layout", "inflight_batcher_llm") == "llmapi":
            continue  # the llmapi model's family is another contract (llmapi-*), checked the same way at run time
        assert served.lacking(needs, entry, options) is None, f"{item.nodeid} runs on {tag} but needs {sorted(needs)}"
    if family in ("trtllm-0.7", "trtllm-0.13"):  # families without the per-request exclude_input_in_output
        assert skipped_for_family > 0, f"no test was skipped for what {family} lacks"


def test_an_input_some_families_lack_is_reported_unless_a_declared_capability_covers_it():
    served = ServedInputs(family_inputs("trtllm-0.14"), "trtllm-0.14")
    sent = {"tensorrt_llm": {"input_ids", "input_lengths", "request_output_len", "exclude_input_in_output"}}
    undeclared = served.undeclared(sent, {"inflight_batcher_llm"}, "inflight_batcher_llm")
    assert undeclared == ["exclude_input_in_output to tensorrt_llm"]
    assert served.undeclared(sent, {"exclude_input_in_output"}, "inflight_batcher_llm") == []
    # an input every family declares (random_seed, seed: one input under two names) needs no capability
    assert served.undeclared({"tensorrt_llm": {"seed", "end_id"}}, set(), "inflight_batcher_llm") == []


def test_a_family_lacks_a_capability_by_its_contract_and_a_deployment_setting_can_give_it():
    old = ServedInputs(family_inputs("trtllm-0.13"), "template family trtllm-0.13")
    assert old.lacking({"exclude_input_in_output"}) == (
        "template family trtllm-0.13: tensorrt_llm declares no input exclude_input_in_output (needed for exclude_input_in_output)"
    )
    assert old.lacking({"prompt_excluded"}, options=Deployment(batching="inflight", exclude_input_in_output=True)) is None
    assert "exclude_input_in_output" in old.lacking(
        {"prompt_excluded"}, options=Deployment(batching="inflight", exclude_input_in_output=False)
    )
    assert (
        ServedInputs(family_inputs("trtllm-0.7"), "trtllm-0.7")
        .lacking({"penalties"})
        .endswith("declares no input frequency_penalty (needed for penalties)")
    )
    # the ensemble takes exclude_input_in_output per request only from v0.16.0
    assert ServedInputs(family_inputs("trtllm-0.14"), "f").lacking({"text_exclude_input_in_output"}, "ensemble")
    newer = ServedInputs(family_inputs("trtllm-0.16"), "f")
    assert newer.lacking({"text_exclude_input_in_output"}, "tensorrt_llm_bls") is None
