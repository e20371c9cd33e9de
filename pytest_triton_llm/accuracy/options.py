"""The accuracy suite's options (--accuracy-*): declared, checked and exposed as typed settings."""

from __future__ import annotations

from dataclasses import dataclass

import pytest

from ..usage import OptionError
from .drift import check_paths


def add_options(group) -> None:
    group.addoption(
        "--accuracy-dataset", metavar="PATH",
        help="local CNN/DailyMail: MLPerf cnn_eval.json, or JSONL/parquet with article/highlights "
        "(default: the Hub's cnn_dailymail 3.0.0)",
    )  # fmt: skip
    group.addoption("--accuracy-split", metavar="NAME", default="validation", help="Hub split (default: validation)")
    group.addoption(
        "--accuracy-samples", metavar="N", type=int,
        help="use the first N articles (default: all of a local file, 100 from the Hub)",
    )  # fmt: skip
    group.addoption("--accuracy-save", metavar="PATH", help="save every article's output with engine and server identity")
    group.addoption("--accuracy-baseline", metavar="PATH", help="compare outputs with a file saved by --accuracy-save")
    group.addoption(
        "--accuracy-min-exact-match", metavar="PCT", type=float, default=90.0,
        help="least share of articles identical to the baseline (default: 90)",
    )  # fmt: skip
    group.addoption(
        "--accuracy-min-rouge-l", metavar="PCT", type=float, default=90.0,
        help="least mean ROUGE-L between outputs and baseline outputs (default: 90)",
    )  # fmt: skip


@dataclass(frozen=True)
class AccuracyOptions:
    dataset: str | None  # None: the Hub
    split: str
    samples: int | None  # None: all of a local file, 100 from the Hub
    save: str | None
    baseline: str | None
    min_exact_match: float
    min_rouge_l: float

    HUB_SAMPLES = 100

    @classmethod
    def from_config(cls, config: pytest.Config) -> AccuracyOptions:
        opt = config.option
        options = cls(opt.accuracy_dataset, opt.accuracy_split, opt.accuracy_samples, opt.accuracy_save,
                      opt.accuracy_baseline, opt.accuracy_min_exact_match, opt.accuracy_min_rouge_l)  # fmt: skip
        if options.samples is not None and options.samples <= 0:
            raise OptionError("--accuracy-samples must be > 0")
        check_paths(options.save, options.baseline)  # a baseline is readable, and never overwritten
        return options

    @property
    def articles(self) -> int | None:
        """How many articles to load."""
        return self.HUB_SAMPLES if self.dataset is None and self.samples is None else self.samples
