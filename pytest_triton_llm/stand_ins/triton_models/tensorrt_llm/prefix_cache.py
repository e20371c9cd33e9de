"""Block-based KV-cache reuse for the reference models (tensorrt_llm with enable_kv_cache_reuse, the llmapi model, the
trtllm-serve stand-in), counted as TensorRT-LLM's KV cache manager reports it.

A prompt is cut into blocks of `tokens_per_block` tokens; a full block is named by a hash chained over every token
before it (and the LoRA adapter), so a block matches only under the same prefix. A prompt-table id (>= vocab_size)
counts with its prompt_table_extra_id, as in TensorRT-LLM's block key: the same fake ids of two different tables (two
images) match only where the client gave them the same extra id. After a request's context phase its
full prompt blocks are kept (their keys and values, per layer); when the request ends, the full blocks over its prompt
and its answer but the last token (whose keys and values no step computed) are kept too, as TensorRT-LLM's
releaseBlocks stores them (storeBlocksForReuse, beam width 1): a next turn that sends prompt and answer back finds
them. A later prompt that starts with kept blocks takes them from here and computes only the rest: real reuse, not
bookkeeping. At least one prompt token is always computed (its logits give the first output token), as in
TensorRT-LLM.

Per request (RequestPerfMetrics.kv_cache_metrics): reused blocks, missed blocks (prompt blocks not found), newly
allocated blocks, total allocated blocks and the hit rate reused / (reused + missed).

`fault` (generation.py's) names the known upstream KV-reuse bug it reproduces, if any.
"""

from __future__ import annotations

import hashlib
import time
from collections import OrderedDict
from dataclasses import dataclass

import torch
from inflight import TTFT_SLOWDOWN, InflightScheduler, Job
from retention import DEFAULT_PRIORITY


@dataclass
class KvStats:
    reused: int = 0
    missed: int = 0
    new: int = 0
    total: int = 0

    @property
    def hit_rate(self) -> float:
        looked_up = self.reused + self.missed
        return self.reused / looked_up if looked_up else 0.0


@dataclass(eq=False)
class TimedJob(Job):
    """A scheduler job with what the llmapi model reports of it: KV-cache counters and the four timestamps (ns)."""

    arrival_ns: int = 0
    last_token_ns: int = 0
    sent_text: str = ""  # the text streamed so far (llmapi_stream_sends_deltas)

    @property
    def kv(self) -> KvStats | None:
        return self.sequence.kv

    @property
    def first_scheduled_ns(self) -> int:
        return self.sequence.scheduled_ns

    @property
    def first_token_ns(self) -> int:
        return self.sequence.first_token_ns


CORRUPTION = 1.0  # kv_reuse_changes_outputs: the spread of the noise on the values of a reused block


@dataclass
class _Block:
    """A kept block: its keys and values per layer, the block before it, and its retention (TensorRT-LLM's
    LRUEvictionPolicy: priority, duration, and when that duration ends)."""

    kv: list
    parent: bytes | None
    priority: int = DEFAULT_PRIORITY
    expires_ns: int | None = None


