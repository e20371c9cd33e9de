"""The accuracy suite's drift check as a user runs it before an image upgrade: save the outputs,
compare a later run with them, and see a changed engine configuration fail by article."""

import json
import re
from pathlib import Path

import pytest

pytestmark = [pytest.mark.integration, pytest.mark.timeout(900)]

ROOT = Path(__file__).resolve().parents[2]
SAMPLES = "2"  # the smallest sample whose exact-match share can fall below 90% by one article
# Four made-up news articles of ~600 words (as long as CNN/DailyMail's): the test's own data, in MLPerf's
# cnn_eval.json layout. Long enough that max_input_len 256 cuts them shorter than the lock's 512 tokens.
TOPICS = [
    ("The city council of Lindenport", "a new tram line", "commuters", "the harbour district"),
    ("Researchers at the Norrvik institute", "a drought-tolerant barley", "farmers", "the northern valleys"),
    ("The national rowing federation", "a youth training programme", "coaches", "the lake clubs"),
    ("Engineers at a small satellite company", "a weather camera", "forecasters", "the mountain stations"),
]
SENTENCES = [
    "{who} announced on Tuesday that {what} would be ready by the end of next year.",
    "Officials said {whom} in {where} had asked for it for more than a decade.",
    "The plan was delayed twice, first by a funding dispute and then by a shortage of parts.",
    "{who} said the cost had risen by a fifth since the first estimate, but that the budget still held.",
    "Critics argued that {what} would help {whom} in {where} less than promised.",
    "A spokesperson replied that early trials had gone better than expected and that more were planned.",
    "Local newspapers reported that {whom} had mixed feelings, welcoming the news but doubting the timetable.",
    "The next public meeting on {what} is scheduled for March, when a detailed report will be presented.",
]


def write_articles(path: Path) -> Path:
    articles = []
    for who, what, whom, where in TOPICS:
        paragraphs = [
            " ".join(s.format(who=who, what=what, whom=whom, where=where) for s in SENTENCES[i:] + SENTENCES[:i])
            + f" By {month}, {120 * (i + 3)} people had signed a petition and {i + 2} hearings had been held."
            for i, month in enumerate(["January", "April", "June", "September", "November"])
        ]
        articles.append(
            {
                "instruction": "Summarize the following news article:",
                "input": "\n\n".join(paragraphs),
                "output": f"{who} announced {what} for {whom} in {where} .\nThe plan was delayed twice .",
            }
        )
    path.write_text(json.dumps(articles))
    return path


def accuracy_run(pytester, *args):
    dataset = write_articles(pytester.path / "articles.json")
    return pytester.runpytest_subprocess(
        str(ROOT / "suites"),
        "-m",
        "accuracy",
        "-p",
        "no:cacheprovider",
        "--accuracy-dataset",
        str(dataset),
        "--accuracy-samples",
        SAMPLES,
        *args,
        timeout=600,
    )


def for_drift(text: str) -> str:
    """2 articles are too few for the ROUGE thresholds, and this test is about drift, which 24 tokens of each summary
    show as well as 64 (the lock's): no thresholds, shorter summaries."""
    text = re.sub(r"^max_new_tokens = \d+", "max_new_tokens = 24", text, flags=re.M)
    return re.sub(r"^(min_rouge\w+) = [0-9.]+", r"\1 = 0.0", text, flags=re.M)


@pytest.mark.usefixtures("warm_cache")
def test_save_compare_round_trip_and_a_changed_engine_fails_by_article(pytester):
    lock = pytester.path / "engines.lock"
    lock.write_text(for_drift((ROOT / "engines.lock").read_text()))
    saved = pytester.path / "outputs.json"
    first = accuracy_run(pytester, "--engines-lock", str(lock), "--accuracy-save", str(saved))
    first.assert_outcomes(passed=1, skipped=1)
    entry = json.loads(saved.read_text())["deployments"]["smollm2-135m:inflight"]
    assert len(entry["articles"]) == int(SAMPLES) and entry["server"]["version"] == "2.51.0"

    same = accuracy_run(pytester, "--engines-lock", str(lock), "--accuracy-baseline", str(saved), "--triton-llm-report", "r.json")
    same.assert_outcomes(passed=2)
    drift = json.loads((pytester.path / "r.json").read_text())["deployments"]["smollm2-135m:inflight"]["metrics"][
        "accuracy_drift"
    ]
    assert drift["exact_match_pct"] == 100.0 and drift["compared"] == int(SAMPLES)
    # each article paired with itself: no drop, so the paired test passes on every metric
    assert {m: (r["mean_drop"], r["verdict"]) for m, r in drift["paired"].items()} == {
        "rouge1": (0.0, "pass"),
        "rouge2": (0.0, "pass"),
        "rougeLsum": (0.0, "pass"),
    }

    # another engine configuration: a shorter max_input_len cuts the articles shorter. Two articles cannot show a
    # significant ROUGE drop, so the identity gate a user adds for an image upgrade is what fails here
    changed = pytester.path / "changed.lock"
    changed.write_text(lock.read_text().replace("max_input_len = 1024", "max_input_len = 256"))
    other = accuracy_run(
        pytester, "--engines-lock", str(changed), "--accuracy-baseline", str(saved), "--accuracy-min-exact-match", "90"
    )
    other.assert_outcomes(passed=1, failed=1)
    other.stdout.fnmatch_lines(
        [
            "*outputs drifted from the baseline: *% of outputs identical to the baseline < 90.0%*",
            "*articles compared: *% identical, mean ROUGE-L vs baseline *",
            "*article #* (*): ROUGE-L *",
            "*baseline: *",
            "*now: *",
        ]
    )
