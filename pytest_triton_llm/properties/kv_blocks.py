"""The KV-cache block counts a request asks back (return_perf_metrics, return_kv_cache_reuse_stats), judged by their
values: what a prompt of a known number of blocks allocates, and what it finds again when it is sent a second time.

TensorRT-LLM's executor reports per request (RequestPerfMetrics.kvCacheMetrics, sent by model_instance_state.cc as
kv_cache_alloc_new_blocks, kv_cache_reused_blocks, kv_cache_alloc_total_blocks) the blocks it allocated anew, those it
found in the reuse cache, and all it allocated. The prompt here is a number of whole blocks plus one token and the
answer ends inside the last block, so the counts do not depend on whether the cache also reuses a partly matched block
(enable_partial_reuse) or whether the sequence's last token is counted."""

from __future__ import annotations

import secrets
from typing import Any

from ..stack.kv_reuse import kv_cache_reuse, tokens_per_block
from ..stack.repository import served_family
from .requests import Ask, Unanswerable

Context = Any  # effects.Context, which imports this module

FULL_BLOCKS = 2  # whole blocks of the prompt before its last token: what a repeat of it can reuse
ANSWER_TOKENS = 4  # well inside the last block
FILLER = "the quick brown fox jumps over the lazy dog"
NAMES = ("kv_cache_alloc_new_blocks", "kv_cache_reused_blocks", "kv_cache_alloc_total_blocks")
# return_kv_cache_reuse_stats only logs "return_kv_cache_reuse_stats is deprecated, please use return_perf_metrics
# instead" from tensorrtllm_backend v0.19.0 on (model_instance_state.cc); before, it sent the three counts
REUSE_STATS_DEPRECATED_FROM = (0, 19)


def fresh_prompt(tokenizer, tokens: int) -> str:
    """A prompt no request sent before (its first word is random: no cached block can match it) of exactly `tokens`
    tokens, as a server's tokenizer encodes it (special tokens included)."""
    filler = " ".join([FILLER] * (tokens // 4 + 1))
    for _ in range(8):
        ids = tokenizer.encode(f"{secrets.token_hex(4)} {filler}")
        text = tokenizer.decode(ids[:tokens], skip_special_tokens=True)
        if len(tokenizer.encode(text)) == tokens:
            return text
    raise Unanswerable(f"no text of exactly {tokens} tokens came out of this tokenizer's round trip")


def block_counts(ctx: Context, option: str) -> None:
    """A fresh prompt of FULL_BLOCKS blocks and one token, asked twice with `option` (the request's flag for the counts):
    the first allocates FULL_BLOCKS + 1 blocks anew and reuses none; the second, where the deployment reuses KV-cache
    blocks, finds the FULL_BLOCKS whole ones (its last token is always computed) and allocates 1, else all of them
    anew again."""
    served = ctx.path.served
    size, size_from = tokens_per_block(served)
    if size is None:
        raise Unanswerable(f"the KV-cache block size is unknown: {size_from}")
    reuse, reuse_from = kv_cache_reuse(served)
    prompt = fresh_prompt(ctx.path.tokenizer, FULL_BLOCKS * size + 1)
    blocks = FULL_BLOCKS + 1
    expected = [(blocks, 0, blocks), (1, FULL_BLOCKS, blocks) if reuse else (blocks, 0, blocks)]
    for sent, want in enumerate(expected, start=1):
        metrics = ctx.ask(Ask.of(prompt, ANSWER_TOKENS, **{option: True})).metrics or {}
        got = tuple(int(metrics[n]) if n in metrics else None for n in NAMES)
        assert got == want, (
            f"{ctx.path.name} ({ctx.mode}): a prompt of {FULL_BLOCKS * size + 1} tokens (blocks of {size}: "
            f"{size_from}), sent for the {'first' if sent == 1 else 'second'} time, with KV-cache reuse "
            f"{'on' if reuse else 'off'} ({reuse_from}): (new, reused, total) blocks must be {want}, got {got}"
        )


def perf_metrics_blocks(ctx: Context) -> None:
    block_counts(ctx, "perf_metrics")


def kv_reuse_stats(ctx: Context) -> None:
    """return_kv_cache_reuse_stats: the block counts (block_counts) where the served family sends them; where it is
    deprecated, the answer is the one without it and no count comes back."""
    family = served_family(ctx.path.served.ref, ctx.path.served.server.version)
    if tuple(int(p) for p in family.removeprefix("trtllm-").split(".")) < REUSE_STATS_DEPRECATED_FROM:
        block_counts(ctx, "kv_reuse_stats")
        return
    expected = ctx.unary(Ask.of(FILLER, ANSWER_TOKENS)).text
    answer = ctx.ask(Ask.of(FILLER, ANSWER_TOKENS, kv_reuse_stats=True))
    ctx.same(expected, answer.text, f"return_kv_cache_reuse_stats, deprecated in {family}, must leave the answer as it is")
    sent = sorted(n for n in NAMES if n in (answer.metrics or {}))
    assert not sent, f"{ctx.path.name} ({ctx.mode}): {family} deprecated return_kv_cache_reuse_stats, yet {sent} came back"
