"""KV-cache retention (tensorrt_llm's retention_token_range_* inputs, TensorRT-LLM's KvCacheRetentionConfig), judged by
which blocks a flood of other prompts leaves in the cache.

TensorRT-LLM gives each prompt block the priority of the token range its first token falls in (the default, 35,
where no range covers it; getPerBlockRetentionPriorityDuration) and evicts the least recently used block of the
lowest priority first; a block whose duration has ended is back at the default (LRUEvictionPolicy::refresh). So
after fresh prompts at the default priority have taken more blocks than the cache holds, a prompt asked again finds
exactly the blocks its ranges kept above the default: all of them for a range over the whole prompt, the first only
for a range that ends there, none for no range, for a range whose duration ended, or for one that starts past the
sequence. Every kept block here is a prefix of its prompt, so the count does not depend on whether the cache evicts
leaves only. The PyTorch runtime once dropped the config on its way to the KV cache manager (NVIDIA/TensorRT-LLM#7062):
every prompt then finds none.

The decode phase's blocks (retention_decode_priority and retention_decode_duration_ms, read only beside a range) are
judged the same way on a second turn: the blocks a request allocates after its context phase take the decode priority
(WindowBlockManager::allocateBlock), and when it ends its blocks over prompt and answer are stored for reuse
(releaseBlocks, storeBlocksForReuse: all tokens but the last). A prompt of one block and all but one token of a second,
kept at priority 100, answers long enough to fill a third block; after the flood, the prompt sent back with that answer
finds the third block only where the decode priority kept it, and then answers as the first turn went on."""

from __future__ import annotations

import math
from typing import Any

from ..stack.kv_reuse import kv_cache_reuse, tokens_per_block
from ..triton.tensor_contract import NO_END
from ..verdicts.equality import assert_agree
from .kv_blocks import ANSWER_TOKENS, FULL_BLOCKS, counts_option, fresh_prompt
from .requests import Ask, Unanswerable

Context = Any  # effects.Context

HIGH = 100  # kMaxRetentionPriority
DEFAULT_RANGE = ((0, -1, 35, None),)  # the whole sequence at kDefaultRetentionPriority: how a check lets its blocks go
FLOOD_BLOCKS_PER_PROMPT = 4  # whole blocks of each flooding prompt
FLOOD_BUDGET_TOKENS = 4096  # the most prompt tokens the flood may take: a larger cache is skipped, saying how to size it
KV_MAX = ("nv_trt_llm_kv_cache_block_metrics", "max")


def probes(size: int) -> list[tuple[str, tuple, int]]:
    """(what, ranges as (start, end or -1, priority, duration ms or None), the blocks found again after the flood)
    for prompts of FULL_BLOCKS blocks of `size` tokens and one more token."""
    past = (FULL_BLOCKS + 1) * size + ANSWER_TOKENS  # no token of prompt or answer is there
    return [  # the one whose duration ends first: at the default priority again, it is older than the others
        ("a range over the whole prompt at priority 100 for 1 ms", ((0, -1, HIGH, 1),), 0),
        ("a range over the whole prompt at priority 100 (no expiry: duration -1)", ((0, -1, HIGH, -1),), FULL_BLOCKS),
        ("no retention config", (), 0),
        ("a range over the first block only, at priority 100", ((0, size, HIGH, None),), 1),
        (f"a range from token {past}, past the sequence, at priority 100", ((past, -1, HIGH, None),), 0),
    ]


def kv_retention(ctx: Context) -> None:
    size, option = _readable(ctx)
    cases = probes(size)
    capacity = _capacity(ctx, size, len(cases))
    prompts = [fresh_prompt(ctx.path.tokenizer, FULL_BLOCKS * size + 1) for _ in cases]
    try:
        _kept_ranges(ctx, cases, prompts, option, size, capacity)
    finally:
        _let_go(ctx, [Ask.of(prompt, 1, retention=DEFAULT_RANGE) for prompt in prompts])


