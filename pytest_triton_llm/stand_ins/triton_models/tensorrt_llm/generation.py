"""Token generation for the reference tensorrt_llm model, with TensorRT-LLM's request semantics.

Self-contained (torch, numpy, transformers and the tensor contract): it is copied next to model.py
into the model repository and runs inside the Triton python backend stub.

Semantics follow TensorRT-LLM's executor:
- greedy when top_k == 1, or top_k == 0 and top_p == 0; else top-k/top-p sampling
  seeded by random_seed (default 0, so sampling is reproducible);
- top-p decay where top_k == 0 (TensorRT-LLM's top-p layer, computeToppDecay): after each sampled token the request's
  top-p becomes max(top_p * top_p_decay, top_p_min), or its initial top_p again after top_p_reset_ids;
- min_p (the PyTorch backend's, through the trtllm-serve stand-in): after top-k and top-p (an order not read from
  upstream), the tokens less likely than min_p x the likeliest's are dropped;
- generation ends at max_new_tokens, at end_id (not returned), or after a stop word
  sequence (returned); bad word sequences are never completed;
- min_length keeps end_id from being chosen before that many tokens.

A model that owns this engine may hand it `fault`, a predicate over fault names (stand_in_faults.Faults, narrowed to
the faults that live in the engine for that model): the known upstream bugs of fixtures/faults.toml it reproduces.
"""

from __future__ import annotations

import json
import os
import time
from dataclasses import dataclass, field, replace
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F
from errors import ExecutorError, assertion
from guided import NOT_SET_UP, GuideError
from lora import LoraSupport
from served_contract import RequestError

NEG_INF = float("-inf")
THREADS_ENV = "TRITON_LLM_STAND_IN_THREADS"  # torch's intra-op threads on a CPU; 1 unless set
GARBAGE = 20.0  # long_prompt_garbage: noise far above the logits' own spread, so the text is unrelated tokens
GREEDY_NOISE = 1.0  # greedy_not_deterministic: the spread of the noise on greedy logits, enough to flip near ties
# logits_perturbed: the spread of the fixed noise on every logit; measured on 16 CNN/DailyMail articles (greedy, 64
# tokens): ROUGE-1 35.3 -> 31.1, ROUGE-2 13.2 -> 11.3, ROUGE-Lsum 31.7 -> 28.2
PERTURBATION = 0.5
# long_prompt_garbage: a prompt longer than this share of max_input_len is answered from logits buried in noise
LONG_PROMPT_SHARE = 0.5
# prompt_table_ids_inside_the_vocabulary: the prompt-table ids were made from a vocabulary counted this many tokens
# short (TensorRT-LLM#3326: T5's tokenizer left out its 100 extra ids), so id vocab_size + k is a real token
VOCAB_SHORT_BY = 100


# (request field, the engine's build_config flag, the executor's words when the engine was built without it)
GATHERED_LOGITS = (
    (
        "return_context_logits",
        "gather_context_logits",
        "[TensorRT-LLM][ERROR] Assertion failed: Return context logit need to build engine with gather_context_logits",
    ),
    (
        "return_generation_logits",
        "gather_generation_logits",
        "[TensorRT-LLM][ERROR] Assertion failed: To return generation logits, gather_generation_logits must be enabled "
        "in ExecutorConfig",
    ),
)


def no_fault(name: str) -> bool:
    """A clean engine: it reproduces no fault."""
    return False


@dataclass
class Sampling:
    top_k: int = 0
    top_p: float = 0.0
    temperature: float = 1.0
    repetition_penalty: float = 1.0
    presence_penalty: float = 0.0
    frequency_penalty: float = 0.0
    min_length: int = 0
    seed: int = 0
    top_p_decay: float = 1.0
    top_p_min: float = 1e-6  # TensorRT-LLM's default (DefaultDecodingParams::getTopPMin)
    top_p_reset_id: int | None = None
    min_p: float = 0.0  # the PyTorch backend's (SamplingParams.min_p): keeps tokens at least min_p x the likeliest's

    @property
    def greedy(self) -> bool:
        return self.top_k == 1 or (self.top_k == 0 and self.top_p <= 0.0)

    @property
    def penalized(self) -> bool:
        return self.repetition_penalty != 1.0 or self.presence_penalty != 0.0 or self.frequency_penalty != 0.0


