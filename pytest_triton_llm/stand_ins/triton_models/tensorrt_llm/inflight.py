"""In-flight (continuous) batching for the reference tensorrt_llm model (gpt_model_type inflight_fused_batching).

One scheduler thread owns a running batch. Every iteration it
  1. ends requests that were cancelled (the `stop` input, or the client closed its stream),
  2. admits waiting requests into free slots (up to max_batch_size active) and prefills them,
  3. runs one decoding step for the whole batch and hands each request its new token,
  4. drops finished requests, freeing their slots at once.
So a short request never waits for a long one, unlike V1's static batches.

The batch keeps one KV cache, left-padded: row i's tokens occupy the last columns of the
cache and an attention mask hides its padding; positions are per row. Joining pads the
newcomers' prefill cache to the batch width (or the batch to theirs); leaving selects
the remaining rows and trims columns that are padding in every row.

The engine's `fault` (generation.py) also names the scheduler's known upstream bugs, if it reproduces one.
"""

from __future__ import annotations

import os
import random
import signal
import threading
import time
import traceback
from collections import deque
from dataclasses import dataclass, field
from typing import Callable

import torch
import torch.nn.functional as F
from generation import ReferenceEngine, Sequence
from ngram import NGramDrafter

TTFT_SLOWDOWN = 0.3  # ttft_plus_30_percent: the extra wait before a first token, as a share of its prefill time
STALL_AFTER = 5  # engine_stalls_after_a_few_requests: "a few" in the issue
CRASH_RATE = 0.02  # sampling_setup_crashes_under_load: 1 in 50 setups (the issue gives no rate)
LOG_PROBS_SLOWDOWN = 10.2  # log_probs_slow_generation: 69.2 s against 6.2 s in the issue, 11.2x a step
STEP_SLOWDOWN = 0.42  # throughput_minus_20_percent: the extra wait after each step, as a share of its time: 0.25 cost the
# smoke workload only 12% of its output tokens/s (2 cores: tokenizing, HTTP and the python models take the rest); 0.42
# makes the drop the client sees about 20%


@dataclass(eq=False)
class Job:
    """One request in the scheduler.

    `emit(job, tokens, log_probs, final, error=None)` delivers output: for a streaming job each
    new token as it comes, otherwise everything at the end; `final` marks the last delivery.
    """

    sequence: Sequence
    request_id: str
    emit: Callable[..., None]
    streaming: bool = False
    is_cancelled: Callable[[], bool] = lambda: False
    stop_requested: bool = False
    streamed: int = field(default=0)  # tokens already delivered
    block_key: tuple | None = None  # where KV-cache blocks are reused: (its prompt's block key, salt), prefix_cache.py

    @property
    def cancelled(self) -> bool:
        return self.stop_requested or self.is_cancelled()


