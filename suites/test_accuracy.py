"""Accuracy on CNN/DailyMail: ROUGE against the engine's thresholds, and drift against a saved run.

One deployment per engine (the in-flight one, so articles run concurrently). Prompting,
truncation and thresholds come from the engine's [accuracy] table in engines.lock.
"""

from __future__ import annotations

import dataclasses
import datetime as _dt
import time

import pytest

from pytest_triton_llm.accuracy.drift import baseline_entry, compare, describe, load_outputs
from pytest_triton_llm.accuracy.prompting import build_prompt
from pytest_triton_llm.accuracy.rouge import METRICS, rouge_scores
from pytest_triton_llm.terminal import table

pytestmark = pytest.mark.accuracy
CONCURRENCY = 16


@pytest.fixture(scope="session")
def settings(triton_llm_per_engine):
    served = triton_llm_per_engine
    if served.ref.engine.accuracy is None:
        name = served.ref.engine_name
        pytest.fail(f"engine {name} has no [engines.{name}.accuracy] table in engines.lock: add min_rouge1/2/Lsum", pytrace=False)
    return served.ref.engine.accuracy


@pytest.fixture(scope="session")
def summaries(triton_llm_per_engine, settings, cnn, triton_llm_progress, accuracy_outputs):
    """Greedy summaries of every article, saved with --accuracy-save."""
    served = triton_llm_per_engine
    prompts = [build_prompt(a, settings, served.tokenizer, served.ref.engine.max_input_len) for a in cnn.articles]
    start = time.monotonic()
    with triton_llm_progress.step(f"accuracy: summarizing {len(prompts)} articles on {served.id}"):
        outputs = [g.text for g in served.client.generate_many(prompts, settings.max_new_tokens, concurrency=CONCURRENCY)]
    entry = {
        "deployment": served.id,
        "engine": {"name": served.engine.name, "digest": served.engine.digest, "recipe": served.engine.manifest["recipe"]},
        "server": {"version": served.server.version, "binary": served.server.binary},
        "settings": dataclasses.asdict(settings),
        "dataset": {"source": cnn.source, "split": cnn.split, "articles": len(cnn.articles)},
        "created": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
        "seconds": round(time.monotonic() - start, 1),
        "articles": [{"index": i, "id": a.id, "output": o} for i, (a, o) in enumerate(zip(cnn.articles, outputs, strict=True))],
    }
    if accuracy_outputs is not None:
        accuracy_outputs.add(served.id, entry)
        kept = f" (the previous file is kept as {accuracy_outputs.backup})" if accuracy_outputs.backup else ""
        triton_llm_progress.say(f"accuracy: outputs of {served.id} saved to {accuracy_outputs.path}{kept}")
    return entry


def test_rouge_meets_the_engines_thresholds(triton_llm_per_engine, settings, cnn, summaries, triton_llm_report):
    outputs = [a["output"] for a in summaries["articles"]]
    assert all(outputs), "some articles got an empty summary"
    scores = rouge_scores(outputs, [a.reference for a in cnn.articles])
    accuracy = {m: scores[m]["mid"] for m in METRICS}
    accuracy.update({f"{m}_ci95": [scores[m]["low"], scores[m]["high"]] for m in METRICS})
    accuracy.update(n_articles=len(outputs), max_new_tokens=settings.max_new_tokens, dataset=cnn.source,
                    seconds=summaries["seconds"])  # fmt: skip
    triton_llm_report.record(triton_llm_per_engine.id, "accuracy", accuracy)
    thresholds = {m: getattr(settings, f"min_{m}") for m in METRICS}
    rows = [[m, f"{scores[m]['mid']:.2f}", f"[{scores[m]['low']:.2f}, {scores[m]['high']:.2f}]", f">= {thresholds[m]:.2f}",
             "ok" if scores[m]["mid"] >= thresholds[m] else "BELOW"] for m in METRICS]  # fmt: skip
    report = "\n".join(table(["metric", "measured", "95% CI", "threshold", ""], rows))
    if not all(scores[m]["mid"] >= thresholds[m] for m in METRICS):
        pytest.fail(f"ROUGE below the thresholds of engine {triton_llm_per_engine.ref.engine_name} "
                    f"({len(outputs)} articles from {cnn.source}):\n{report}", pytrace=False)  # fmt: skip


def test_outputs_match_the_baseline(triton_llm_per_engine, summaries, triton_llm_accuracy_options, triton_llm_report):
    options = triton_llm_accuracy_options
    path = options.baseline
    if path is None:
        pytest.skip("no --accuracy-baseline given: output drift not checked (save a baseline with --accuracy-save)")
    baseline = baseline_entry(load_outputs(path), triton_llm_per_engine.id)
    if baseline is None:
        pytest.fail(f"{path} has no outputs for {triton_llm_per_engine.id}", pytrace=False)
    drift = compare(baseline, summaries)
    triton_llm_report.record(triton_llm_per_engine.id, "accuracy_drift", dict(drift.as_dict(), baseline=str(path)))
    min_exact, min_rouge_l = options.min_exact_match, options.min_rouge_l
    problems = []
    if drift.exact_match_pct < min_exact:
        problems.append(f"{drift.exact_match_pct:.1f}% of outputs identical to the baseline < {min_exact:.1f}%")
    if drift.mean_rouge_l < min_rouge_l:
        problems.append(f"mean ROUGE-L vs baseline {drift.mean_rouge_l:.1f} < {min_rouge_l:.1f}")
    if drift.missing:
        problems.append(f"{len(drift.missing)} baseline articles missing from this run")
    if problems:
        pytest.fail("outputs drifted from the baseline: " + "; ".join(problems) + "\n" + describe(drift, baseline, summaries),
                    pytrace=False)  # fmt: skip
