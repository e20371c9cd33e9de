"""Articles taken until a ROUGE verdict decides (--accuracy-samples-max): the looks, and summaries made once each.

The first look scores the first --accuracy-samples articles (FIRST_LOOK by default); while a threshold verdict is
inconclusive, the next look doubles them, up to the cap. Each look is held to its share of alpha
(verdicts.significance.sequential_confidence), so that stopping at the first look that decides keeps the rule's alpha."""

from __future__ import annotations

from collections.abc import Callable, Sequence

FIRST_LOOK = 16


def planned_looks(first: int, cap: int) -> list[int]:
    """How many articles each look scores: `first`, doubled until `cap` (the last look scores them all)."""
    counts = [max(1, min(first, cap))]
    while counts[-1] < cap:
        counts.append(min(2 * counts[-1], cap))
    return counts


class Summaries:
    """The outputs of the first n articles, each summarized once by `batch(articles) -> outputs` (a later look asks
    only for the articles the earlier ones did not); `on_more(outputs)` hears every extension (to save them), and
    `entry` is what the caller keeps beside them (the Triton suite's saved record)."""

    def __init__(
        self,
        articles: Sequence,
        batch: Callable[[Sequence], list[str]],
        on_more: Callable[[list[str]], None] | None = None,
        entry: dict | None = None,
    ):
        self.articles, self.batch, self.on_more = articles, batch, on_more
        self.entry = entry if entry is not None else {}
        self.outputs: list[str] = []

    def first(self, n: int) -> list[str]:
        if n > len(self.articles):
            raise ValueError(f"{n} articles asked for, {len(self.articles)} loaded")
        if n > len(self.outputs):
            self.outputs += self.batch(self.articles[len(self.outputs) : n])
            if self.on_more is not None:
                self.on_more(self.outputs)
        return self.outputs[:n]
