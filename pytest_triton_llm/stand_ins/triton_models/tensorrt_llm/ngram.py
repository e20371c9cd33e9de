"""Prompt-lookup (NGram) speculative decoding's drafter, as TensorRT-LLM's PyTorch flow drafts (speculative_config
decoding_type NGram; tensorrt_llm/_torch/speculative/ngram.py, NGramPoolManager.get_draft_tokens, read at 2026 main).

Before each generation step of a request, its tokens so far (prompt and answer) update a pool that maps each pattern
(its last 1..max_matching_ngram_size tokens at some position) to the tokens that followed it there (up to
max_draft_len); the draft is the match of the longest pattern that ends the sequence: the oldest match or the newest,
of one pool for all requests or of the request's own. The target verifies the draft (inflight.py); what this module
decides is only which tokens are proposed. Self-contained: copied beside the stand-ins that speculate.
"""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass
class NGramDrafter:
    max_draft_len: int
    max_matching_ngram_size: int = 4
    is_keep_all: bool = True
    is_use_oldest: bool = True
    is_public_pool: bool = True
    # pattern -> its matches, in insertion order (upstream's OrderedSet); private pools: one such dict per request
    pools: dict = field(default_factory=dict)
    start: dict = field(default_factory=dict)  # per request: where its next pool update begins

    @classmethod
    def from_config(cls, config: dict) -> NGramDrafter:
        """NGramDecodingConfig's fields from model.yaml's speculative_config (decoding_type NGram)."""
        known = {"max_draft_len", "max_matching_ngram_size", "is_keep_all", "is_use_oldest", "is_public_pool"}
        return cls(**{k: v for k, v in config.items() if k in known})

    def draft(self, key: object, prefix: list[int], max_sequence_length: int) -> list[int]:
        """The draft for the request `key` whose tokens so far are `prefix`, of a request that may reach
        max_sequence_length tokens (prompt plus max new tokens): none where no more than one token is left."""
        room = max_sequence_length - 1 - len(prefix)
        if room <= 0:
            return []
        if key not in self.start:
            self.start[key] = 0
            if not self.is_public_pool:
                self.pools[key] = {}
        pool = self.pools if self.is_public_pool else self.pools[key]
        self._update(pool, prefix[self.start[key] :], len(prefix))
        draft: list[int] = []
        for size in range(min(self.max_matching_ngram_size, len(prefix) - 1), 0, -1):
            matches = pool.get(tuple(prefix[-size:]))
            if matches:
                draft = list(matches[0 if self.is_use_oldest else -1])[:room]
                break
        self.start[key] = max(0, len(prefix) - (self.max_draft_len + self.max_matching_ngram_size - 1))
        return draft

    def _update(self, pool: dict, sequence: list[int], prefix_len: int) -> None:
        for size in range(min(self.max_matching_ngram_size, prefix_len - 1), 0, -1):
            for left in range(len(sequence) - size):
                right = min(left + size + self.max_draft_len, len(sequence))
                pattern, match = tuple(sequence[left : left + size]), tuple(sequence[left + size : right])
                matches = pool.get(pattern)
                if matches is None or (not self.is_keep_all and len(match) > len(matches[0])):
                    pool[pattern] = [match]
                elif match not in matches:
                    _drop_shorter(matches, len(match))
                    matches.append(match)

    def forget(self, key: object) -> None:
        """A request ended: a private pool goes with it (upstream's update_resources); a public one stays."""
        self.start.pop(key, None)
        if not self.is_public_pool:
            self.pools.pop(key, None)


def drafter_for(speculative_config: dict | None) -> NGramDrafter | None:
    """The drafter of an LLM API speculative_config (model.yaml, --extra_llm_api_options), None without one. The
    stand-ins draft as the NGram drafter; the modes that need a draft model's weights (draft-target, Eagle3, MTP) they
    cannot load: ValueError saying so."""
    if not speculative_config:
        return None
    kind = str(speculative_config.get("decoding_type", ""))
    if kind.lower() != "ngram":
        raise ValueError(
            f"speculative_config decoding_type {kind!r}: the reference stand-in drafts by prompt lookup only "
            "(decoding_type: NGram); serve the other modes with TensorRT-LLM itself"
        )
    return NGramDrafter.from_config(speculative_config)


def _drop_shorter(matches: list, length: int) -> None:
    """Upstream removes the matches shorter than a new one while iterating over the same OrderedSet (a list inside):
    after each removal its iterator skips the match that moved into the removed one's place. Kept as it is, so that
    the stand-in drafts what TensorRT-LLM drafts."""
    at = 0
    while at < len(matches):
        if len(matches[at]) < length:
            del matches[at]
        at += 1
