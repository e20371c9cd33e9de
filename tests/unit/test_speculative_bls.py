"""The BLS's speculative-decoding loop (tensorrt_llm_bls/speculative.py), with a hand-made target and drafts: whatever
the draft proposes, the answer is the target's greedy one; the counts are the draft's and what the target kept."""

from speculative import agreeing, speculate

GREEDY = [4, 5, 6, 7, 8, 9, 10, 11]  # the target's greedy continuation of the prompt [1]
END = 99


def target(ids: list[int], proposal: list[int]) -> list[int]:
    """Keeps the proposal's agreeing prefix, then its own token; ends at END (left out of the answer)."""
    at, out = len(ids) - 1, []
    for step in range(len(proposal) + 1):
        token = GREEDY[at + step] if at + step < len(GREEDY) else END
        if token == END:
            return out
        out.append(token)
        if step < len(proposal) and proposal[step] != token:
            return out
    return out


def test_a_right_draft_is_kept_whole_and_the_answer_is_the_greedy_one():
    done = speculate(lambda ids, k: GREEDY[len(ids) - 1 : len(ids) - 1 + k], target, [1], 6, 3)
    assert done.tokens == GREEDY[:6]
    assert (done.drafted, done.accepted) == (3 + 1, 3 + 1)  # 3 then the 1 the room left, all kept


def test_a_wrong_draft_changes_nothing_but_the_rounds():
    done = speculate(lambda ids, k: [0] * k, target, [1], 6, 3)
    assert done.tokens == GREEDY[:6] and done.accepted == 0 and done.rounds == 6


def test_the_target_ending_ends_the_loop_and_a_stop_word_too():
    assert speculate(lambda ids, k: [0] * k, target, [1], 20, 2).tokens == GREEDY
    assert (
        speculate(
            lambda ids, k: GREEDY[len(ids) - 1 : len(ids) - 1 + k], target, [1], 20, 3, lambda ids: ids[-2:] == [6, 7]
        ).tokens
        == GREEDY[:4]
    )


def test_agreeing_counts_the_leading_tokens_only():
    assert [agreeing([4, 5, 6], a) for a in ([4, 5, 6, 7], [4, 0], [0], [])] == [3, 1, 0, 0]
