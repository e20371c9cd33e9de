"""A request as the property matrix states it, whatever the path: the prompt, max_tokens and canonical options
(fixtures/properties.toml's property names), and the answer every path gives back in one shape."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

MODES = ("unary", "streamed", "batched")


@dataclass(frozen=True)
class Ask:
    """What to ask: `options` maps a canonical option to its value. Options: temperature, top_k, top_p, seed,
    min_tokens, repetition_penalty, presence_penalty, frequency_penalty (numbers); stop, bad_words (words); end_id,
    pad_id (token ids); exclude_input, log_probs (bools); bias (token id -> weight); beam (beam-search settings at
    width 1: True); perf_metrics (return_perf_metrics: True); kv_reuse_stats (return_kv_cache_reuse_stats: True);
    token_counts (return_num_input_tokens and return_num_output_tokens: True);
    logits (return_context_logits and return_generation_logits: True); sequences (num_return_sequences, read by the
    path's `sequences`); best_of (the llmapi model's sequences drawn for its one answer); table (words whose
    embeddings are the prompt table's rows) and extra_id (its KV-cache reuse key, 1 unless given); on tensorrt_llm
    only: after (token ids sent after the prompt's), decay (top-p decay and its floor), lookahead (lookahead
    decoding's window, n-gram and verification-set sizes), retention (KV-cache retention ranges: (start, end or -1,
    priority, duration ms or None) each), decode_retention (with retention: the decode phase's (priority, duration ms
    or None)), draft (external draft token ids), draft_logits (with them, their logits [tokens, vocab]) and threshold
    (draft_acceptance_threshold); on the BLS: num_draft_tokens, use_draft_logits (its draft model's logits sent too)."""

    prompt: str
    max_tokens: int | None  # None: left out (on /v1 only: the family's own limit)
    options: tuple[tuple[str, object], ...] = ()

    @classmethod
    def of(cls, prompt: str, max_tokens: int | None, **options) -> Ask:
        return cls(prompt, max_tokens, tuple(sorted(options.items())))

    @property
    def asked(self) -> dict[str, Any]:
        return dict(self.options)


@dataclass
class Answer:
    """One answer: its generated text (the prompt only where the request asked for it back), and where the path says
    them, its token ids, token count, per-token log probs, cumulative log prob and the prompt's token count."""

    text: str
    token_ids: list[int] | None = None
    tokens: int | None = None
    log_probs: list[float] | None = None
    cum_log_prob: float | None = None
    prompt_tokens: int | None = None  # the prompt's token count, where the path reports it (/v1 usage)
    metrics: dict[str, float] | None = None  # return_perf_metrics' outputs of the last response, where it came
    # (num_input_tokens, num_output_tokens) of each response that carried either, where asked for
    counts: list[tuple[int | None, int | None]] | None = None
    context_logits: Any = None  # numpy [prompt tokens, vocab], where asked for and sent
    generation_logits: Any = None  # numpy [steps, vocab] (beam 0), where asked for and sent


class Unanswerable(Exception):
    """The path cannot express the request (a mode it does not serve, an option it has no input for): a skip, with the
    contract's reason."""
