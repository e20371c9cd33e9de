"""The BLS's speculative decoding with a draft model, as upstream's tensorrt_llm_bls runs it (lib/decode.py
`_spec_generate`, written again here): the draft model proposes up to num_draft_tokens tokens after the text so far,
the target verifies them (draft_input_ids, asked for len(draft) + 1 tokens) and answers the draft's prefix it agrees
with plus its own next token; repeated until max_tokens, until the target answers no token of its own (it ended: its end
token or a stop word), or until a stop word ends the text. Greedy, the answer is the target's own greedy answer."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable


@dataclass
class Speculated:
    tokens: list[int]  # generated after the prompt
    drafted: int = 0  # draft tokens proposed to the target, over all rounds
    accepted: int = 0  # of those, the ones the target kept
    rounds: int = 0


def agreeing(draft: list[int], answer: list[int]) -> int:
    """How many of the draft's first tokens the target's answer repeats."""
    return next((i for i, (d, a) in enumerate(zip(draft, answer, strict=False)) if d != a), min(len(draft), len(answer)))


def speculate(
    draft: Callable[[list[int], int], list[int]],
    target: Callable[[list[int], list[int]], list[int]],
    prompt: list[int],
    max_tokens: int,
    num_draft_tokens: int,
    stopped: Callable[[list[int]], bool] = lambda ids: False,
) -> Speculated:
    """`draft(ids, k)`: up to k tokens after ids; `target(ids, proposal)`: the target's tokens after ids, given the
    proposal as draft tokens; `stopped(ids)`: a stop word ends ids."""
    ids, done = list(prompt), Speculated([])
    while len(ids) < len(prompt) + max_tokens:
        room = len(prompt) + max_tokens - len(ids) - 1  # the target adds one token of its own
        proposal = draft(ids, min(num_draft_tokens, room)) if min(num_draft_tokens, room) > 0 else []
        answer = target(ids, proposal)
        kept = agreeing(proposal, answer)
        done.rounds += 1
        done.drafted += len(proposal)
        done.accepted += kept
        ids += answer
        if len(answer) == kept or stopped(ids):  # no token of its own: the target ended (its end token, a stop word)
            break
    done.tokens = ids[len(prompt) :]
    return done
