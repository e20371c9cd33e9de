"""Speculative decoding's external draft tokens: the reference engine verifies them as TensorRT-LLM's
draft-tokens-external mode does by comparison (hand-made logits, no model), the lock's max_draft_len, and the
trtllm-build flags it becomes."""

import pytest

torch = pytest.importorskip("torch", reason="the reference backend extra is not installed")

from errors import ExecutorError  # noqa: E402  (model dirs on sys.path: conftest)
from generation import GenerationRequest, ReferenceEngine, Sequence  # noqa: E402

from .test_build_commands import commands  # noqa: E402

VOCAB, END = 10, 9
GREEDY = [4, 5, 6, 7, 8]  # what the logits below make the greedy answer


def engine(fault: str | None = None, max_draft_len: int = 4) -> ReferenceEngine:
    e = ReferenceEngine.__new__(ReferenceEngine)  # the decoding rules need no weights
    e.vocab_size, e.fault = VOCAB, lambda name: name == fault
    e.build_config = {"max_input_len": 8, "max_output_len": 8, "max_seq_len": 16, "max_draft_len": max_draft_len}
    return e


def decode(e: ReferenceEngine, draft: list[int], max_new_tokens: int) -> Sequence:
    seq = Sequence(GenerationRequest([1], max_new_tokens, END, draft_tokens=draft))
    while not seq.finished:
        row = torch.zeros(1, VOCAB)
        row[0, GREEDY[len(seq.tokens)]] = 5.0  # step i's greedy token is GREEDY[i]
        e.select([seq], row)
    return seq


@pytest.mark.parametrize(
    "draft, expected",
    [
        ([4, 5, 6], [4, 5, 6, 7]),  # all agree: the draft, then the target's next token
        ([4, 0, 6], [4, 5]),  # the second disagrees: the target's own token there, and the request ends
        ([0, 5, 6], [4]),  # none agrees: one token, the target's
    ],
)
def test_the_target_keeps_the_draft_it_agrees_with_then_its_own_token(draft, expected):
    assert decode(engine(), draft, len(draft) + 1).tokens == expected


def test_a_draft_taken_unverified_is_the_faults_symptom():
    assert decode(engine("draft_tokens_accepted_unverified"), [4, 0, 6], 4).tokens == [4, 0, 6, 7]


def test_a_draft_longer_than_the_engines_max_draft_len_is_the_executors_error():
    with pytest.raises(ExecutorError, match=r"Draft tokens length \(3\) exceeds maximum draft tokens length \(2\)\."):
        engine(max_draft_len=2).validate(GenerationRequest([1], 4, END, draft_tokens=[4, 5, 6]))


def test_draft_tokens_are_built_with_trtllm_builds_external_mode():
    _, build = commands("24.09", max_draft_len=4)
    assert build[-4:] == ["--speculative_decoding_mode", "draft_tokens_external", "--max_draft_len", "4"]
    assert "--max_draft_len" not in commands("24.09")[1]