class _Batch:
    """The running batch: its jobs, KV cache, attention mask and next position per row."""

    def __init__(self):
        self.jobs: list[Job] = []
        self.cache = None
        self.mask: torch.Tensor | None = None  # [rows, width]
        self.positions: torch.Tensor | None = None  # [rows]

    def __len__(self) -> int:
        return len(self.jobs)

    @staticmethod
    def _left_pad(tensor: torch.Tensor, columns: int, dim: int) -> torch.Tensor:
        if columns == 0:
            return tensor
        pad = [0, 0] * (tensor.dim() - 1 - dim) + [columns, 0]
        return F.pad(tensor, pad)

    def join(self, jobs: list[Job], cache, mask: torch.Tensor, positions: torch.Tensor) -> None:
        if not self.jobs:
            self.jobs, self.cache, self.mask, self.positions = list(jobs), cache, mask, positions
            return
        width = max(self.mask.shape[1], mask.shape[1])
        grow_old, grow_new = width - self.mask.shape[1], width - mask.shape[1]
        for old, new in zip(self.cache.layers, cache.layers, strict=True):
            old.keys = torch.cat([self._left_pad(old.keys, grow_old, 2), self._left_pad(new.keys, grow_new, 2)])
            old.values = torch.cat([self._left_pad(old.values, grow_old, 2), self._left_pad(new.values, grow_new, 2)])
        self.mask = torch.cat([self._left_pad(self.mask, grow_old, 1), self._left_pad(mask, grow_new, 1)])
        self.positions = torch.cat([self.positions, positions])
        self.jobs = self.jobs + list(jobs)  # a new list: request_stop() reads it from another thread

    def realign(self, shifts: list[int]) -> None:
        """Move row i's columns right by shifts[i] (its last shifts[i] columns, masked, wrap round to its left end):
        after a speculative step, the columns of a row's rejected draft tokens become padding on its left, so that
        each row's tokens stay contiguous and end at the last column."""
        if not any(shifts):
            return
        width = self.mask.shape[1]
        index = (torch.arange(width).unsqueeze(0) - torch.tensor(shifts).unsqueeze(1)) % width  # [rows, width]
        self.mask = self.mask.gather(1, index)
        for layer in self.cache.layers:
            columns = index[:, None, :, None].expand_as(layer.keys)
            layer.keys, layer.values = layer.keys.gather(2, columns), layer.values.gather(2, columns)
        self.keep(list(range(len(self.jobs))), force=True)

    def keep(self, keep: list[int], force: bool = False) -> None:
        if len(keep) == len(self.jobs) and not force:
            return
        self.jobs = [self.jobs[i] for i in keep]
        if not keep:
            self.cache = self.mask = self.positions = None
            return
        index = torch.tensor(keep, dtype=torch.long)
        self.mask, self.positions = self.mask[index], self.positions[index]
        trim = int(self.mask.argmax(dim=1).min())  # columns that are padding in every remaining row
        self.mask = self.mask[:, trim:]
        for layer in self.cache.layers:
            layer.keys = layer.keys[index, :, trim:, :]
            layer.values = layer.values[index, :, trim:, :]


