"""Accuracy of an OpenAI-compatible endpoint (--openai-url) on CNN/DailyMail: ROUGE against the thresholds of the
engine whose checkpoint it serves (--openai-engine, its [accuracy] table in the lock), judged as the accuracy suite
judges a Triton deployment.

Each article goes as the user message of /v1/chat/completions, so the server renders its own chat template as users'
clients call it; an engine whose prompt is "plain" sends the same text to /v1/completions. Articles are cut as on
Triton, by the endpoint's tokenizer (--tokenizer, else the served model's id) and the engine's max_input_len."""

from __future__ import annotations

import time
import pytest

from pytest_triton_llm.accuracy.judge import rouge_meets_the_thresholds
from pytest_triton_llm.accuracy.sequential import Summaries
from pytest_triton_llm.accuracy.v1_summaries import V1_ENDPOINT, v1_summaries

pytestmark = pytest.mark.accuracy


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


def test_rouge_over_v1_meets_the_engines_thresholds(
    openai_target, v1_settings, cnn, triton_llm_accuracy_options, triton_llm_report, triton_llm_progress
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
