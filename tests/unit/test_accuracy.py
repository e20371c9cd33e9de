import json
import re

import numpy as np
import pytest

from pytest_triton_llm.accuracy import dataset as dataset_module
from pytest_triton_llm.accuracy.dataset import DatasetError, load_cnn_dailymail
from pytest_triton_llm.accuracy.drift import (
    DriftError,
    OutputsWriter,
    check_paths,
    compare,
    describe,
    load_outputs,
    paired_scores,
)
from pytest_triton_llm.accuracy.prompting import build_prompt, user_message
from pytest_triton_llm.accuracy.rouge import rouge_scores
from pytest_triton_llm.accuracy.verdicts import VerdictRule, judge_drift, judge_thresholds, planned_detectable_drop
from pytest_triton_llm.stack.lock import Accuracy

pytest.importorskip("datasets", reason="the reference extra is not installed")

ARTICLES = [{"article": f"Article {i}. It says something new.", "highlights": f"Summary {i} ."} for i in range(5)]


def test_mlperf_json_and_article_highlights_files_load(tmp_path):
    mlperf = tmp_path / "cnn_eval.json"
    mlperf.write_text(
        json.dumps([{"instruction": "Summarize:", "input": a["article"], "output": a["highlights"]} for a in ARTICLES])
    )
    jsonl = tmp_path / "cnn.jsonl"
    jsonl.write_text("\n".join(json.dumps(a) for a in ARTICLES))
    first, second = load_cnn_dailymail(str(mlperf), samples=3), load_cnn_dailymail(str(jsonl))
    assert len(first.articles) == 3 and first.articles[0].instruction == "Summarize:"
    assert len(second.articles) == 5 and second.articles[0].instruction is None
    assert [a.id for a in first.articles] == [a.id for a in second.articles[:3]]  # ids follow the text, not the file
    assert first.articles[1].reference == "Summary 1 ."


def test_parquet_loads_and_unknown_columns_are_named(tmp_path):
    import pandas

    pandas.DataFrame(ARTICLES).to_parquet(tmp_path / "cnn.parquet")
    assert len(load_cnn_dailymail(str(tmp_path / "cnn.parquet")).articles) == 5
    (tmp_path / "odd.jsonl").write_text(json.dumps({"text": "x", "summary": "y"}))
    with pytest.raises(DatasetError, match=r"columns \['summary', 'text'\] are neither MLPerf's"):
        load_cnn_dailymail(str(tmp_path / "odd.jsonl"))
    with pytest.raises(DatasetError, match="no such file"):
        load_cnn_dailymail(str(tmp_path / "absent.json"))


def test_offline_without_a_file_says_how_to_pass_one(monkeypatch):
    import datasets

    def offline(*args, **kwargs):
        raise ConnectionError("Couldn't reach 'cnn_dailymail' on the Hub (OfflineModeIsEnabled)")

    monkeypatch.setattr(datasets, "load_dataset", offline)
    with pytest.raises(DatasetError) as excinfo:
        dataset_module.load_cnn_dailymail(None)
    message = str(excinfo.value)
    assert "cannot load cnn_dailymail 3.0.0 (validation) from the Hugging Face Hub" in message
    assert "--accuracy-dataset PATH" in message and "\n" not in message


class WordTokenizer:
    """One token per word; a chat template that wraps the user message."""

    def encode(self, text, add_special_tokens=False):
        return text.split()

    def decode(self, ids):
        return " ".join(ids)

    def apply_chat_template(self, messages, tokenize, add_generation_prompt):
        return f"<user> {messages[0]['content']} <assistant>"


