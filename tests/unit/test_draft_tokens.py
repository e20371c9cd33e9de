"""Speculative decoding's external draft tokens: the reference engine verifies them as TensorRT-LLM's
draft-tokens-external mode does by comparison (hand-made logits, no model), the lock's max_draft_len, and the
trtllm-build flags it becomes."""

import numpy as np
import pytest

torch = pytest.importorskip("torch", reason="the reference backend extra is not installed")

from errors import ExecutorError  # noqa: E402  (model dirs on sys.path: conftest)
from generation import GenerationRequest, ReferenceEngine, Sampling, Sequence  # noqa: E402
from outputs import complete_outputs  # noqa: E402

from .test_build_commands import commands  # noqa: E402

VOCAB, END = 10, 9
GREEDY = [4, 5, 6, 7, 8]  # what the logits below make the greedy answer


def engine(fault: str | None = None, max_draft_len: int = 4) -> ReferenceEngine:
    e = ReferenceEngine.__new__(ReferenceEngine)  # the decoding rules need no weights
    e.vocab_size, e.fault = VOCAB, lambda name: name == fault
    e.build_config = {"max_input_len": 8, "max_output_len": 8, "max_seq_len": 16, "max_draft_len": max_draft_len}
    return e


def decode(e: ReferenceEngine, draft: list[int] | None, max_new_tokens: int, perf: bool = False, **request) -> Sequence:
    seq = Sequence(GenerationRequest([1], max_new_tokens, END, draft_tokens=draft, return_perf_metrics=perf, **request))
    while not seq.finished:
        row = torch.zeros(1, VOCAB)
        row[0, GREEDY[len(seq.tokens)]] = 5.0  # step i's greedy token is GREEDY[i]
        e.select([seq], row)
    return seq


def _peaked(draft: list[int]) -> np.ndarray:
    logits = np.zeros((len(draft), VOCAB), dtype=np.float32)
    logits[np.arange(len(draft)), draft] = 30.0  # the draft's probability of its token rounds to 1
    return logits


WHOLE = Sampling(top_k=0, top_p=1.0, temperature=1.0, seed=3)  # every token has p > 0


def test_with_draft_logits_threshold_0_keeps_a_draft_the_target_would_not_sample_and_1_refuses_it():
    wrong = [0, 1, 2]  # none is the greedy token, each has p > 0 under whole-vocabulary sampling
    kept = decode(engine(), wrong, 4, draft_logits=_peaked(wrong), draft_acceptance_threshold=0.0, sampling=WHOLE)
    assert kept.tokens[:3] == wrong and len(kept.tokens) == 4
    compared = decode(engine(), wrong, 4, sampling=WHOLE)  # without logits: by comparison, with the sampled tokens
    assert compared.tokens[:3] != wrong
    refused = decode(engine(), wrong, 4, draft_logits=_peaked(wrong), draft_acceptance_threshold=1.0, sampling=WHOLE)
    assert len(refused.tokens) == 1 and refused.tokens[0] != wrong[0]  # drawn from max(p - q, 0): never the draft's


def test_greedy_with_draft_logits_answers_as_by_comparison():
    for draft in ([4, 5, 6], [4, 0, 6]):
        by_logits = decode(engine(), draft, 4, draft_logits=_peaked(draft))  # a uniform threshold per token
        assert by_logits.tokens == decode(engine(), draft, 4).tokens


def test_draft_logits_dropped_are_the_faults_symptom():
    wrong = [0, 1, 2]
    seq = decode(
        engine("draft_logits_ignored"), wrong, 4, draft_logits=_peaked(wrong), draft_acceptance_threshold=0.0, sampling=WHOLE
    )
    assert seq.tokens[:3] != wrong


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


@pytest.mark.parametrize(
    "draft, counts",
    [([4, 5, 6], (3, 3, 1.0)), ([4, 0, 6], (3, 1, 1 / 3)), ([0, 5, 6], (3, 0, 0.0)), (None, (0, 0, 0.0))],
)
def test_perf_metrics_count_the_draft_and_what_the_target_kept(draft, counts):
    seq = decode(engine(), draft, len(draft or [0, 0, 0]) + 1, perf=True)
    out = complete_outputs(seq, exclude_input=True)
    got = tuple(out[n].item() for n in ("total_draft_tokens", "total_accepted_draft_tokens", "acceptance_rate"))
    assert got[:2] == counts[:2] and got[2] == pytest.approx(counts[2])
    times = [out[n].item() for n in ("arrival_time_ns", "first_scheduled_time_ns", "first_token_time_ns", "last_token_time_ns")]
    assert times == sorted(times) and times[2] > 0
    assert "acceptance_rate" not in complete_outputs(decode(engine(), draft, 4), exclude_input=True)  # not asked


def test_zeroed_counts_are_the_faults_symptom():
    seq = decode(engine(), [4, 5, 6], 4, perf=True)
    out = complete_outputs(seq, exclude_input=True, fault=lambda name: name == "draft_acceptance_not_reported")
    assert (out["total_draft_tokens"].item(), out["total_accepted_draft_tokens"].item()) == (0, 0)


def test_a_refusal_that_leaves_nothing_of_max_p_minus_q_draws_from_the_targets_own_distribution():
    """q = p, both one-hot at the greedy token, threshold 1: 1 > 1 x 1 is false, and max(p - q, 0) is all 0, which the
    kernel would divide by (undefined upstream): the stand-in draws from p, here the greedy token, and does not fail."""
    onehot = np.full((3, VOCAB), -1e4, dtype=np.float32)
    onehot[np.arange(3), GREEDY[:3]] = 0.0
    seq = decode(engine(), GREEDY[:3], 4, draft_logits=onehot, draft_acceptance_threshold=1.0)
    assert seq.tokens == GREEDY[:4]
