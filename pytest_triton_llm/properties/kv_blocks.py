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
from ..verdicts.equality import assert_agree
from ..stack.repository import family_version, served_family
from .requests import Ask, Unanswerable

Context = Any  # effects.Context, which imports this module

FULL_BLOCKS = 2  # whole blocks of the prompt before its last token: what a repeat of it can reuse
ANSWER_TOKENS = 4  # well inside the last block
FILLER = "the quick brown fox jumps over the lazy dog"
NAMES = ("kv_cache_alloc_new_blocks", "kv_cache_reused_blocks", "kv_cache_alloc_total_blocks")
# return_kv_cache_reuse_stats only logs "return_kv_cache_reuse_stats is deprecated, please use return_perf_metrics
# instead" from tensorrtllm_backend v0.19.0 on (model_instance_state.cc); before, it sent the three counts
REUSE_STATS_DEPRECATED_FROM = (0, 19)


def fresh_prompt(tokenizer, tokens: int, lead: str = "") -> str:
    """A prompt no request sent before (a random word early in its first block: no cached block can match it) of
    exactly `tokens` tokens, as a server's tokenizer encodes it (special tokens included), starting with `lead`."""
    filler = " ".join([FILLER] * (tokens // 4 + 1))
    for _ in range(8):
        ids = tokenizer.encode(f"{lead}{secrets.token_hex(4)} {filler}")
        text = tokenizer.decode(ids[:tokens], skip_special_tokens=True)
        if len(tokenizer.encode(text)) == tokens:
            return text
    raise Unanswerable(f"no text of exactly {tokens} tokens came out of this tokenizer's round trip")


def _counts(ctx: Context, ask: Ask) -> tuple[tuple, Any]:
    answer = ctx.ask(ask)
    metrics = answer.metrics or {}
    return tuple(int(metrics[n]) if n in metrics else None for n in NAMES), answer


def block_counts(ctx: Context, option: str) -> None:
    """A fresh prompt of FULL_BLOCKS blocks and one token, asked twice with `option` (the request's flag for the counts):
    the first allocates FULL_BLOCKS + 1 blocks anew and reuses none; the second, where the deployment reuses KV-cache
    blocks, finds the FULL_BLOCKS whole ones (its last token is always computed) and allocates 1, else all of them
    anew again. The repeat answers as the first (a context computed in pieces may round differently: the rule)."""
    served = ctx.path.served
    size, size_from = tokens_per_block(served)
    if size is None:
        raise Unanswerable(f"the KV-cache block size is unknown: {size_from}")
    reuse, reuse_from = kv_cache_reuse(served)
    prompt = fresh_prompt(ctx.path.tokenizer, FULL_BLOCKS * size + 1)
    blocks = FULL_BLOCKS + 1
    expected = [(blocks, 0, blocks), (1, FULL_BLOCKS, blocks) if reuse else (blocks, 0, blocks)]
    answers = []
    for sent, want in enumerate(expected, start=1):
        got, answer = _counts(ctx, Ask.of(prompt, ANSWER_TOKENS, **{option: True}))
        answers.append(answer.text)
        assert got == want, (
            f"{ctx.path.name} ({ctx.mode}): a prompt of {FULL_BLOCKS * size + 1} tokens (blocks of {size}: "
            f"{size_from}), sent for the {'first' if sent == 1 else 'second'} time, with KV-cache reuse "
            f"{'on' if reuse else 'off'} ({reuse_from}): (new, reused, total) blocks must be {want}, got {got}"
        )
    assert_agree(answers[:1], answers[1:], ctx.rule, ctx.path.tokenizer, f"{ctx.path.name} ({ctx.mode}): a repeated prompt")


def table_blocks(ctx: Context, words: tuple[str, ...], lead: str) -> None:
    """Prompt-table ids are keyed by their prompt_table_extra_ids (docs/kv_cache_reuse.md, "Enable KV cache reuse for
    P-Tuning": the same image must use the same id, another image another id). Where the deployment reuses blocks, a
    fresh prompt whose first block holds a table id, sent with extra id 1, then 2 (another image behind the same fake
    ids), then 1 again, reuses none of its blocks the first two times and its FULL_BLOCKS whole ones the third, which
    answers as the first."""
    served = ctx.path.served
    size, _ = tokens_per_block(served)
    reuse, _ = kv_cache_reuse(served)
    option = counts_option(ctx)
    if not reuse or size is None or option is None:
        return  # nothing is reused, or no count comes back: the table's answers above are the check
    prompt = fresh_prompt(ctx.path.tokenizer, FULL_BLOCKS * size + 1, lead)
    answers = []
    for extra_id, reused in ((1, 0), (2, 0), (1, FULL_BLOCKS)):
        got, answer = _counts(ctx, Ask.of(prompt, ANSWER_TOKENS, table=words, extra_id=extra_id, **{option: True}))
        answers.append(answer.text)
        assert got[1] == reused, (
            f"{ctx.path.name} ({ctx.mode}): a prompt whose first block holds a prompt-table id, sent with extra ids 1, "
            f"2, 1: with extra id {extra_id} it must reuse {reused} block(s), got (new, reused, total) = {got}"
        )
    assert_agree(answers[:1], answers[2:], ctx.rule, ctx.path.tokenizer, f"{ctx.path.name}: the table's blocks reused")


COUNTS_INPUTS = {"return_perf_metrics": "perf_metrics", "return_kv_cache_reuse_stats": "kv_reuse_stats"}


def counts_input(served, declared) -> str | None:
    """The input that asks for the block counts on a model declaring `declared` inputs: return_perf_metrics, else
    (before v0.19.0) return_kv_cache_reuse_stats; None where the model takes neither."""
    if "return_perf_metrics" in declared:
        return "return_perf_metrics"
    if "return_kv_cache_reuse_stats" in declared and not _deprecated(served):
        return "return_kv_cache_reuse_stats"
    return None


def counts_option(ctx: Context) -> str | None:
    """counts_input as the Ask option of this path."""
    name = counts_input(ctx.path.served, {n for n in COUNTS_INPUTS if ctx.path.declared(n)})
    return None if name is None else COUNTS_INPUTS[name]


def _family(served) -> str:
    return served_family(served.ref, served.server.version)


def _deprecated(served) -> bool:
    return family_version(_family(served)) >= REUSE_STATS_DEPRECATED_FROM


def perf_metrics_blocks(ctx: Context) -> None:
    block_counts(ctx, "perf_metrics")


def kv_reuse_stats(ctx: Context) -> None:
    """return_kv_cache_reuse_stats: the block counts (block_counts) where the served family sends them; where it is
    deprecated, the answer is the one without it and no count comes back."""
    if not _deprecated(ctx.path.served):
        block_counts(ctx, "kv_reuse_stats")
        return
    family = _family(ctx.path.served)
    expected = ctx.unary(Ask.of(FILLER, ANSWER_TOKENS)).text
    answer = ctx.ask(Ask.of(FILLER, ANSWER_TOKENS, kv_reuse_stats=True))
    ctx.same(expected, answer.text, f"return_kv_cache_reuse_stats, deprecated in {family}, must leave the answer as it is")
    sent = sorted(n for n in NAMES if n in (answer.metrics or {}))
    assert not sent, f"{ctx.path.name} ({ctx.mode}): {family} deprecated return_kv_cache_reuse_stats, yet {sent} came back"