def test_prompts_cut_the_article_to_the_token_budget():
    article = dataset_module._article(" ".join(f"w{i}" for i in range(100)), "ref", None)
    settings = Accuracy(min_rouge1=0, min_rouge2=0, min_rougeLsum=0, max_article_tokens=50)
    chat = build_prompt(article, settings, WordTokenizer(), max_input_len=1000)
    assert chat.startswith("<user> Summarize the following news article:") and chat.endswith("w49 <assistant>")
    tight = build_prompt(article, settings, WordTokenizer(), max_input_len=30)  # what max_input_len leaves wins
    assert len(tight.split()) <= 30 - 8 + 1
    plain = build_prompt(article, Accuracy(0, 0, 0, prompt="plain"), WordTokenizer(), max_input_len=1000)
    assert plain.startswith("Summarize the following news article:\n\nw0") and plain.endswith("w99\n\nSummary:")


def test_the_chat_user_message_is_the_chat_prompt_without_its_template_cut_alike():
    """What the /v1 migration check sends to /v1/chat/completions: the message the Triton side's prompt wraps."""
    article = dataset_module._article(" ".join(f"w{i}" for i in range(100)), "ref", None)
    settings = Accuracy(min_rouge1=0, min_rouge2=0, min_rougeLsum=0, max_article_tokens=50)
    message = user_message(article, settings, WordTokenizer(), max_input_len=40)
    assert message.startswith("Summarize the following news article:\n\nw0") and message.endswith(
        " w24"
    )  # 40 - 7 (template and instruction) - 8 (slack)
    assert build_prompt(article, settings, WordTokenizer(), max_input_len=40) == f"<user> {message} <assistant>"


def test_rouge_is_in_percent_with_a_reproducible_interval():
    references = ["The cat sat on the mat.\nIt was happy.", "Dogs bark loudly at night."]
    perfect = rouge_scores(references, references)
    assert {m: s["mid"] for m, s in perfect.items()} == {"rouge1": 100.0, "rouge2": 100.0, "rougeLsum": 100.0}
    partial = ["A cat sat on a mat. It was sad.", "Cats sleep at night."]
    first, second = rouge_scores(partial, references), rouge_scores(partial, references)
    assert first == second and 0 < first["rouge1"]["low"] <= first["rouge1"]["mid"] <= first["rouge1"]["high"] < 100


def entry(outputs, digest="a" * 64):
    return {
        "deployment": "e:inflight",
        "engine": {"name": "e", "digest": digest},
        "server": {"version": "2.51.0"},
        "articles": [{"index": i, "id": f"id{i}", "output": o} for i, o in enumerate(outputs)],
    }


def test_drift_counts_identical_outputs_and_lists_the_most_moved_first():
    baseline = entry(["one two three four", "alpha beta gamma", "same text"])
    current = entry(["one two three five", "something else entirely", "same text"], digest="b" * 64)
    drift = compare(baseline, current)
    assert drift.compared == 3 and drift.exact_match_pct == pytest.approx(33.33)
    assert [m["index"] for m in drift.moved] == [1, 0]  # least similar first
    text = describe(drift, baseline, current)
    assert "engine e aaaaaaaaaaaa on Triton 2.51.0" in text and "engine e bbbbbbbbbbbb" in text
    assert "article #1 (id1): ROUGE-L 0.0" in text and "baseline: alpha beta gamma" in text
    assert compare(baseline, baseline).exact_match_pct == 100.0


def test_drift_needs_common_articles():
    with pytest.raises(DriftError, match="none of this run's articles"):
        compare(entry(["x"]), {**entry([]), "articles": [{"index": 0, "id": "other", "output": "x"}]})


def test_saving_keeps_an_earlier_file_and_never_overwrites_the_baseline(tmp_path):
    path = tmp_path / "outputs.json"
    path.write_text("earlier baseline")
    writer = OutputsWriter(path)
    writer.add("e:inflight", entry(["x"]))
    assert writer.backup is not None and writer.backup.read_text() == "earlier baseline"
    assert load_outputs(path)["deployments"]["e:inflight"]["articles"][0]["output"] == "x"
    with pytest.raises(DriftError, match="name the same file"):
        check_paths(str(path), str(path))
    with pytest.raises(DriftError, match="no such file"):
        check_paths(None, str(tmp_path / "absent.json"))
    (tmp_path / "other.json").write_text("{}")
    with pytest.raises(DriftError, match="not a pytest-triton-llm accuracy outputs file"):
        load_outputs(tmp_path / "other.json")