class InflightScheduler:
    """Runs the batch on its own thread, which also loads the engine: torch's OpenMP pool then lives
    in that one thread (a pool left in the loading thread competes with it: 40% slower on 2 cores)."""

    def __init__(
        self,
        load_engine: Callable[[], ReferenceEngine],
        on_stats: Callable[[dict], None] | None = None,
        drafter: NGramDrafter | None = None,
    ):
        self.drafter = drafter  # speculative decoding: proposes draft tokens before each generation step (ngram.py)
        self.on_stats = on_stats or (lambda stats: None)  # each iteration's statistics (metrics.TrtllmMetrics.iteration)
        self._waiting: deque[Job] = deque()
        self._admitting: list[Job] = []  # taken from the queue, in their context phase, not yet in the batch
        self._batch = _Batch()
        self._orphans: list[Job] = []  # cancelled_request_keeps_its_slot: ended, never released
        self._ended = 0  # requests ended since the model loaded (engine_stalls_after_a_few_requests)
        self._crash_draw = random.Random(2040)  # sampling_setup_crashes_under_load
        self._wake = threading.Condition()
        self._closed = False
        self._loaded = threading.Event()
        self._load_error: BaseException | None = None
        self.engine: ReferenceEngine | None = None
        self._thread = threading.Thread(target=self._run, args=(load_engine,), name="inflight-scheduler", daemon=True)
        self._thread.start()
        self._loaded.wait()
        if self._load_error is not None:
            raise self._load_error
        self.max_active = self.engine.build_config["max_batch_size"]
        if self.engine.fault("inflight_serializes_requests"):  # one request at a time: no batching at all
            self.max_active = 1

    # -- called from Triton's execute() thread --------------------------------------------
    def submit(self, job: Job) -> None:
        with self._wake:
            self._waiting.append(job)
            self._wake.notify()

    def request_stop(self, request_id: str) -> bool:
        """The `stop` input: end the request with this id early. False if none is in flight."""
        with self._wake:
            found = [j for j in (*self._waiting, *self._admitting, *self._batch.jobs) if j.request_id == request_id]
            for job in found:
                job.stop_requested = not self.engine.fault("stop_signal_ignored")
            self._wake.notify()
        return bool(found)

    def close(self) -> None:
        with self._wake:
            self._closed = True
            self._wake.notify()
        self._thread.join(timeout=30)

    # -- the scheduler thread ------------------------------------------------------------------
    def _run(self, load_engine: Callable[[], ReferenceEngine]) -> None:
        try:
            self.engine = load_engine()
        except BaseException as exc:  # reported by __init__ in the caller's thread
            self._load_error = exc
            return
        finally:
            self._loaded.set()
        while True:
            with self._wake:
                while not self._closed and (self._stalled or (not self._waiting and not self._batch.jobs)):
                    self._wake.wait(timeout=0.5)
                if self._closed:
                    return
                newcomers = []
                while self._waiting and len(self._batch) + len(newcomers) < self.max_active:
                    newcomers.append(self._waiting.popleft())
                self._admitting = newcomers  # a stop that arrives during their context phase must find them
                waiting = list(self._waiting)
            try:
                self._iteration(newcomers, waiting)
            except Exception as exc:  # fail the affected requests, keep serving
                message = f"generation failed: {exc}"
                traceback.print_exc()
                for job in [*self._batch.jobs, *newcomers]:
                    job.emit(job, [], [], True, error=message)
                self._batch = _Batch()

    @property
    def _stalled(self) -> bool:
        """engine_stalls_after_a_few_requests: after STALL_AFTER requests ended, no step runs again: what is in flight
        and what comes later is never answered."""
        return self._ended >= STALL_AFTER and self.engine.fault("engine_stalls_after_a_few_requests")

    def _crash_in_sampling_setup(self, admitted: list[Job]) -> None:
        """sampling_setup_crashes_under_load: setting up a batch smaller than max_batch_size that holds a top-p or top-k
        request reads past the runtime vectors, and now and then the process dies of it."""
        jobs = [*self._batch.jobs, *admitted]
        sampled = any(j.sequence.request.sampling.top_p > 0 or j.sequence.request.sampling.top_k > 0 for j in jobs)
        if sampled and len(jobs) < self.max_active and self.engine.fault("sampling_setup_crashes_under_load"):
            if self._crash_draw.random() < CRASH_RATE:
                os.kill(os.getpid(), signal.SIGSEGV)

    def _iteration(self, newcomers: list[Job], waiting: list[Job]) -> None:
        for job in waiting:  # cancelled while still queued
            if job.cancelled:
                with self._wake:
                    if job in self._waiting:
                        self._waiting.remove(job)
                self._finish(job, "cancelled")
        admitted = []
        for job in newcomers:
            if job.cancelled:
                self._finish(job, "cancelled")
            else:
                admitted.append(job)
        if len(admitted) > 1 and self.engine.fault("outputs_swapped_under_concurrency"):  # each gets the next one's
            sequences = [j.sequence for j in admitted]
            for job, sequence in zip(admitted, sequences[1:] + sequences[:1], strict=True):
                job.sequence = sequence
        self._drop_finished(cancel_check=True)
        if admitted:
            self._crash_in_sampling_setup(admitted)
        running = len(self._batch)  # requests scheduled for generation only, besides the newcomers' context phase
        if admitted:  # context phase of the newcomers (each alone on a GPU), then one generation step for everyone
            for group in ([job] for job in admitted) if self.engine.prefill_alone else [admitted]:
                self._prefill(group)
            self._drop_finished(cancel_check=False)
        generating = len(self._batch)
        if self._batch.jobs:
            self._decode()
            self._drop_finished(cancel_check=False)
        holding = [*self._batch.jobs, *self._orphans]  # requests that hold a slot and KV cache
        self.on_stats(
            {
                "active": len(holding),
                "scheduled": len(admitted) + running,
                "context": len(admitted),
                "context_tokens": sum(len(j.sequence.request.input_ids) for j in admitted),
                "generation": generating,
                "sequence_lengths": [len(j.sequence.request.input_ids) + len(j.sequence.tokens) for j in holding],
            }
        )

    @torch.inference_mode()
    def _prefill(self, jobs: list[Job]) -> None:
        out, mask, positions = self._context(jobs)
        self._admit(jobs, out.past_key_values, mask, positions[:, -1] + 1)

    def _admit(self, jobs: list[Job], cache, mask, next_positions) -> None:
        """Jobs whose context phase is done join the running batch, each handed its first token."""
        self._batch.join(jobs, cache, mask, next_positions)
        for job in jobs:
            self._deliver(job)

    def _context(self, jobs: list[Job]):
        """One left-padded context phase of `jobs`, each's first token chosen: (the model's output, mask, positions)."""
        for job in jobs:  # first scheduled: its context phase begins
            job.sequence.scheduled_ns = time.monotonic_ns()
        prompts = [j.sequence.request.input_ids for j in jobs]
        width = max(len(p) for p in prompts)
        ids = torch.zeros((len(jobs), width), dtype=torch.long)
        mask = torch.zeros((len(jobs), width), dtype=torch.long)
        for i, prompt in enumerate(prompts):
            ids[i, width - len(prompt) :] = torch.tensor(prompt)
            mask[i, width - len(prompt) :] = 1
        positions = (mask.cumsum(-1) - 1).clamp(min=0)
        adapters = [j.sequence.request.lora for j in jobs]
        start = time.perf_counter()
        out = self.engine.forward(
            adapters,
            **self.engine.context_inputs([j.sequence.request for j in jobs], ids),
            attention_mask=mask,
            position_ids=positions,
            use_cache=True,
            logits_to_keep=1,
        )
        self.engine.select([j.sequence for j in jobs], out.logits[:, -1, :])
        if self.engine.fault("ttft_plus_30_percent"):
            time.sleep(TTFT_SLOWDOWN * (time.perf_counter() - start))
        return out, mask, positions

    @torch.inference_mode()
    def _decode(self) -> None:
        batch = self._batch
        start = time.perf_counter()
        drafts = [self._draft(job) for job in batch.jobs]
        width = 1 + max(len(d) for d in drafts)  # each row's last token, then its draft (padding where shorter)
        step = torch.zeros((len(batch), width), dtype=torch.long)
        fed = torch.zeros((len(batch), width), dtype=torch.long)
        for i, (job, draft) in enumerate(zip(batch.jobs, drafts, strict=True)):
            step[i, : 1 + len(draft)] = torch.tensor([job.sequence.tokens[-1], *draft])
            fed[i, : 1 + len(draft)] = 1
        mask = torch.cat([batch.mask, fed], dim=1)
        out = self.engine.forward(
            [j.sequence.request.lora for j in batch.jobs],
            input_ids=step,
            attention_mask=mask,
            position_ids=batch.positions.unsqueeze(1) + torch.arange(width),
            past_key_values=batch.cache,
            use_cache=True,
        )
        batch.cache, batch.mask = out.past_key_values, mask
        if width == 1:
            batch.positions = batch.positions + 1
            self.engine.select([j.sequence for j in batch.jobs], out.logits[:, -1, :])
        else:
            self._verify(drafts, out.logits)
        if self.engine.fault("throughput_minus_20_percent"):
            time.sleep(STEP_SLOWDOWN * (time.perf_counter() - start))
        logging = any(j.sequence.request.return_log_probs for j in batch.jobs)
        if logging and self.engine.fault("log_probs_slow_generation"):
            time.sleep(LOG_PROBS_SLOWDOWN * (time.perf_counter() - start))
        for job in batch.jobs:
            self._deliver(job)

    def _draft(self, job: Job) -> list[int]:
        """The drafter's proposal for the job's next step (none without a drafter)."""
        if self.drafter is None:
            return []
        seq = job.sequence
        prefix = [*seq.request.input_ids, *seq.tokens]
        return self.drafter.draft(id(job), prefix, len(seq.request.input_ids) + seq.request.max_new_tokens)

    def _verify(self, drafts: list[list[int]], logits: torch.Tensor) -> None:
        """Each row's tokens chosen position by position from one forward over its last token and its draft: a draft
        token the target chooses too is kept and the next position is read, the first it does not choose is replaced
        by the target's own, which ends the row's step (as after the last draft token). The cache keeps the columns of
        the row's last token and its kept draft tokens; the rest are masked and realigned away."""
        batch, kept = self._batch, []
        for i, (job, draft) in enumerate(zip(batch.jobs, drafts, strict=True)):
            seq, accepted = job.sequence, 0
            for at in range(len(draft) + 1):
                before = len(seq.tokens)
                self.engine.select([seq], logits[i, at : at + 1])
                agreed = at < len(draft) and len(seq.tokens) > before and seq.tokens[-1] == draft[at]
                accepted += agreed
                if agreed and seq.finished and self.engine.fault("drafts_kept_past_the_stop"):
                    self._leak(seq, draft[at + 1 :], logits[i, at + 1 : len(draft)])
                if not agreed or seq.finished:
                    break
            seq.drafted, seq.accepted = seq.drafted + len(draft), seq.accepted + accepted
            kept.append(1 + accepted)
        width = logits.shape[1]
        batch.positions = batch.positions + torch.tensor(kept)
        if self.engine.fault("rejected_draft_kv_kept"):  # the rejected tokens' keys and values stay attended
            return
        for i, columns in enumerate(kept):
            batch.mask[i, batch.mask.shape[1] - width + columns :] = 0
        batch.realign([width - columns for columns in kept])

    @staticmethod
    def _leak(seq, rest: list[int], logits: torch.Tensor) -> None:
        """drafts_kept_past_the_stop: the step's draft tokens after the one that ended the answer (a stop word, its
        max_tokens), as far as the target agrees with them, appended as if no stop had come in the step."""
        for token, row in zip(rest, logits, strict=False):
            if int(row.argmax()) != token:
                return
            seq.tokens.append(token)
            seq.log_probs.append(float(torch.log_softmax(row.float(), dim=-1)[token]))

    def _deliver(self, job: Job) -> None:
        """Hand a streaming job its new tokens; a finished job gets everything and the final flag."""
        seq = job.sequence
        if seq.finished:
            self._finish(job, seq.finish_reason)
        elif job.streaming and not self.engine.fault("stream_held_until_the_end"):  # held: all of it comes with the end
            new = slice(job.streamed, len(seq.tokens))
            tokens, log_probs = seq.tokens[new], seq.log_probs[new]
            if job.streamed == 0 and self.engine.fault("first_streamed_token_twice"):
                tokens, log_probs = tokens[:1] + tokens, log_probs[:1] + log_probs
            job.streamed = len(seq.tokens)
            job.emit(job, tokens, log_probs, False)

    def _finish(self, job: Job, reason: str) -> None:
        self._ended += 1
        if self.drafter is not None:
            self.drafter.forget(id(job))
        seq = job.sequence
        if seq.finish_reason is None:
            seq.finish_reason = reason
        if reason == "cancelled" and self.engine.fault("cancelled_request_keeps_its_slot"):
            self._orphans.append(job)  # wherever it was cancelled: queued, admitted or in the batch
        new = slice(job.streamed, len(seq.tokens))
        tokens, log_probs = seq.tokens[new], seq.log_probs[new]
        if job.streaming and seq.finish_reason == "end_id" and seq.tokens and self.engine.fault("end_token_streamed_twice"):
            tokens, log_probs = tokens + seq.tokens[-1:], log_probs + seq.log_probs[-1:]  # the last token, not the end
        job.streamed = len(seq.tokens)
        job.emit(job, tokens, log_probs, True)

    def _drop_finished(self, cancel_check: bool) -> None:
        keep = []
        for i, job in enumerate(self._batch.jobs):
            if cancel_check and not job.sequence.finished and job.cancelled:
                self._finish(job, "cancelled")
            if job.sequence.finished:
                self._release(i, job)
            else:
                keep.append(i)
        self._batch.keep(keep)

    def _release(self, row: int, job: Job) -> None:
        """A finished job leaves the batch at `row`: what a scheduler that keeps KV-cache blocks keeps of it."""
