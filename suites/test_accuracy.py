"""Accuracy on CNN/DailyMail: ROUGE against the engine's thresholds, and drift against a saved run.

One deployment per engine (the in-flight one, so articles run concurrently). Prompting,
truncation and thresholds come from the engine's [accuracy] table in engines.lock. Verdicts are
statistical (accuracy/verdicts.py): a threshold fails only when the articles are significantly below
it, drift only on a significant drop beyond max_drop; where the sample cannot tell, a warning says so.

Over /v1 (class TestOverV1, run with --openai-url):
Accuracy of an OpenAI-compatible endpoint (--openai-url) on CNN/DailyMail: ROUGE against the thresholds of the
engine whose checkpoint it serves (--openai-engine, its [accuracy] table in the lock), judged as the accuracy suite
judges a Triton deployment.

Each article goes as the user message of /v1/chat/completions, so the server renders its own chat template as users'
clients call it; an engine whose prompt is "plain" sends the same text to /v1/completions. Articles are cut as on
Triton, by the endpoint's tokenizer (--tokenizer, else the served model's id) and the engine's max_input_len."""

from __future__ import annotations

import dataclasses
import datetime as _dt
import time
import pytest
from pytest_triton_llm.accuracy.judge import rouge_meets_the_thresholds, underpowered_drop_gate
from pytest_triton_llm.accuracy.drift import baseline_entry, compare, describe, load_outputs, paired_scores
from pytest_triton_llm.accuracy.prompting import build_prompt
from pytest_triton_llm.accuracy.rouge import per_article_scores
from pytest_triton_llm.accuracy.sequential import Summaries
from pytest_triton_llm.accuracy.verdicts import (
    DRIFT_HEADER,
    as_report,
    drift_rows,
    judge_drift,
    planned_detectable_drop,
)
from pytest_triton_llm.common.tables import table
from pytest_triton_llm.accuracy.v1_summaries import V1_ENDPOINT, v1_summaries

# an engine of dummy weights (lock source "dummy") is skipped at collection, before anything is built or served
pytestmark = [pytest.mark.accuracy, pytest.mark.triton_llm_trained_weights("ROUGE needs trained weights")]


CONCURRENCY = 16


@pytest.fixture(scope="session")
def settings(triton_llm_per_engine):
    served = triton_llm_per_engine
    if served.ref.engine.accuracy is None:
        name = served.ref.engine_name
        pytest.fail(f"engine {name} has no [engines.{name}.accuracy] table in engines.lock: add min_rouge1/2/Lsum", pytrace=False)
    return served.ref.engine.accuracy


@pytest.fixture(scope="session")
def summaries(triton_llm_per_engine, settings, cnn, triton_llm_progress, accuracy_outputs, triton_llm_accuracy_options):
    """Greedy summaries, made as the verdicts ask for them (every article, or look by look with
    --accuracy-samples-max); with --accuracy-save, of every article loaded, at once, and saved. With a baseline, what
    the drift test can catch is said first, so an underpowered sample shows before the articles are run."""
    served = triton_llm_per_engine
    say_drift_plan(served.id, cnn, triton_llm_accuracy_options, settings, triton_llm_progress)
    entry = {
        "deployment": served.id,
        "engine": {"name": served.engine.name, "digest": served.engine.digest, "recipe": served.engine.manifest["recipe"]},
        "server": {"version": served.server.version, "binary": served.server.binary},
        "settings": dataclasses.asdict(settings),
        "dataset": {"source": cnn.source, "split": cnn.split, "articles": 0},
        "created": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
        "seconds": 0.0,
        "articles": [],
    }

    def batch(articles) -> list[str]:
        prompts = [build_prompt(a, settings, served.tokenizer, served.ref.engine.max_input_len) for a in articles]
        start = time.monotonic()
        with triton_llm_progress.step(f"accuracy: summarizing {len(prompts)} articles on {served.id}"):
            outputs = [g.text for g in served.client.generate_many(prompts, settings.max_new_tokens, concurrency=CONCURRENCY)]
        entry["seconds"] = round(entry["seconds"] + time.monotonic() - start, 1)
        return outputs

    def keep(outputs: list[str]) -> None:
        entry["articles"] = [
            {"index": i, "id": a.id, "output": o}
            for i, (a, o) in enumerate(zip(cnn.articles[: len(outputs)], outputs, strict=True))
        ]
        entry["dataset"]["articles"] = len(outputs)
        if accuracy_outputs is not None:
            accuracy_outputs.add(served.id, entry)
            kept = f" (the previous file is kept as {accuracy_outputs.backup})" if accuracy_outputs.backup else ""
            triton_llm_progress.say(f"accuracy: outputs of {served.id} saved to {accuracy_outputs.path}{kept}")

    made = Summaries(cnn.articles, batch, keep, entry)  # entry: what --accuracy-save writes and the drift test compares
    if accuracy_outputs is not None:  # --accuracy-save keeps every article's output, whatever the verdicts take
        made.first(len(cnn.articles))
    return made


def say_drift_plan(deployment_id: str, cnn, options, settings, progress) -> None:
    baseline = baseline_entry(load_outputs(options.baseline), deployment_id) if options.baseline else None
    references = {a.id: a.reference for a in cnn.articles}
    articles = [a for a in baseline["articles"] if a["id"] in references] if baseline else []
    if len(articles) < 2:
        return  # the drift test says what is missing
    rule = options.rule(settings)
    scores = per_article_scores([a["output"] for a in articles], [references[a["id"]] for a in articles])
    n, drop = planned_detectable_drop(scores, rule)
    progress.say(
        f"accuracy drift plan: {n} articles paired with the baseline; at alpha {rule.alpha:g} and power "
        f"{rule.power:g} they catch a drop of {drop:.2f} ROUGE points or more (allowed: {rule.max_drop:g}; "
        "from the baseline's spread, as if the runs were unrelated: the measured figure follows the run)"
    )