def _settings(**extra) -> Accuracy:
    return Accuracy(min_rouge1=27.0, min_rouge2=8.0, min_rougeLsum=23.0, **extra)


def test_thresholds_are_judged_by_one_sided_bounds_and_a_tier_adds_its_own_rows():
    rng = np.random.default_rng(3)
    per_article = {
        "rouge1": list(rng.normal(35, 10, 60)),  # wholly above 27
        "rouge2": list(rng.normal(8.2, 8, 60)),  # straddles 8
        "rougeLsum": list(rng.normal(15, 8, 60)),
    }  # wholly below 23
    verdicts = judge_thresholds(per_article, _settings(tier=0.99, reference_rouge1=30.0), alpha=0.05)
    assert [(v.metric, v.rule, v.result.verdict) for v in verdicts] == [
        ("rouge1", ">= 27.00", "pass"),
        ("rouge1", ">= 0.99 x 30.00", "pass"),
        ("rouge2", ">= 8.00", "inconclusive"),
        ("rougeLsum", ">= 23.00", "fail"),
    ]
    needed = verdicts[2].result.items_needed
    assert needed > 60 and f"about {needed} articles would decide it" in verdicts[2].row()[-1]


def test_drift_pairs_each_article_with_itself_against_the_references():
    references = {f"a{i}": f"the council approved the tram line number {i} ." for i in range(4)}
    baseline = {"articles": [{"id": k, "output": v} for k, v in references.items()]}
    worse = {"articles": [{"id": k, "output": "nothing at all"} for k in references]}
    before, now = paired_scores(baseline, worse, references)
    results = judge_drift(before, now, VerdictRule(max_drop=1.0))
    assert all(b == 100.0 for b in before["rouge1"]) and all(n == 0.0 for n in now["rouge1"])
    assert {m: r.verdict for m, r in results.items()} == {"rouge1": "fail", "rouge2": "fail", "rougeLsum": "fail"}
    assert judge_drift(before, before, VerdictRule())["rouge1"].verdict == "pass"
    with pytest.raises(DriftError, match="a paired test needs at least 2"):
        paired_scores(baseline, {"articles": worse["articles"][:1]}, references)


def test_the_drift_plan_before_a_run_is_no_smaller_than_what_a_correlated_run_then_catches():
    rng = np.random.default_rng(3)
    base = rng.normal(30.0, 11.0, 60)  # per-article ROUGE spread like CNN/DailyMail's
    rule = VerdictRule(max_drop=1.0)
    n, planned = planned_detectable_drop({"rouge1": list(base), "rouge2": list(base / 3)}, rule)
    again = base + rng.normal(0.0, 2.0, 60)  # the same engine: outputs mostly the same, scores close
    three = lambda scores: {m: list(scores) for m in ("rouge1", "rouge2", "rougeLsum")}  # noqa: E731
    measured = judge_drift(three(base), three(again), rule)["rouge1"].detectable_drop
    assert n == 60 and 1.0 + 4.0 < planned < 1.0 + 8.0  # ~(1.67 + 0.85) x 15.6 / sqrt(60) beyond the allowed drop
    assert measured < planned


@pytest.mark.parametrize(
    "extra, message",
    [
        ({"tier": 1.5, "reference_rouge1": 30.0}, "field 'tier': a fraction of the reference score in (0, 1]"),
        ({"tier": 0.99}, "field 'tier': give the reference scores it applies to"),
        ({"max_drop": -1.0}, "field 'max_drop': must be >= 0 ROUGE points"),
    ],
)
def test_accuracy_rules_in_the_lock_are_checked(extra, message):
    with pytest.raises(ValueError, match=re.escape(message)):
        _settings(**extra)