def _kept_ranges(ctx: Context, cases: list, prompts: list[str], option: str, size: int, capacity: int) -> None:
    first = [_ask(ctx, prompt, option, ranges) for prompt, (_, ranges, _) in zip(prompts, cases, strict=True)]
    _fresh(ctx, [found for found, _ in first])
    _flood(ctx, size, capacity)
    again = [_ask(ctx, prompt, option, ()) for prompt in prompts]
    _found_as_kept(ctx, cases, [found for found, _ in again], f"prompts of {FULL_BLOCKS * size + 1} tokens", size, capacity)
    texts = [text for _, text in first], [text for _, text in again]
    assert_agree(*texts, ctx.rule, ctx.path.tokenizer, f"{ctx.path.name} ({ctx.mode}): prompts asked again after the flood")


def decode_probes() -> list[tuple[str, tuple | None, int]]:
    """(what, the decode retention as (priority, duration ms or None) or None for none sent, the blocks the second
    turn finds after the flood): the prompt's 2 blocks are kept at priority 100 each time, the third is the decode's."""
    return [  # the one whose duration ends first: at the default priority again, it is older than the others
        ("decode priority 100 for 1 ms", (HIGH, 1), 2),
        ("decode priority 100 (no expiry)", (HIGH, None), 3),
        ("no decode priority (the default, 35)", None, 2),
    ]


def kv_retention_decode(ctx: Context) -> None:
    size, option = _readable(ctx)
    cases = decode_probes()
    capacity = _capacity(ctx, size, len(cases))
    answered = size + 2  # the prompt's 2 * size - 1 tokens and these but the last fill 3 blocks
    prompts = [fresh_prompt(ctx.path.tokenizer, 2 * size - 1) for _ in cases]
    first: list[tuple[int, list[int]]] = []
    try:
        _kept_decode(ctx, cases, prompts, option, answered, first, size, capacity)
    finally:  # each prompt answered so far, with its answer's blocks: the decode block where it is kept
        answered_so_far = zip(prompts, first, strict=False)
        _let_go(ctx, [Ask.of(p, 1, after=tuple(ids[:answered]), retention=DEFAULT_RANGE) for p, (_, ids) in answered_so_far])


def _kept_decode(ctx: Context, cases, prompts, option: str, answered: int, first: list, size: int, capacity: int) -> None:
    """The decode check's turns; `first` gets each first turn's (blocks found, token ids) as it is answered."""
    for prompt, (_, decode, _) in zip(prompts, cases, strict=True):
        first.append(_first_turn(ctx, prompt, option, decode, answered))
    _fresh(ctx, [found for found, _ in first])
    _flood(ctx, size, capacity)
    again = [
        ctx.ask(Ask.of(prompt, ANSWER_TOKENS, end_id=NO_END, after=tuple(ids[:answered]), **{option: True}))
        for prompt, (_, ids) in zip(prompts, first, strict=True)
    ]
    found = [_reused(ctx, answer, option) for answer in again]
    what = f"prompts of {2 * size - 1} tokens kept at priority 100, answered with {answered} tokens, sent back with them"
    _found_as_kept(ctx, cases, found, what, size, capacity)
    went_on = [ctx.path.tokenizer.decode(ids[answered:], skip_special_tokens=True) for _, ids in first]
    assert_agree(went_on, [a.text for a in again], ctx.rule, ctx.path.tokenizer, f"{ctx.path.name} ({ctx.mode}): second turns")


def _first_turn(ctx: Context, prompt: str, option: str, decode: tuple | None, answered: int) -> tuple[int, list[int]]:
    """(blocks reused, the answer's token ids) of a first turn: `answered` tokens and ANSWER_TOKENS more."""
    retention = {"retention": ((0, -1, HIGH, None),)} | ({"decode_retention": decode} if decode else {})
    answer = ctx.ask(Ask.of(prompt, answered + ANSWER_TOKENS, end_id=NO_END, **{option: True}, **retention))
    ids = answer.token_ids
    if ids is None:
        raise Unanswerable(f"{ctx.path.name} returns no token ids to send back")
    assert len(ids) == answered + ANSWER_TOKENS, f"{ctx.path.name} ({ctx.mode}): no end_id, {len(ids)} tokens came"
    return _reused(ctx, answer, option), ids