def test_rouge_meets_the_engines_thresholds(
    triton_llm_per_engine, settings, cnn, summaries, triton_llm_report, triton_llm_accuracy_options
):
    served = triton_llm_per_engine

    def record(accuracy: dict) -> None:
        triton_llm_report.record(served.id, "accuracy", dict(accuracy, seconds=summaries.entry["seconds"]))

    where = f"engine {served.ref.engine_name}"
    rouge_meets_the_thresholds(summaries, cnn, settings, triton_llm_accuracy_options, record, where)


def test_outputs_match_the_baseline(
    triton_llm_per_engine, settings, cnn, summaries, triton_llm_accuracy_options, triton_llm_report, triton_llm_progress
):
    options = triton_llm_accuracy_options
    path = options.baseline
    if path is None:
        pytest.skip("no --accuracy-baseline given: output drift not checked (save a baseline with --accuracy-save)")
    baseline = baseline_entry(load_outputs(path), triton_llm_per_engine.id)
    if baseline is None:
        pytest.fail(f"{path} has no outputs for {triton_llm_per_engine.id}", pytrace=False)
    summaries.first(len(cnn.articles))  # the drift pairs every article loaded, whatever the threshold verdict took
    drift = compare(baseline, summaries.entry)
    rule = options.rule(settings)
    before, now = paired_scores(baseline, summaries.entry, {a.id: a.reference for a in cnn.articles})
    results = judge_drift(before, now, rule)
    triton_llm_report.record(
        triton_llm_per_engine.id,
        "accuracy_drift",
        dict(
            drift.as_dict(),
            baseline=str(path),
            alpha=rule.alpha,
            power=rule.power,
            max_drop=rule.max_drop,
            paired=as_report(results),
        ),
    )
    detectable = max(r.detectable_drop for r in results.values())
    triton_llm_progress.say(
        f"accuracy drift: {drift.compared} paired articles; at alpha {rule.alpha:g} and power "
        f"{rule.power:g} the smallest drop they can catch is {detectable:.2f} ROUGE points "
        f"(allowed: {rule.max_drop:g})"
    )
    paired = "\n".join(table(DRIFT_HEADER, drift_rows(results)))
    problems = [
        f"{m} dropped {r.mean_drop:.2f} points, significantly more than the {r.max_drop:g} allowed (p {r.p_value:.3g})"
        for m, r in results.items()
        if r.verdict == "fail"
    ]
    if options.min_exact_match is not None and drift.exact_match_pct < options.min_exact_match:
        problems.append(f"{drift.exact_match_pct:.1f}% of outputs identical to the baseline < {options.min_exact_match:.1f}%")
    if options.min_rouge_l is not None and drift.mean_rouge_l < options.min_rouge_l:
        problems.append(f"mean ROUGE-L vs baseline {drift.mean_rouge_l:.1f} < {options.min_rouge_l:.1f}")
    if drift.missing:
        problems.append(f"{len(drift.missing)} baseline articles missing from this run")
    if problems:
        pytest.fail(
            "outputs drifted from the baseline: "
            + "; ".join(problems)
            + "\n"
            + paired
            + "\n"
            + describe(drift, baseline, summaries.entry),
            pytrace=False,
        )
    where = f"against {path}, alpha {rule.alpha:g}"
    underpowered_drop_gate(results, rule, drift.compared, where, paired)


@pytest.fixture(scope="session")  # as cnn is, so it is set up first (argument order): a skip loads no articles
def v1_settings(openai_target):
    """The [accuracy] table of --openai-engine; skipped without one, as it cannot apply."""
    engine, name = openai_target.engine, openai_target.options.engine
    if engine is None:
        pytest.skip(
            "no --openai-engine: ROUGE thresholds are an engine's of the lock; name the one whose checkpoint the endpoint serves"
        )
    if engine.source.dummy is not None:
        pytest.skip(f"--openai-engine {name} has dummy weights: ROUGE needs trained weights")
    if engine.accuracy is None:
        pytest.fail(
            f"--openai-engine {name}: the lock has no [engines.{name}.accuracy] table: add min_rouge1/2/Lsum", pytrace=False
        )
    return engine.accuracy


class TestOverV1:
    """The same capability over an OpenAI endpoint: run with --openai-url, deselected without it."""

    def test_rouge_over_v1_meets_the_engines_thresholds(
        self, openai_target, v1_settings, cnn, triton_llm_accuracy_options, triton_llm_report, triton_llm_progress
    ):
        settings, engine, seconds = v1_settings, openai_target.engine, [0.0]

        def batch(articles) -> list[str]:
            start = time.monotonic()
            with triton_llm_progress.step(f"accuracy: summarizing {len(articles)} articles on {openai_target.options.url}"):
                outputs = v1_summaries(openai_target, articles, settings, openai_target.tokenizer, engine.max_input_len)
            seconds[0] += time.monotonic() - start
            return outputs

        def record(accuracy: dict) -> None:
            served = {"url": openai_target.options.url, "model": openai_target.model, "family": openai_target.family_name}
            triton_llm_report.record_run(
                "v1_accuracy",
                dict(
                    accuracy,
                    seconds=round(seconds[0], 1),
                    engine=openai_target.options.engine,
                    endpoint=V1_ENDPOINT[settings.prompt],
                    **served,
                ),
            )

        where = f"{openai_target.options.url} against engine {openai_target.options.engine}'s thresholds"
        rouge_meets_the_thresholds(Summaries(cnn.articles, batch), cnn, settings, triton_llm_accuracy_options, record, where)
