"""Output drift: keep every article's output with the engine and server that made it, and compare
a later run (a new image, a rebuilt engine) with it article by article.

    --accuracy-save outputs.json       write this run's outputs (an existing file is kept as a backup)
    --accuracy-baseline outputs.json   compare with a saved run: each article with itself (paired ROUGE against the
                                       reference summaries, verdicts.py), plus exact-match rate and ROUGE-L per article
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from ..common.files import keep_previous, read_document, write_json
from .rouge import pairwise_rouge_l, per_article_scores
from ..common.errors import TritonLLMError

SCHEMA = 1
KIND = "pytest-triton-llm accuracy outputs"


class DriftError(TritonLLMError, ValueError):
    pass


def load_outputs(path: str | Path) -> dict:
    """A saved outputs file: {"schema", "kind", "deployments": {id: entry}}; one clear error otherwise."""
    return read_document(path, KIND, SCHEMA, "--accuracy-baseline", "--accuracy-save", DriftError)


def check_paths(save: str | None, baseline: str | None) -> None:
    if baseline is not None:
        load_outputs(baseline)
    if save is not None and baseline is not None and Path(save).resolve() == Path(baseline).resolve():
        raise DriftError("--accuracy-save and --accuracy-baseline name the same file: the baseline would be overwritten")


class OutputsWriter:
    """Collects one entry per deployment and rewrites the file atomically after each."""

    def __init__(self, path: str | Path):
        self.path = Path(path)
        self.entries: dict[str, dict] = {}
        self.backup: Path | None = None

    def add(self, deployment_id: str, entry: dict) -> None:
        if not self.entries:  # the first write of this session: never lose an earlier baseline
            self.backup = keep_previous(self.path)
        self.entries[deployment_id] = entry
        write_json(self.path, {"schema": SCHEMA, "kind": KIND, "deployments": self.entries})


def baseline_entry(baseline: dict, deployment_id: str) -> dict | None:
    """The baseline's entry for this deployment; a single-deployment baseline matches any one."""
    entries = baseline["deployments"]
    if deployment_id in entries:
        return entries[deployment_id]
    return next(iter(entries.values())) if len(entries) == 1 else None


@dataclass
class Drift:
    compared: int
    exact_match_pct: float
    mean_rouge_l: float
    missing: list[str] = field(default_factory=list)  # baseline articles this run did not produce
    moved: list[dict] = field(default_factory=list)  # changed articles, most moved first

    def as_dict(self) -> dict:
        return {
            "compared": self.compared,
            "exact_match_pct": self.exact_match_pct,
            "mean_rouge_l": self.mean_rouge_l,
            "changed": len(self.moved),
            "missing": len(self.missing),
        }


def compare(baseline: dict, current: dict) -> Drift:
    before = {a["id"]: a for a in baseline["articles"]}
    now = {a["id"]: a for a in current["articles"]}
    common = [i for i in now if i in before]
    if not common:
        raise DriftError("the baseline holds none of this run's articles: was it saved from the same dataset?")
    scores = {
        i: 100.0 if now[i]["output"] == before[i]["output"] else pairwise_rouge_l(before[i]["output"], now[i]["output"])
        for i in common
    }
    moved = sorted(
        (
            {"id": i, "index": now[i]["index"], "rouge_l": scores[i], "baseline": before[i]["output"], "now": now[i]["output"]}
            for i in common
            if now[i]["output"] != before[i]["output"]
        ),
        key=lambda m: m["rouge_l"],
    )
    return Drift(
        compared=len(common),
        exact_match_pct=round(100 * (len(common) - len(moved)) / len(common), 2),
        mean_rouge_l=round(sum(scores.values()) / len(common), 2),
        missing=[i for i in before if i not in now],
        moved=moved,
    )


def paired_scores(baseline: dict, current: dict, references: dict[str, str]) -> tuple[dict, dict]:
    """Per-article ROUGE of the baseline's and this run's outputs against the reference summaries, over the articles
    both have (in this run's order): the pairs the drift test compares."""
    before = {a["id"]: a["output"] for a in baseline["articles"]}
    common = [a for a in current["articles"] if a["id"] in before and a["id"] in references]
    if len(common) < 2:
        raise DriftError(f"{len(common)} articles in common with the baseline: a paired test needs at least 2")
    refs = [references[a["id"]] for a in common]
    return per_article_scores([before[a["id"]] for a in common], refs), per_article_scores([a["output"] for a in common], refs)


def _clip(text: str, width: int = 110) -> str:
    text = " ".join(text.split())
    return text if len(text) <= width else text[: width - 3] + "..."


def describe(drift: Drift, baseline: dict, current: dict, show: int = 5) -> str:
    """The readable failure: what was compared, and the articles that moved most."""
    lines = [
        f"baseline: engine {baseline['engine']['name']} {baseline['engine']['digest'][:12]} on Triton "
        f"{baseline['server']['version']} ({baseline['deployment']})",
        f"this run: engine {current['engine']['name']} {current['engine']['digest'][:12]} on Triton "
        f"{current['server']['version']} ({current['deployment']})",
        f"{drift.compared} articles compared: {drift.exact_match_pct:.1f}% identical, mean ROUGE-L vs baseline "
        f"{drift.mean_rouge_l:.1f}; {len(drift.moved)} changed",
    ]
    for m in drift.moved[:show]:
        lines += [
            f"  article #{m['index']} ({m['id']}): ROUGE-L {m['rouge_l']:.1f}",
            f"    baseline: {_clip(m['baseline'])}",
            f"    now:      {_clip(m['now'])}",
        ]
    if len(drift.moved) > show:
        lines.append(f"  ... and {len(drift.moved) - show} more")
    if drift.missing:
        lines.append(f"  {len(drift.missing)} baseline articles were not produced in this run")
    return "\n".join(lines)