@dataclass
class GenerationRequest:
    input_ids: list[int]
    max_new_tokens: int
    end_id: int
    pad_id: int = 0
    sampling: Sampling = field(default_factory=Sampling)
    stop_words: list[list[int]] = field(default_factory=list)
    bad_words: list[list[int]] = field(default_factory=list)
    embedding_bias: np.ndarray | None = None
    return_log_probs: bool = False
    lora: object | None = None  # a lora.LoraAdapter, applied to this request's batch row only
    # prompt tuning: prompt id vocab_size + i is row i of this table [rows, hidden] (TensorRT-LLM's PromptTuningConfig)
    prompt_table: torch.Tensor | None = None
    # per prompt token, the id that keys a prompt-table token's KV-cache block (prefix_cache.keyed); empty: none sent
    prompt_table_extra_ids: list[int] = field(default_factory=list)
    top_logprobs: int = 0  # the trtllm-serve stand-in's logprobs=K: the K likeliest tokens of each step, with theirs
    guide: tuple[str, str] | None = None  # guided decoding: (guide type, guide), guided.GUIDE_TYPES
    # speculative decoding's external draft tokens (draft_input_ids): the target keeps those its own choice agrees with,
    # adds its own token at the first that it does not (or after the last), and the request ends there
    draft_tokens: list[int] | None = None
    # with them, the draft's logits [draft tokens, vocab] and the acceptance threshold (None: a uniform draw per token)
    draft_logits: np.ndarray | None = None
    draft_acceptance_threshold: float | None = None
    retention: object | None = None  # retention.Retention: the priority of its KV-cache blocks (prefix_cache.py)
    return_perf_metrics: bool = False  # the executor's RequestPerfMetrics with each response (outputs.perf_metrics)
    return_kv_cache_reuse_stats: bool = False  # their KV-cache block counts alone (families before v0.19.0)
    # num_input_tokens / num_output_tokens with each response (TensorRT-LLM 1.1's backend: outputs.token_counts)
    return_num_input_tokens: bool = False
    return_num_output_tokens: bool = False
    # the model's raw logits: of every prompt position, and of every step (engines built with gather_*_logits)
    return_context_logits: bool = False
    return_generation_logits: bool = False
    arrival_ns: int = field(default_factory=time.monotonic_ns)  # steady clock, as the executor's time points
    # several sequences per request: the executor's child requests (LlmRequest::createChildRequest), sequence k drawn
    # with the request's seed + k, each answered on its own (sequence_index k)
    num_return_sequences: int = 1

    def children(self) -> list[GenerationRequest]:
        """The request's sequences: itself, then a copy per further sequence, its seed raised by its index."""
        return [self] + [
            replace(self, sampling=replace(self.sampling, seed=self.sampling.seed + k))
            for k in range(1, self.num_return_sequences)
        ]


@dataclass
class Sequence:
    """Decoding state of one request; `finish_reason` is set once it is done."""

    request: GenerationRequest
    tokens: list[int] = field(default_factory=list)
    log_probs: list[float] = field(default_factory=list)
    top_log_probs: list[dict[int, float]] = field(default_factory=list)  # per token, when request.top_logprobs > 0
    finish_reason: str | None = None  # length | end_id | stop_words | cancelled
    generator: torch.Generator | None = None
    top_p: float | None = None  # the runtime top-p, once top-p decay has moved it from the request's
    guide: object | None = None  # a guided.Guide, started at the first step of a guided request
    context_logits: torch.Tensor | None = None  # [prompt tokens, vocab], where the request asked for them
    generation_logits: list[torch.Tensor] = field(default_factory=list)  # a [vocab] row per step, where asked for
    scheduled_ns: int = field(default_factory=time.monotonic_ns)  # its first step (the in-flight loop sets it again)
    first_token_ns: int = 0
    last_token_ns: int = 0
    kv: object | None = None  # prefix_cache.KvStats, where a prefix cache looked the prompt's blocks up
    drafted: int = 0  # speculative decoding by the scheduler's drafter: draft tokens proposed, and kept by the target
    accepted: int = 0

    @property
    def finished(self) -> bool:
        return self.finish_reason is not None

    @property
    def cum_log_prob(self) -> float:
        return float(sum(self.log_probs))


