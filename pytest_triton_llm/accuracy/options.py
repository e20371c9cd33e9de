"""The accuracy suite's options (--accuracy-*): declared, checked and exposed as typed settings."""

from __future__ import annotations

from dataclasses import dataclass

import pytest

from ..common.usage import OptionError
from .drift import check_paths
from .sequential import FIRST_LOOK, planned_looks
from .verdicts import VerdictRule


def add_options(group) -> None:
    _add_article_options(group)
    _add_verdict_options(group)


def _add_article_options(group) -> None:
    """Which articles, how many, and where their outputs are saved or compared."""
    group.addoption(
        "--accuracy-dataset",
        metavar="PATH",
        help="local CNN/DailyMail: MLPerf cnn_eval.json, or JSONL/parquet with article/highlights "
        "(default: the Hub's cnn_dailymail 3.0.0)",
    )
    group.addoption("--accuracy-split", metavar="NAME", default="validation", help="Hub split (default: validation)")
    group.addoption(
        "--accuracy-samples",
        metavar="N",
        type=int,
        help="use the first N articles (default: all of a local file, 100 from the Hub)",
    )
    group.addoption(
        "--accuracy-samples-max",
        metavar="N",
        type=int,
        help="take articles until the ROUGE threshold verdict decides, up to N: the first look scores --accuracy-samples "
        "(16 by default), each further look twice as many, each look at its share of --accuracy-alpha "
        "(default: one look at every article loaded)",
    )
    group.addoption("--accuracy-save", metavar="PATH", help="save every article's output with engine and server identity")
    group.addoption("--accuracy-baseline", metavar="PATH", help="compare outputs with a file saved by --accuracy-save")


def _add_verdict_options(group) -> None:
    """How the ROUGE verdicts decide."""
    group.addoption(
        "--accuracy-alpha",
        metavar="P",
        type=float,
        default=0.05,
        help="chance of failing a run whose true ROUGE meets its threshold or did not drop (default: 0.05)",
    )
    group.addoption(
        "--accuracy-power",
        metavar="P",
        type=float,
        default=0.8,
        help="chance the drift test catches a drop of twice the allowed one; the run says when its sample is too small "
        "(default: 0.8)",
    )
    group.addoption(
        "--accuracy-max-drop",
        metavar="POINTS",
        type=float,
        help="ROUGE points a run may lose against --accuracy-baseline before a significant drop fails "
        "(default: the lock's [engines.X.accuracy] max_drop, 1.0)",
    )
    group.addoption(
        "--accuracy-strict",
        action="store_true",
        help="fail, instead of warn, when the articles cannot tell a score from its threshold (inconclusive), or can "
        "only catch more than twice the allowed drop in a paired drift gate (underpowered)",
    )
    group.addoption(
        "--accuracy-min-exact-match",
        metavar="PCT",
        type=float,
        help="also require this share of outputs identical to the baseline (default: not required)",
    )
    group.addoption(
        "--accuracy-min-rouge-l",
        metavar="PCT",
        type=float,
        help="also require this mean ROUGE-L between outputs and their baseline outputs (default: not required)",
    )


@dataclass(frozen=True)
class AccuracyOptions:
    dataset: str | None  # None: the Hub
    split: str
    samples: int | None  # None: all of a local file, 100 from the Hub
    save: str | None
    baseline: str | None
    min_exact_match: float | None
    min_rouge_l: float | None
    alpha: float = 0.05
    power: float = 0.8
    max_drop: float | None = None  # None: the lock's
    strict: bool = False
    samples_max: int | None = None  # --accuracy-samples-max: articles taken until the verdict decides, up to this

    HUB_SAMPLES = 100

    @classmethod
    def from_config(cls, config: pytest.Config) -> AccuracyOptions:
        opt = config.option
        options = cls(
            opt.accuracy_dataset,
            opt.accuracy_split,
            opt.accuracy_samples,
            opt.accuracy_save,
            opt.accuracy_baseline,
            opt.accuracy_min_exact_match,
            opt.accuracy_min_rouge_l,
            opt.accuracy_alpha,
            opt.accuracy_power,
            opt.accuracy_max_drop,
            opt.accuracy_strict,
            opt.accuracy_samples_max,
        )
        if options.samples is not None and options.samples <= 0:
            raise OptionError("--accuracy-samples must be > 0")
        if options.samples_max is not None and options.samples_max < (options.samples or 1):
            raise OptionError(
                f"--accuracy-samples-max {options.samples_max} must be at least --accuracy-samples ({options.samples}): "
                "it caps the articles an undecided verdict takes"
            )
        if not 0 < options.alpha < 0.5:
            raise OptionError(f"--accuracy-alpha must be in (0, 0.5), e.g. 0.05; got {options.alpha}")
        if not 0.5 <= options.power < 1:
            raise OptionError(f"--accuracy-power must be in [0.5, 1), e.g. 0.8; got {options.power}")
        if options.max_drop is not None and options.max_drop < 0:
            raise OptionError(f"--accuracy-max-drop must be >= 0 ROUGE points; got {options.max_drop}")
        check_paths(options.save, options.baseline)  # a baseline is readable, and never overwritten
        return options

    def rule(self, settings) -> VerdictRule:
        """The verdict rule for an engine's [accuracy] settings: these options over the lock's max_drop."""
        max_drop = settings.max_drop if self.max_drop is None else self.max_drop
        return VerdictRule(self.alpha, self.power, max_drop, self.strict)

    @property
    def articles(self) -> int | None:
        """How many articles to load (None: all of a local file)."""
        if self.samples_max is not None:
            return self.samples_max
        return self.HUB_SAMPLES if self.dataset is None and self.samples is None else self.samples

    def looks(self, loaded: int) -> list[int]:
        """The articles each look of the threshold verdict scores, of `loaded`: one look at all of them, or with
        --accuracy-samples-max the first --accuracy-samples (16) doubled up to all."""
        if self.samples_max is None:
            return [loaded]
        return planned_looks(self.samples or FIRST_LOOK, loaded)
