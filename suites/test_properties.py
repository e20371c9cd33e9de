"""The property matrix (fixtures/properties.toml): every request input with an effect check, on every path that
serves it (the ensemble, tensorrt_llm_bls, the llmapi model, tensorrt_llm, /v1/completions, /v1/chat/completions),
unary, streamed and in a batch of four. The checks are library code (pytest_triton_llm/properties/effects.py); a cell
that cannot apply is skipped with the contract's reason. `pytest-triton-llm coverage` prints the whole matrix."""

from __future__ import annotations

import pytest

from pytest_triton_llm.common.files import fixtures_dir
from pytest_triton_llm.common.schema import load_toml
from pytest_triton_llm.properties.cells import run_cell
from pytest_triton_llm.properties.effects import ENDS, LONG, QUESTION, REPEAT, SAMPLE, Context
from pytest_triton_llm.properties.matrix import OPENAI, TENSORRT_LLM, effect_properties, load_properties
from pytest_triton_llm.properties.openai_paths import OpenAIPath
from pytest_triton_llm.properties.requests import MODES, Unanswerable
from pytest_triton_llm.properties.triton_paths import TritonPath, entry_surface

pytestmark = [pytest.mark.properties, pytest.mark.triton_llm_checks_declared_inputs]
# each mode under the marker of the capability it checks, so that a gate of `-m "functional or streaming or
# invariants"` runs the matrix too: unary cells are functional, streamed ones streaming, batched ones invariants
MODE_PARAMS = [
    pytest.param(mode, marks=mark)
    for mode, mark in zip(MODES, (pytest.mark.functional, pytest.mark.streaming, pytest.mark.invariants), strict=True)
]

PROPERTIES = load_properties()


def _params(props) -> list:
    """Each property a parameter under its own marker where it has one (`-m guided` runs the guided cells)."""
    return [pytest.param(p, id=p.name, marks=[getattr(pytest.mark, p.marker)] if p.marker else []) for p in props]


EFFECTS = _params(effect_properties(PROPERTIES))
V1_PROPERTIES = _params(p for p in PROPERTIES.values() if OPENAI in p.names and (p.effect or p.pending))


@pytest.fixture(scope="session")
def roles(prompts) -> dict[str, str]:
    """The prompts the effect checks send, by role."""
    return {
        LONG: prompts.completion["village"],  # its greedy answer runs past 24 tokens
        SAMPLE: prompts.completion["colors"],  # many likely continuations: sampling shows
        REPEAT: load_toml(fixtures_dir() / "prompts.toml")["repetition"]["counting"],
        QUESTION: prompts.chat_question,  # a chat answer ends by itself
        ENDS: prompts.completion["fox"],  # so does this one, where the chat answer does not
    }


@pytest.fixture(scope="session")
def property_paths() -> dict:
    """Paths by (deployment, model), built once (each reads its model's metadata)."""
    return {}


@pytest.fixture(scope="session")
def unary_answers() -> dict:
    """Unary answers by path and request, shared by the cells: each reference is asked once."""
    return {}


def _path(paths: dict, served, model: str, surface: str) -> TritonPath:
    key = (served.id, model)
    if key not in paths:
        paths[key] = TritonPath(served, model, surface)
    return paths[key]


def _run(prop, ctx: Context) -> None:
    try:
        run_cell(prop, ctx)
    except Unanswerable as exc:
        pytest.skip(str(exc))


@pytest.mark.triton_llm_entry_models
@pytest.mark.parametrize("mode", MODE_PARAMS)
@pytest.mark.parametrize("prop", EFFECTS)
def test_an_input_has_its_effect_through_the_entry_model(
    triton_llm, prop, mode, roles, property_paths, unary_answers, equality_rule
):
    path = _path(property_paths, triton_llm, triton_llm.entry, entry_surface(triton_llm))
    one_model = triton_llm.ref.serving_layout.one_model
    core = None if one_model else _path(property_paths, triton_llm, triton_llm.client.core_model, TENSORRT_LLM)
    _run(prop, Context(path, mode, prop.name, roles, equality_rule, core, unary_answers))


@pytest.mark.triton_llm_requires("inflight_batcher_llm")
@pytest.mark.parametrize("mode", MODE_PARAMS)
@pytest.mark.parametrize("prop", EFFECTS)
def test_an_input_has_its_effect_through_tensorrt_llm(
    triton_llm, prop, mode, roles, property_paths, unary_answers, equality_rule
):
    path = _path(property_paths, triton_llm, triton_llm.client.core_model, TENSORRT_LLM)
    _run(prop, Context(path, mode, prop.name, roles, equality_rule, None, unary_answers))


@pytest.mark.parametrize("mode", MODE_PARAMS)
@pytest.mark.parametrize("endpoint", ["completions", "chat"])
@pytest.mark.parametrize("prop", V1_PROPERTIES)
def test_an_input_has_its_effect_over_v1(openai_target, prop, endpoint, mode, roles, unary_answers, openai_equality_rule):
    path = OpenAIPath(openai_target, chat=endpoint == "chat")
    _run(prop, Context(path, mode, prop.name, roles, openai_equality_rule, None, unary_answers))
