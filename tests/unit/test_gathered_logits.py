"""Gathered logits: the verdict against a greedy answer (hand-made rows), the reference engine keeping each step's row
and refusing in TensorRT-LLM's words where its engine gathers none, the fault of NVIDIA/TensorRT-LLM#1569, and the
trtllm-build flags the lock's fields become."""

import numpy as np
import pytest

from pytest_triton_llm.stack.engines.tensorrtllm.commands import UnsupportedRecipe
from pytest_triton_llm.verdicts.logits import problems

from .test_build_commands import commands

torch = pytest.importorskip("torch", reason="the reference backend extra is not installed")

from errors import ExecutorError  # noqa: E402  (model dirs on sys.path: conftest)
from generation import GenerationRequest, ReferenceEngine, Sequence  # noqa: E402
from outputs import complete_outputs  # noqa: E402

VOCAB, END = 10, 9
GREEDY = [4, 5, 6]  # what the rows below make the greedy answer, then the end token


def rows(tokens: list[int]) -> np.ndarray:
    out = np.zeros((len(tokens), VOCAB))
    out[np.arange(len(tokens)), tokens] = 5.0
    return out


def test_rows_that_line_up_with_the_answer_pass():
    generation = rows(GREEDY)
    context = np.vstack([np.ones((3, VOCAB)), generation[:1]])
    assert problems(GREEDY, 4, context, generation, cut=True) == []
    assert problems(GREEDY, 4, context, np.vstack([generation, rows([END])]), cut=False) == []  # the end token's step


@pytest.mark.parametrize(
    "context_rows, generation, words",
    [
        (3, rows([5, 6, 6]), "not the likeliest"),  # one step early: NVIDIA/TensorRT-LLM#1569
        (3, rows([4, 5]), "fewer rows"),
        (2, rows(GREEDY), "a row per prompt token"),
        (3, rows([*GREEDY, 7]), "not a row per token"),  # max_tokens cut it: no row past the last token
    ],
)
def test_rows_that_do_not_line_up_are_named(context_rows, generation, words):
    context = np.vstack([np.ones((context_rows, VOCAB)), rows(GREEDY[:1])])
    found = problems(GREEDY, 4, context, generation, cut=True)
    assert found and words in found[0], found


def test_a_first_step_that_is_not_the_context_phases_last_row_is_named():
    assert "differ" in problems(GREEDY, 2, np.vstack([np.ones(VOCAB), rows([3])]), rows(GREEDY), cut=True)[0]


def engine(fault: str | None = None, gather: bool = True) -> ReferenceEngine:
    e = ReferenceEngine.__new__(ReferenceEngine)  # the decoding rules need no weights
    e.vocab_size, e.fault = VOCAB, lambda name: name == fault
    e.build_config = {"max_input_len": 8, "max_output_len": 8, "max_seq_len": 16}
    e.build_config |= {"gather_context_logits": True, "gather_generation_logits": True} if gather else {}
    return e


def decode(e: ReferenceEngine) -> Sequence:
    seq = Sequence(GenerationRequest([1], 8, END, return_generation_logits=True))
    for token in [*GREEDY, END]:
        e.select([seq], torch.from_numpy(rows([token])).float())
    return seq


def test_the_engine_keeps_each_steps_row_and_a_fault_drops_one_where_the_end_token_ended_the_answer():
    clean = complete_outputs(decode(engine()), exclude_input=True)["generation_logits"][0, 0]
    assert clean.argmax(axis=1).tolist() == [*GREEDY, END]  # the end token's step has its row too
    fault = "generation_logits_step_dropped_at_the_end_token"
    faulted = complete_outputs(decode(engine()), exclude_input=True, fault=lambda name: name == fault)
    assert faulted["generation_logits"][0, 0].argmax(axis=1).tolist() == [5, 6, END, END]


@pytest.mark.parametrize("asked", ["return_context_logits", "return_generation_logits"])
def test_an_engine_that_gathers_none_refuses_in_the_executors_words(asked):
    with pytest.raises(ExecutorError, match="gather_(context|generation)_logits"):
        engine(gather=False).validate(GenerationRequest([1], 4, END, **{asked: True}))


def test_the_lock_fields_become_trtllm_builds_flags_and_the_legacy_build_refuses_them():
    flags = ["--gather_context_logits", "--gather_generation_logits"]
    assert commands("24.09", gather_context_logits=True, gather_generation_logits=True)[1][-2:] == flags
    assert not set(flags) & set(commands("24.09")[1])
    with pytest.raises(UnsupportedRecipe, match="gathered logits"):
        commands("24.01", gather_context_logits=True)
