"""ROUGE-1/2/Lsum (with stemming) over summaries, with bootstrap confidence intervals, in percent."""

from __future__ import annotations

import re

import numpy as np

METRICS = ("rouge1", "rouge2", "rougeLsum")
_SENTENCE_END = re.compile(r"(?<=[.!?])\s+")


def _sentences(text: str) -> str:
    """rougeLsum splits on newlines: one sentence per line (a regex split: nltk's punkt needs a download)."""
    return "\n".join(s.strip() for s in _SENTENCE_END.split(text.strip()) if s.strip())


def rouge_scores(predictions: list[str], references: list[str], seed: int = 0) -> dict:
    """{metric: {"mid": %, "low": %, "high": %}} aggregated with rouge-score's BootstrapAggregator."""
    from rouge_score import rouge_scorer, scoring

    scorer = rouge_scorer.RougeScorer(list(METRICS), use_stemmer=True)
    aggregator = scoring.BootstrapAggregator()
    for prediction, reference in zip(predictions, references, strict=True):
        aggregator.add_scores(scorer.score(_sentences(reference), _sentences(prediction)))
    state = np.random.get_state()
    np.random.seed(seed)  # the bootstrap resamples with numpy's global generator: same input, same interval
    try:
        result = aggregator.aggregate()
    finally:
        np.random.set_state(state)
    return {m: {k: round(100 * getattr(result[m], k).fmeasure, 2) for k in ("mid", "low", "high")} for m in METRICS}


def per_article_scores(predictions: list[str], references: list[str]) -> dict[str, list[float]]:
    """{metric: [F-measure in percent, one per article]}: what the verdicts' t tests work on."""
    from rouge_score import rouge_scorer

    scorer = rouge_scorer.RougeScorer(list(METRICS), use_stemmer=True)
    scores: dict[str, list[float]] = {m: [] for m in METRICS}
    for prediction, reference in zip(predictions, references, strict=True):
        result = scorer.score(_sentences(reference), _sentences(prediction))
        for m in METRICS:
            scores[m].append(100 * result[m].fmeasure)
    return scores


def pairwise_rouge_l(a: str, b: str) -> float:
    """ROUGE-L F-measure (percent) between two texts: how far an output moved from its baseline."""
    from rouge_score import rouge_scorer

    return round(100 * rouge_scorer.RougeScorer(["rougeL"], use_stemmer=True).score(a, b)["rougeL"].fmeasure, 2)
