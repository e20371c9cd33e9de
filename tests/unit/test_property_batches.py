"""A batched cell sends its request after the fillers, and each filler must answer as it does alone: a server that
reads a row's options from the batch's first row, or lets one request's options reach the others, fails the cell."""

from __future__ import annotations

import pytest

from pytest_triton_llm.properties.effects import Context
from pytest_triton_llm.properties.requests import Answer, Ask
from pytest_triton_llm.properties.triton_paths import FILLERS


class FakePath:
    """Answers a request with its prompt and options; batched, `leak` gives every row the options of row `leak`."""

    name, key, tokenizer = "fake", "fake", None

    def __init__(self, leak: int | None = None):
        self.leak = leak
        self.batches: list[list[Ask]] = []

    def answer(self, ask: Ask, mode: str) -> Answer:
        return Answer(f"{ask.prompt} {sorted(ask.asked.items())}")

    def batch(self, asks: list[Ask], fields: dict | None = None) -> list[Answer]:
        """`fields`: raw fields of the last request, which a leaking server gives every row."""
        self.batches.append(asks)
        options = None if self.leak is None else asks[self.leak].options
        answers = [self.answer(Ask(a.prompt, a.max_tokens, a.options if options is None else options), "unary") for a in asks]
        for i, answer in enumerate(answers):
            if fields and (i == len(asks) - 1 or self.leak is not None):
                answer.text += f" {fields}"
        return answers


def context(path: FakePath) -> Context:
    return Context(path, "batched", "fake", {}, rule=None)


def test_the_request_goes_after_the_fillers_and_its_answer_is_returned():
    path = FakePath()
    ask = Ask.of("Once upon a time", 8, temperature=0.0)
    assert context(path).ask(ask).text == path.answer(ask, "unary").text
    [sent] = path.batches
    assert [a.prompt for a in sent] == [*FILLERS, ask.prompt]


def test_a_request_whose_options_reach_the_other_rows_fails_the_cell():
    with pytest.raises(AssertionError, match="batched with"):
        context(FakePath(leak=len(FILLERS))).ask(Ask.of("Once upon a time", 8, stop=("time",)))


def test_a_row_read_with_the_first_rows_options_answers_without_its_own():
    """Sent first, the request was the first row: a server that reads every row's options there looked right."""
    ask = Ask.of("Once upon a time", 8, stop=("time",))
    assert context(FakePath(leak=0)).ask(ask).text == FakePath().answer(Ask.of(ask.prompt, 8), "unary").text


def test_raw_fields_go_to_the_request_only_and_a_server_that_spreads_them_fails_the_cell():
    ask, fields = Ask.of("Once upon a time", 8), {"add_generation_prompt": False}
    assert context(FakePath()).ask_with(ask, fields).text.endswith(str(fields))
    with pytest.raises(AssertionError, match="batched with"):
        context(FakePath(leak=len(FILLERS))).ask_with(ask, fields)