def _let_go(ctx: Context, asks: list[Ask]) -> None:
    """The check's kept blocks back at the default priority (a reused block takes the priority its request's range
    gives it): left at 100 with no expiry, they would hold the server's small cache for every later test."""
    for ask in asks:
        ctx.path.answer(ask, "unary")


def _readable(ctx: Context) -> tuple[int, str]:
    """(tokens per block, the request's option for block counts), or Unanswerable where reuse cannot be read."""
    served = ctx.path.served
    size, size_from = tokens_per_block(served)
    reuse, reuse_from = kv_cache_reuse(served)
    option = counts_option(ctx)
    if size is None or not reuse or option is None:
        why = size_from if size is None else reuse_from if not reuse else "it returns no KV-cache block counts"
        raise Unanswerable(f"{served.id}: which blocks a request finds again cannot be read here ({why})")
    return size, option


def _fresh(ctx: Context, found: list[int]) -> None:
    stale = [n for n in found if n]
    assert not stale, f"{ctx.path.name} ({ctx.mode}): fresh prompts found {stale} block(s) they never had cached"


def _found_as_kept(ctx: Context, cases: list, found: list[int], what: str, size: int, capacity: int) -> None:
    wrong = [
        f"{case}: must find {want} block(s) again, found {got}"
        for (case, _, want), got in zip(cases, found, strict=True)
        if got != want
    ]
    assert not wrong, (
        f"{ctx.path.name} ({ctx.mode}): {what} (blocks of {size}), then fresh prompts at the default priority over "
        f"more blocks than the cache's {capacity}: " + "; ".join(wrong)
    )


def _capacity(ctx: Context, size: int, kept_prompts: int) -> int:
    """The KV cache's blocks, as TensorRT-LLM's metrics say; Unanswerable where flooding them costs too much."""
    blocks = ctx.path.served.client.trtllm_gauges().get(KV_MAX)
    if blocks is None:
        raise Unanswerable('tensorrt_llm publishes no nv_trt_llm_kv_cache_block_metrics{kv_cache_block_type="max"}')
    blocks = int(blocks)
    if blocks * size > FLOOD_BUDGET_TOKENS:
        raise Unanswerable(
            f"its KV cache holds {blocks} blocks of {size} tokens: flooding it would take over {FLOOD_BUDGET_TOKENS} "
            "prompt tokens; serve a deployment whose cache is small (engines.lock kv_cache_max_tokens, tensorrt_llm's "
            "max_tokens_in_paged_kv_cache)"
        )
    if blocks < kept_prompts * (FULL_BLOCKS + 1) + FLOOD_BLOCKS_PER_PROMPT + 1:
        raise Unanswerable(f"its KV cache of {blocks} blocks cannot hold the kept prompts beside a flooding one")
    return blocks


def _ask(ctx: Context, prompt: str, option: str, ranges: tuple) -> tuple[int, str]:
    """(blocks reused, answer) of `prompt` asked with `ranges` as its retention config."""
    answer = ctx.ask(Ask.of(prompt, ANSWER_TOKENS, **{option: True}, **({"retention": ranges} if ranges else {})))
    return _reused(ctx, answer, option), answer.text


def _reused(ctx: Context, answer, option: str) -> int:
    reused = (answer.metrics or {}).get("kv_cache_reused_blocks")
    if reused is None:
        raise AssertionError(f"{ctx.path.name} ({ctx.mode}): asked with {option}, no kv_cache_reused_blocks came back")
    return int(reused)


def _flood(ctx: Context, size: int, blocks: int) -> None:
    """Fresh prompts at the default priority over `blocks` whole blocks, one after another."""
    for _ in range(math.ceil(blocks / FLOOD_BLOCKS_PER_PROMPT)):
        prompt = fresh_prompt(ctx.path.tokenizer, FLOOD_BLOCKS_PER_PROMPT * size + 1)
        ctx.path.answer(Ask.of(prompt, 1), "unary")