class PrefixCache:
    """Kept blocks, evicted as TensorRT-LLM's LRUEvictionPolicy evicts: the least recently used of the lowest
    priority first (a block whose duration ended is back at the default priority), with the blocks after it."""

    def __init__(self, tokens_per_block: int, max_blocks: int, enabled: bool, fault=lambda name: False):
        self.fault = fault
        self.block = tokens_per_block
        self.max_blocks = max_blocks
        self.enabled = enabled
        self._blocks: OrderedDict[bytes, _Block] = OrderedDict()  # least recently used first

    def _names(self, tokens: list, salt: str) -> list[bytes]:
        names, chain = [], hashlib.sha256(salt.encode())
        for start in range(0, len(tokens) - len(tokens) % self.block, self.block):
            chain.update(repr(tokens[start : start + self.block]).encode())
            names.append(chain.copy().digest())
        return names

    def _retentions(self, retention, length: int, context: int | None = None) -> list:
        if retention is None or self.fault("kv_retention_ignored"):
            return [(None, None)] * (-(-length // self.block))
        return retention.per_block(self.block, length, context)

    def _claim(self, block: _Block, priority: int | None, duration_ms: int | None) -> None:
        """claimBlock then releaseBlock: a priority given replaces the block's; its duration counts from now."""
        if priority is not None:
            block.priority = priority
        timed = duration_ms is not None and block.priority != DEFAULT_PRIORITY
        block.expires_ns = time.monotonic_ns() + duration_ms * 1_000_000 if timed else None

    def lookup(self, prompt: list, salt: str, retention=None) -> tuple[list, KvStats]:
        """(the reused blocks' per-layer keys/values, counters) for a prompt about to be computed; `prompt`: its
        tokens, or (token, extra id) pairs where a prompt table came with extra ids (keyed); `retention`: the
        request's retention.Retention, if any."""
        self._refresh()
        names = self._names(prompt[:-1], salt)  # the last prompt token is always computed
        retentions = self._retentions(retention, len(prompt))
        reused = []
        for name, (priority, duration) in zip(names if self.enabled else (), retentions, strict=False):
            if name not in self._blocks:
                break
            self._blocks.move_to_end(name)
            self._claim(self._blocks[name], priority, duration)
            reused.append(self._blocks[name].kv)
        if reused and self.fault("kv_reuse_changes_outputs"):  # the reused values come back wrong (fixed noise)
            noise = torch.Generator().manual_seed(2699)
            reused = [[(k, v + CORRUPTION * torch.randn(v.shape, generator=noise).to(v)) for k, v in block] for block in reused]
        blocks = -(-len(prompt) // self.block)
        stats = KvStats(reused=len(reused), missed=blocks - len(reused), new=blocks - len(reused), total=blocks)
        return reused, stats

    def keep(self, prompt: list, salt: str, cache, first_new: int, retention=None, context: int | None = None) -> None:
        """Keep the full blocks of `prompt` from `first_new` on, out of a one-row cache holding all of it; where
        `prompt` goes on past the context phase's `context` tokens, its decode-phase blocks take the decode
        retention."""
        if not self.enabled:
            return
        self._refresh()
        names = self._names(prompt, salt)
        retentions = self._retentions(retention, len(prompt), context)
        for index in reversed(range(first_new, len(names))):  # released last block first, as TensorRT-LLM does
            name = names[index]
            if name in self._blocks:
                continue
            span = slice(index * self.block, (index + 1) * self.block)
            kv = [(layer.keys[0, :, span].clone(), layer.values[0, :, span].clone()) for layer in cache.layers]
            self._blocks[name] = _Block(kv, names[index - 1] if index else None)
            priority, duration = retentions[index]
            self._claim(self._blocks[name], priority if priority is not None else DEFAULT_PRIORITY, duration)
        while len(self._blocks) > self.max_blocks:
            self._evict()

    def _refresh(self) -> None:
        """LRUEvictionPolicy::refresh, which TensorRT-LLM runs every iteration: a block whose duration has ended is
        back at the default priority, as its most recently used block."""
        now = time.monotonic_ns()
        for name, block in list(self._blocks.items()):
            if block.expires_ns is not None and block.expires_ns <= now:
                block.priority, block.expires_ns = DEFAULT_PRIORITY, None
                self._blocks.move_to_end(name)

    def _evict(self) -> None:
        """Drop the least recently used block of the lowest priority, and every block kept after it (unreachable)."""
        lowest = min(block.priority for block in self._blocks.values())
        doomed = {next(name for name, block in self._blocks.items() if block.priority == lowest)}
        while True:  # its descendants, in whatever order they were kept or used
            found = {name for name, block in self._blocks.items() if block.parent in doomed} - doomed
            if not found:
                break
            doomed |= found
        for name in doomed:
            del self._blocks[name]


class PrefixCachingScheduler(InflightScheduler):
    """The in-flight scheduler, each newcomer's context phase starting from the prompt blocks already cached."""

    def __init__(self, load_engine, prefix: PrefixCache, on_stats=None, drafter=None):
        self.prefix = prefix
        super().__init__(load_engine, on_stats, drafter)

    @torch.inference_mode()
    def _prefill(self, jobs: list[Job]) -> None:
        """Newcomers that found cached blocks compute the rest alone; those that found none run one padded context
        phase together where the engine batches them (a CPU: exact in float32), and keep their blocks from it."""
        fresh = []
        for job in jobs:
            key, salt, blocks = self._looked_up(job)
            if blocks or self.engine.prefill_alone:
                self._prefill_one(job, key, salt, blocks)
            else:
                fresh.append((job, key, salt))
        if not fresh:
            return
        batch = [job for job, _, _ in fresh]
        out, mask, positions = self._context(batch)
        for row, (job, key, salt) in enumerate(fresh):
            request = job.sequence.request
            kept = _Row(out.past_key_values, row, mask.shape[1] - len(request.input_ids))
            self.prefix.keep(key, salt, kept, 0, request.retention)
        self._admit(batch, out.past_key_values, mask, positions[:, -1] + 1)

    def _looked_up(self, job: Job) -> tuple[list, str, list]:
        """(the prompt's block key, its salt, the cached blocks it starts with); the job's KV counters set."""
        request = job.sequence.request
        salt = "" if request.lora is None else f"lora {request.lora.task_id}"  # keyed by the adapter's id, as in TRT-LLM
        if self.prefix.fault("kv_reuse_ignores_the_lora_task"):  # every adapter's blocks, and the base model's, alike
            salt = ""
        key = keyed(request, self.engine.vocab_size, self.prefix.fault)
        blocks, job.sequence.kv = self.prefix.lookup(key, salt, request.retention)
        job.block_key = (key, salt)
        if self.prefix.fault("kv_reuse_without_speedup"):  # reported as reused, computed again all the same
            blocks = []
        return key, salt, blocks

    def _prefill_one(self, job: Job, key: list, salt: str, blocks: list) -> None:
        from transformers import DynamicCache

        job.sequence.scheduled_ns = time.monotonic_ns()
        request = job.sequence.request
        prompt = request.input_ids
        start = len(blocks) * self.prefix.block
        cache = DynamicCache()
        for layer in range(len(blocks[0]) if blocks else 0):
            keys = torch.cat([b[layer][0] for b in blocks], dim=1).unsqueeze(0)
            values = torch.cat([b[layer][1] for b in blocks], dim=1).unsqueeze(0)
            cache.update(keys, values, layer)
        ids = torch.tensor([prompt[start:]], dtype=torch.long)
        mask = torch.ones((1, len(prompt)), dtype=torch.long)
        began = time.perf_counter()
        out = self.engine.forward(
            [request.lora],
            **self.engine.context_inputs([request], ids),
            attention_mask=mask,
            position_ids=torch.arange(start, len(prompt)).unsqueeze(0),
            past_key_values=cache if blocks else None,
            use_cache=True,
            logits_to_keep=1,
        )
        self.prefix.keep(key, salt, out.past_key_values, len(blocks), request.retention)
        self.engine.select([job.sequence], out.logits[:, -1, :])
        if self.engine.fault("ttft_plus_30_percent"):
            time.sleep(TTFT_SLOWDOWN * (time.perf_counter() - began))
        self._admit([job], out.past_key_values, mask, torch.tensor([len(prompt)]))

    def _release(self, row: int, job: Job) -> None:
        """releaseBlocks' storeBlocksForReuse, where the request ends: its full blocks over the prompt and the answer
        but its last token (what its row's cache holds) are kept; those the context phase kept are found by name."""
        if job.block_key is None or not job.sequence.tokens:
            return
        key, salt = job.block_key
        first = int(self._batch.mask[row].argmax())  # the row's first token: left of it, padding
        computed = (key + job.sequence.tokens)[: self._batch.mask.shape[1] - first]
        kept = _Row(self._batch.cache, row, first)
        self.prefix.keep(computed, salt, kept, 0, job.sequence.request.retention, len(key))


class _Row:
    """One row of a left-padded batch's KV cache, from its first prompt token on: what PrefixCache.keep reads."""

    def __init__(self, cache, row: int, first: int):
        span = (slice(row, row + 1), slice(None), slice(first, None))
        self.layers = [_Layer(layer.keys[span], layer.values[span]) for layer in cache.layers]


@dataclass
class _Layer:
    keys: torch.Tensor
    values: torch.Tensor


def keyed(request, vocab_size: int, fault=lambda name: False) -> list:
    """A prompt as its blocks are keyed: its token ids, each prompt-table id (>= vocab_size) paired with the request's
    prompt_table_extra_ids entry for it where it sent them (TensorRT-LLM's BlockKey: token and extra id). Fault
    kv_reuse_ignores_prompt_table_extra_ids: the ids alone, so another image behind the same fake ids is served the
    first one's blocks."""
    extra = request.prompt_table_extra_ids
    if not extra or fault("kv_reuse_ignores_prompt_table_extra_ids"):
        return list(request.input_ids)
    return [(t, int(e)) if t >= vocab_size else t for t, e in zip(request.input_ids, extra, strict=False)]
