"""CNN/DailyMail through `datasets`.

Default: `cnn_dailymail` 3.0.0 from the Hugging Face Hub. A local file (--accuracy-dataset) may be
the MLPerf `cnn_eval.json` format (a JSON list of {instruction, input, output}) or JSONL /
parquet with `article` and `highlights` columns.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from pathlib import Path

from ..common.errors import TritonLLMError

HUB_NAME, HUB_CONFIG = "cnn_dailymail", "3.0.0"


class DatasetError(TritonLLMError, RuntimeError):
    pass


@dataclass(frozen=True)
class Article:
    id: str  # sha256 of the article text: stable across files, orders and splits
    text: str
    reference: str  # the highlights, one sentence per line
    instruction: str | None


@dataclass(frozen=True)
class CnnDataset:
    source: str
    split: str
    articles: list[Article]


def _article(text: str, reference: str, instruction: str | None) -> Article:
    return Article(hashlib.sha256(text.encode()).hexdigest()[:16], text, reference, instruction)


def _rows_to_articles(rows, source: str) -> list[Article]:
    columns = set(rows.column_names)
    if {"input", "output"} <= columns:  # MLPerf cnn_eval.json
        has_instruction = "instruction" in columns
        return [_article(r["input"], r["output"], r["instruction"] if has_instruction else None) for r in rows]
    if {"article", "highlights"} <= columns:
        return [_article(r["article"], r["highlights"], None) for r in rows]
    raise DatasetError(
        f"{source}: columns {sorted(columns)} are neither MLPerf's (instruction, input, output) "
        "nor CNN/DailyMail's (article, highlights)"
    )


def load_cnn_dailymail(path: str | None, split: str = "validation", samples: int | None = None) -> CnnDataset:
    """The first `samples` articles (all when None) of a local file, or of the Hub's split."""
    import datasets

    datasets.disable_progress_bars()
    if path is not None:
        file = Path(path).expanduser()
        if not file.is_file():
            raise DatasetError(f"--accuracy-dataset {path}: no such file")
        kind = {".json": "json", ".jsonl": "json", ".parquet": "parquet"}.get(file.suffix)
        if kind is None:
            raise DatasetError(f"--accuracy-dataset {path}: expected .json (MLPerf cnn_eval), .jsonl or .parquet")
        rows = datasets.load_dataset(kind, data_files=str(file), split="train")
        source = str(file)
    else:
        try:
            rows = datasets.load_dataset(HUB_NAME, HUB_CONFIG, split=split)
        except (ConnectionError, OSError, ValueError) as exc:
            raise DatasetError(
                f"cannot load {HUB_NAME} {HUB_CONFIG} ({split}) from the Hugging Face Hub ({type(exc).__name__}); "
                "pass a local copy with --accuracy-dataset PATH: MLPerf cnn_eval.json, or JSONL/parquet with "
                "article and highlights"
            ) from None
        source = f"hf://{HUB_NAME}/{HUB_CONFIG}"
    if samples is not None:
        rows = rows.select(range(min(samples, len(rows))))
    return CnnDataset(source, split if path is None else "file", _rows_to_articles(rows, source))