def _top(log_probs: torch.Tensor, k: int) -> dict[int, float] | None:
    """The k likeliest tokens of one step and their log probabilities; None when none were asked for."""
    if k <= 0:
        return None
    values, ids = torch.topk(log_probs, min(k, log_probs.numel()))
    return dict(zip(ids.tolist(), values.tolist(), strict=True))


def _ends_with(history: list[int], word: list[int]) -> bool:
    return len(word) <= len(history) and history[len(history) - len(word) :] == word


def cpu_threads() -> int:
    """One thread unless THREADS_ENV says otherwise. SmolLM2-135M decodes no faster on two threads than on one (40 ms a
    token at batch 1; 75 against 86 ms at batch 8), and two servers of two threads on 2 cores spin against each other:
    175 and 467 ms a token, 4-5x slower (2026-11-29). A test session, its xdist workers, a fault campaign's jobs or a
    migration pair run several servers at once; torch's default (a thread per core) slowed every one of them."""
    return max(1, int(os.environ.get(THREADS_ENV) or 1))


class ReferenceEngine:
    """A Hugging Face causal LM loaded from a reference engine directory."""

    lora = None  # a lora.LoraSupport when the engine was built with LoRA
    # guided decoding: a zero-argument callable that gives the guided.GuidedDecoder, where the deployment configures a
    # guided_decoding_backend (called at the first guided request: xgrammar and the tokenizer load then)
    guided_decoder = None
    device = torch.device("cpu")  # set by __init__ from what torch sees
    fault = staticmethod(no_fault)  # which known upstream bug it reproduces (the module docstring)

    def __init__(
        self, engine_dir: str | os.PathLike, lora_cache_bytes: int | None = None, config: dict | None = None, fault=no_fault
    ):
        """`config` ({"dtype", "build_config"}) for a plain Hugging Face checkpoint; else the engine's engine.json."""
        self.fault = fault
        from transformers import AutoModelForCausalLM

        engine_dir = Path(engine_dir)
        config = config or json.loads((engine_dir / "engine.json").read_text())
        self.build_config = config["build_config"]
        self.dtype = getattr(torch, config["dtype"])
        # the first GPU this process sees (the runtime narrows CUDA_VISIBLE_DEVICES to --triton-gpus), else the CPU
        self.device = torch.device("cuda:0" if torch.cuda.is_available() else "cpu")
        if self.device.type == "cpu":
            torch.set_num_threads(cpu_threads())
        self.model = AutoModelForCausalLM.from_pretrained(engine_dir, dtype=self.dtype).eval().to(self.device)
        self.vocab_size = self.model.config.vocab_size
        if "lora_config" in self.build_config:
            self.lora = LoraSupport(self.model, self.build_config["lora_config"], lora_cache_bytes, fault)

    @staticmethod
    def gpu_bytes() -> int:
        """GPU memory this process holds for tensors (0 on a CPU)."""
        return torch.cuda.memory_allocated() if torch.cuda.is_available() else 0

    def describe(self) -> str:
        """Where the model runs, for the server log: "cuda:0 (NVIDIA H200), torch.bfloat16" or "cpu, torch.float32"."""
        where = f"{self.device} ({torch.cuda.get_device_name(self.device)})" if self.device.type == "cuda" else "cpu"
        return f"{where}, {self.dtype}"

    def forward(self, adapters: list, **model_inputs):
        """One model step for a batch whose row i uses LoRA adapter adapters[i] (or none). Ids, masks and
        positions are built on the CPU by the schedulers; they move to the model's device here."""
        if self.lora is not None:
            self.lora.rows = adapters
        moved = {k: v.to(self.device) if isinstance(v, torch.Tensor) else v for k, v in model_inputs.items()}
        return self.model(**moved)

    # -- validation -----------------------------------------------------------------------
    def validate(self, request: GenerationRequest) -> None:
        """Refuse what TensorRT-LLM refuses, in its words; like TensorRT-LLM, cut max_new_tokens to what
        max_seq_len leaves (a warning there, not an error)."""
        n_in, n_out = len(request.input_ids), request.max_new_tokens
        bc = self.build_config
        if n_in == 0:
            raise assertion("!mInputTokenIds.empty()")
        if n_out <= 0:
            raise assertion("mMaxNewTokens > 0")
        s = request.sampling
        for ok, expression in (
            (s.top_k >= 0, "topK.value() >= 0"),
            (s.top_p <= 1.0, "topP.value() <= 1.f"),
            (s.temperature >= 0.0, "temperature.value() >= 0.f"),
            (s.repetition_penalty > 0.0, "repetitionpenalty.value() > 0.f"),
            (s.min_length >= 0, "minTokens.value() >= 0"),
            (s.top_p_decay > 0.0, "topPDecay.value() > 0.f"),
            (s.top_p_decay <= 1.0, "topPDecay.value() <= 1.f"),
            (s.top_p_min >= 0.0, "topPMin.value() >= 0.f"),
            (s.top_p_min <= 1.0, "topPMin.value() <= 1.f"),
            (s.top_p_reset_id is None or s.top_p_reset_id >= 0, "topPResetIds.value() >= 0"),
            (request.num_return_sequences > 0, "numReturnSequences.value() > 0"),
        ):
            if not ok:
                raise assertion(expression)
        if s.penalized and self.fault("penalized_requests_fail_on_a_long_engine"):  # the kernel's shared memory
            raise ExecutorError(
                "Encountered an error in forward function: [TensorRT-LLM][ERROR] Assertion failed: Sequence Length is "
                "too long for the batchApplyRepetitionPenalty kernel (not enough shared memory)"
            )
        if n_in > bc["max_input_len"]:
            raise ExecutorError(
                f"Encountered an error when fetching new request: Prompt length ({n_in}) exceeds maximum input length "
                f"({bc['max_input_len']}). Set log level to info and check TRTGptModel logs for how maximum input "
                "length is set"
            )
        if n_in + n_out > bc["max_seq_len"]:
            request.max_new_tokens = bc["max_seq_len"] - n_in
        self._validate_prompt_table(request)
        # no check in TensorRT-LLM: there an id outside the vocabulary (and the prompt table) indexes past the tables
        rows = 0 if request.prompt_table is None else request.prompt_table.shape[0]
        bad = [t for t in request.input_ids if not 0 <= t < self.vocab_size + rows]
        if bad:
            table = f" and the prompt table's {rows} rows" if rows else ""
            raise RequestError(f"input_ids contain {bad[0]}, outside the vocabulary [0, {self.vocab_size}){table}")
        if request.embedding_bias is not None and request.embedding_bias.size not in (0, self.vocab_size):
            raise RequestError(f"embedding_bias must have {self.vocab_size} entries, got {request.embedding_bias.size}")
        if request.guide is not None:
            self._validate_guide(request.guide)
        for asked, gathered, words in GATHERED_LOGITS:
            if getattr(request, asked) and not bc.get(gathered):
                raise ExecutorError(f"Encountered an error when fetching new request: {words}")
        draft, most = request.draft_tokens or [], bc.get("max_draft_len", 0)
        if len(draft) > most:  # the executor's check (a request's draft against the engine's max_draft_len)
            raise ExecutorError(
                f"Encountered an error when fetching new request: Draft tokens length ({len(draft)}) exceeds maximum "
                f"draft tokens length ({most})."
            )

    def _validate_guide(self, guide: tuple[str, str]) -> None:
        if self.guided_decoder is None:
            raise ExecutorError(f"Encountered an error when fetching new request: {NOT_SET_UP}")
        try:
            self.guided_decoder().compiled(*guide)
        except GuideError as exc:  # the stand-in's words: how TensorRT-LLM answers a guide xgrammar refuses was not read
            raise RequestError(str(exc)) from None

    def _validate_prompt_table(self, request: GenerationRequest) -> None:
        table = request.prompt_table
        if table is None:
            return
        if table.ndim != 2:  # PromptTuningConfig's own check, on the table its batch dimension squeezed off
            raise assertion("Expected prompt embedding table to have shape [vocabSize, hiddenSize]")
        bc = self.build_config
        most = bc.get("max_prompt_embedding_table_size", 0) // bc["max_batch_size"]
        if table.shape[0] > most:  # PromptTuningBuffers::validate, in its words (no space after "size")
            raise ExecutorError(
                f"Encountered an error in forward function: Prompt vocab size{table.shape[0]} is larger than max prompt "
                f"vocab size of {most}. Max prompt vocab size is computed from max_prompt_embedding_table_size / "
                "max_batch_size. "
            )
        hidden = self.model.get_input_embeddings().embedding_dim
        if table.shape[1] != hidden:  # the stand-in's own check: TensorRT-LLM reads the rows as they come
            raise RequestError(f"prompt_embedding_table rows have {table.shape[1]} values; the engine's hidden size is {hidden}")

    def context_inputs(self, requests: list[GenerationRequest], ids: torch.Tensor) -> dict:
        """The context phase's input for `ids` [B, T] (row i: requests[i]'s prompt, left-padded): the ids, or where a
        prompt holds prompt-table ids (>= vocab_size), embeddings: those rows of its table, the model's own for the
        rest, as TensorRT-LLM's prompt tuning looks them up."""
        if all(r.prompt_table is None for r in requests):
            return {"input_ids": ids}
        ids = ids.to(self.device)
        virtual = ids >= self.vocab_size
        if self.fault("prompt_table_ids_inside_the_vocabulary"):  # a vocabulary counted short: the ids are real tokens
            return {"input_ids": torch.where(virtual, ids - VOCAB_SHORT_BY, ids)}
        embeds = self.model.get_input_embeddings()(ids.masked_fill(virtual, 0))
        for i, r in enumerate(requests):
            at = virtual[i].nonzero().squeeze(1)
            if len(at):
                rows = r.prompt_table.to(self.device, embeds.dtype)
                embeds[i, at] = rows[ids[i, at] - self.vocab_size]
        return {"inputs_embeds": embeds}

    # -- one decoding step for a batch -------------------------------------------------------
    def select(self, sequences: list[Sequence], logits: torch.Tensor) -> None:
        """Pick the next token of each unfinished sequence from its row of `logits` [B, V]."""
        logits = logits.float()
        if self.fault("logits_perturbed"):  # every logit off by noise of a fixed seed: a less accurate engine
            noise = torch.randn(logits.shape, generator=torch.Generator().manual_seed(1244))
            logits = logits + PERTURBATION * noise.to(logits.device)
        if self.fault("long_prompt_garbage"):
            long = [i for i, s in enumerate(sequences) if len(s.request.input_ids) > self._long_prompt]
            noise = torch.randn((len(long), logits.shape[1]), generator=torch.Generator().manual_seed(1830))
            logits[long] = logits[long] + GARBAGE * noise.to(logits.device)
        self._gather(sequences, logits)
        simple = [
            i for i, s in enumerate(sequences) if not s.finished and s.request.sampling.greedy and not self._needs_processing(s)
        ]
        if simple:
            rows = logits[simple]
            if self.fault("greedy_not_deterministic"):  # unseeded noise: near ties go either way, run to run
                rows = rows + GREEDY_NOISE * torch.randn_like(rows)
            if self.fault("lora_greedy_not_deterministic"):  # the same noise, on the rows of requests with an adapter
                adapted = torch.tensor([sequences[i].request.lora is not None for i in simple], device=rows.device)
                rows = rows + GREEDY_NOISE * torch.randn_like(rows) * adapted.unsqueeze(1)
            picks = rows.argmax(dim=-1)
            log_probs = torch.log_softmax(rows, dim=-1)
            chosen = log_probs.gather(1, picks.unsqueeze(1)).squeeze(1)
            for j, (i, pick, log_prob) in enumerate(zip(simple, picks.tolist(), chosen.tolist(), strict=True)):
                self._append(sequences[i], pick, log_prob, _top(log_probs[j], sequences[i].request.top_logprobs))
        for i, seq in enumerate(sequences):
            if i in simple or seq.finished:
                continue
            row = self._process(seq, logits[i].to("cpu", copy=True))  # penalties and sampling on the CPU
            token = self._accept_by_logits(seq, row) if self._by_logits(seq) else self._sample(seq, row, slot=i)
            log_probs = torch.log_softmax(row, dim=-1)
            self._append(seq, token, float(log_probs[token]), _top(log_probs, seq.request.top_logprobs))

    @torch.inference_mode()
    def _gather(self, sequences: list[Sequence], logits: torch.Tensor) -> None:
        """Keep the logits a request asked for: each step's row as the model gave it (before biases, penalties and
        sampling), and at its first step, its context phase's logits of every prompt position (a forward of its prompt
        alone: on the CPU in float32 the same values as its row of the batch's prefill)."""
        for i, seq in enumerate(sequences):
            r = seq.request
            if seq.finished:
                continue
            if r.return_context_logits and not seq.tokens and seq.context_logits is None:
                out = self.forward([r.lora], **self.context_inputs([r], torch.tensor([r.input_ids])), use_cache=False)
                seq.context_logits = out.logits[0].float().cpu()
            if r.return_generation_logits:
                seq.generation_logits.append(logits[i].to("cpu", copy=True))

    def _needs_processing(self, seq: Sequence) -> bool:
        r = seq.request
        return bool(
            r.bad_words
            or r.sampling.penalized
            or (r.embedding_bias is not None and r.embedding_bias.size)
            or len(seq.tokens) < r.sampling.min_length
            or r.guide is not None
            or (r.sampling.temperature == 0 and self.fault("temperature_zero_not_greedy"))
            or self._by_logits(seq)
        )

    @staticmethod
    def _by_logits(seq: Sequence) -> bool:
        """At a draft token's position, with the draft's logits: the target accepts by probability."""
        r = seq.request
        return r.draft_logits is not None and len(seq.tokens) < len(r.draft_tokens or [])

    def _process(self, seq: Sequence, row: torch.Tensor) -> torch.Tensor:
        r, s = seq.request, seq.request.sampling
        if r.embedding_bias is not None and r.embedding_bias.size:
            row += torch.from_numpy(np.asarray(r.embedding_bias, dtype=np.float32))
        if s.penalized and not (self.fault("penalties_ignored") or self.fault("repetition_penalty_ignored")):
            history = [t for t in r.input_ids if t < self.vocab_size] + seq.tokens  # not prompt-table ids
            ids = torch.tensor(sorted(set(history)), dtype=torch.long)
            if s.repetition_penalty != 1.0:
                vals = row[ids]
                row[ids] = torch.where(vals > 0, vals / s.repetition_penalty, vals * s.repetition_penalty)
            if seq.tokens and (s.presence_penalty or s.frequency_penalty):
                gen_ids, counts = np.unique(np.asarray(seq.tokens), return_counts=True)
                gen_ids = torch.from_numpy(gen_ids).long()
                row[gen_ids] -= s.presence_penalty + s.frequency_penalty * torch.from_numpy(counts).float()
        # min_length_ignored: min_length is taken and never holds the end back
        if len(seq.tokens) < s.min_length and 0 <= r.end_id < row.numel() and not self.fault("min_length_ignored"):
            row[r.end_id] = NEG_INF
        history = r.input_ids + seq.tokens
        for word in r.bad_words:
            if word and _ends_with(history, word[:-1]) and 0 <= word[-1] < row.numel():
                row[word[-1]] = NEG_INF
        if r.guide is not None:  # after the biases and penalties, before temperature: GuidedDecoder's place
            seq.guide = seq.guide or self.guided_decoder().start(*r.guide)
            seq.guide.mask(row)
        if not s.greedy and s.temperature > 0:
            row /= s.temperature
        return row

    def _accept_by_logits(self, seq: Sequence, row: torch.Tensor) -> int:
        """TensorRT-LLM's acceptDraftTokensByLogits at the draft token d of this position: the target's probabilities p
        (its sampling's: one-hot where greedy, else over its top-k/top-p set) against the draft's q = softmax of its
        logits; d is kept when p[d] > threshold * q[d] (the request's draft_acceptance_threshold, else a uniform draw),
        else the token is drawn from max(p - q, 0) normalized, which never gives d."""
        r = seq.request
        draft = r.draft_tokens[len(seq.tokens)]
        greedy = r.sampling.greedy or r.sampling.temperature == 0
        p = F.one_hot(row.argmax(), row.numel()).float() if greedy else torch.softmax(self._filtered(seq, row), dim=-1)
        q = torch.softmax(torch.from_numpy(r.draft_logits[len(seq.tokens)]), dim=-1)
        generator = self._generator(seq, 0)
        threshold = r.draft_acceptance_threshold
        threshold = float(torch.rand(1, generator=generator)) if threshold is None else threshold
        if self.fault("draft_logits_ignored"):  # verified by comparison, as if no logits had come
            return self._sample(seq, row)
        if p[draft] > threshold * q[draft]:
            return draft
        corrected = (p - q).clamp(min=0)
        if corrected.sum() <= 0:  # q >= p everywhere (a draft as likely as the target): the kernel divides by 0; draw p
            corrected = p
        return int(torch.multinomial(corrected / corrected.sum(), 1, generator=generator))

    def _generator(self, seq: Sequence, slot: int) -> torch.Generator:
        if seq.generator is None:
            s = seq.request.sampling
            # seed_follows_batch_slot: a seed read by the row's batch slot, not by the request's own index
            seed = s.seed + slot if self.fault("seed_follows_batch_slot") else s.seed
            seq.generator = torch.Generator().manual_seed(seed)
        return seq.generator

    def _filtered(self, seq: Sequence, row: torch.Tensor) -> torch.Tensor:
        """The logits the sampler draws from: top-k, then top-p (the runtime top-p, once decayed), then min-p."""
        s = seq.request.sampling
        if s.top_k > 0:
            kth = torch.topk(row, min(s.top_k, row.numel())).values[-1]
            row = row.masked_fill(row < kth, NEG_INF)
        top_p = s.top_p if seq.top_p is None else seq.top_p
        if 0.0 < top_p < 1.0:  # top_p <= 0: none (tensorrtllm_backend drops it)
            sorted_logits, order = torch.sort(row, descending=True)
            cumulative = torch.softmax(sorted_logits, dim=-1).cumsum(dim=-1)
            drop = cumulative - torch.softmax(sorted_logits, dim=-1) >= top_p  # keep the token that crosses top_p
            row = row.clone()
            row[order[drop]] = NEG_INF
        if s.min_p > 0.0:
            probs = torch.softmax(row, dim=-1)
            row = row.masked_fill(probs < s.min_p * probs.max(), NEG_INF)
        return row

    def _sample(self, seq: Sequence, row: torch.Tensor, slot: int = 0) -> int:
        """`slot`: the sequence's row in the batch it is decoded in."""
        s = seq.request.sampling
        # temperature_zero_not_greedy: temperature 0 is not passed on, so the row is sampled at the default temperature
        if not (s.temperature == 0 and self.fault("temperature_zero_not_greedy")) and (s.greedy or s.temperature == 0):
            return int(row.argmax())
        top_p = s.top_p if seq.top_p is None else seq.top_p
        row = self._filtered(seq, row)
        token = int(torch.multinomial(torch.softmax(row, dim=-1), 1, generator=self._generator(seq, slot)))
        # top-p decay lives in the top-p layer, which TensorRT-LLM skips where top_k > 0 (setTopPRuntimeArgs);
        # top_p_decay_dropped: the three fields never reach the sampler (TensorRT-LLM#16184's PyTorch backend)
        if s.top_k == 0 and not self.fault("top_p_decay_dropped"):
            seq.top_p = s.top_p if token == s.top_p_reset_id else max(top_p * s.top_p_decay, s.top_p_min)
        return token

    @property
    def _long_prompt(self) -> int:
        return int(LONG_PROMPT_SHARE * self.build_config["max_input_len"])

    def _append(self, seq: Sequence, token: int, log_prob: float, top: dict[int, float] | None = None) -> None:
        r = seq.request
        seq.last_token_ns = time.monotonic_ns()
        seq.first_token_ns = seq.first_token_ns or seq.last_token_ns
        if seq.tokens and self.fault("generates_one_token_repeated"):  # every token after the first is the first
            token = seq.tokens[0]
        # draft_tokens_accepted_unverified: each draft token is taken as it is, whatever the target chose there
        if r.draft_tokens and len(seq.tokens) < len(r.draft_tokens) and self.fault("draft_tokens_accepted_unverified"):
            token = r.draft_tokens[len(seq.tokens)]
        if top is not None and token != r.end_id:
            seq.top_log_probs.append({**top, token: log_prob})  # the chosen token's too, as TensorRT-LLM's logprobs
        if seq.guide is not None:
            seq.guide.accept(token)
        if token == r.end_id and not self.fault("end_id_ignored"):
            seq.finish_reason = "end_id"
            if self.fault("end_id_pads_output"):  # the end token returned, repeated up to max_new_tokens
                pad = r.max_new_tokens - len(seq.tokens)
                seq.tokens.extend([token] * pad)
                seq.log_probs.extend([0.0] * pad)
            return
        seq.tokens.append(token)
        seq.log_probs.append(log_prob)
        if r.draft_tokens and self._verified(seq, r.draft_tokens):
            return
        history = r.input_ids + seq.tokens
        if r.stop_words and self.fault("stop_words_one_token_late"):  # a stop word seen one step after it completed
            history = history[:-1]
        limit = r.max_new_tokens + 1 if self.fault("max_tokens_off_by_one") else r.max_new_tokens
        if any(word and _ends_with(history, word) for word in r.stop_words):
            seq.finish_reason = "stop_words"
        elif len(seq.tokens) >= limit:
            seq.finish_reason = "length"

    def _verified(self, seq: Sequence, draft: list[int]) -> bool:
        """The step's token against the draft token of its position: agreeing, the draft goes on; otherwise the token is
        the target's own and the request ends (as after the last draft token). Returns whether it ended."""
        at = len(seq.tokens) - 1
        if at < len(draft) and seq.tokens[at] == draft[at]:
            return False
        seq.finish_reason = "length"
        return True

    @property
    def prefill_alone(self) -> bool:
        """On a GPU each request's context phase runs alone, unpadded, as TensorRT-LLM's does: half-precision kernels
        over a left-padded batch would give another first token than the request alone (engines.cuda.lock measures
        it). On a CPU float32 a padded batch is exact, and faster."""
        return self.device.type == "cuda"

    @torch.inference_mode()
    def prefill_each(self, requests: list[GenerationRequest]):
        """(last logits [B, V], KV cache left-padded to one width, attention mask, next positions) of the requests'
        context phases, each run alone."""
        outs = [
            self.forward([r.lora], **self.context_inputs([r], torch.tensor([r.input_ids])), use_cache=True, logits_to_keep=1)
            for r in requests
        ]
        width = max(len(r.input_ids) for r in requests)
        cache = outs[0].past_key_values
        for n, layer in enumerate(cache.layers):
            layer.keys = torch.cat(
                [
                    F.pad(o.past_key_values.layers[n].keys, (0, 0, width - len(r.input_ids), 0))
                    for o, r in zip(outs, requests, strict=True)
                ]
            )
            layer.values = torch.cat(
                [
                    F.pad(o.past_key_values.layers[n].values, (0, 0, width - len(r.input_ids), 0))
                    for o, r in zip(outs, requests, strict=True)
                ]
            )
        mask = torch.zeros((len(requests), width), dtype=torch.long)
        for i, r in enumerate(requests):
            mask[i, width - len(r.input_ids) :] = 1
        positions = (mask.cumsum(-1) - 1).clamp(min=0)
        return torch.cat([o.logits[:, -1, :] for o in outs]), cache, mask, positions

    # -- static batching (gpt_model_type V1) -------------------------------------------------
    @torch.inference_mode()
    def generate_static(self, requests: list[GenerationRequest], on_step=None) -> list[Sequence]:
        """Run one static batch: all sequences start together and the batch runs until the last ends.
        `on_step(sequences, context)` follows every step (the first is the context phase)."""
        on_step = on_step or (lambda sequences, context: None)
        sequences = [Sequence(r) for r in requests]
        if not sequences:
            return sequences
        adapters = [r.lora for r in requests]
        if self.prefill_alone:
            logits, cache, mask, positions = self.prefill_each(requests)
        else:
            width = max(len(r.input_ids) for r in requests)
            ids = torch.zeros((len(requests), width), dtype=torch.long)
            mask = torch.zeros((len(requests), width), dtype=torch.long)
            for i, r in enumerate(requests):  # left padding keeps every last token in the last column
                ids[i, width - len(r.input_ids) :] = torch.tensor(r.input_ids)
                mask[i, width - len(r.input_ids) :] = 1
            positions = (mask.cumsum(-1) - 1).clamp(min=0)
            out = self.forward(
                adapters,
                **self.context_inputs(requests, ids),
                attention_mask=mask,
                position_ids=positions,
                use_cache=True,
                logits_to_keep=1,
            )
            logits, cache = out.logits[:, -1, :], out.past_key_values
        self.select(sequences, logits)
        on_step(sequences, True)
        last = positions[:, -1:]
        while not all(s.finished for s in sequences):
            step = torch.tensor([[s.tokens[-1] if s.tokens else r.pad_id] for s, r in zip(sequences, requests, strict=True)])
            mask = torch.cat([mask, torch.ones((len(requests), 1), dtype=torch.long)], dim=1)
            last = last + 1
            out = self.forward(
                adapters, input_ids=step, attention_mask=mask, position_ids=last, past_key_values=cache, use_cache=True
            )
            cache = out.past_key_values
            self.select(sequences, out.logits[:, -1, :])
            on_step(sequences, False)
        return sequences
