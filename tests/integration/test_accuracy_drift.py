"""The accuracy suite's drift check as a user runs it before an image upgrade: save the outputs,
compare a later run with them, and see a changed engine configuration fail by article."""

import json
import re
from pathlib import Path

import pytest

pytestmark = [pytest.mark.integration, pytest.mark.timeout(900)]

ROOT = Path(__file__).resolve().parents[2]
MINI_CNN = ROOT.parent / "shared" / "datasets" / "cnn_dailymail" / "mini_cnn_eval.json"
SAMPLES = "4"


def accuracy_run(pytester, *args):
    if not MINI_CNN.is_file():
        pytest.fail(f"{MINI_CNN} is missing: CI clones the project next to shared/", pytrace=False)
    return pytester.runpytest_subprocess(
        str(ROOT / "suites"), "-m", "accuracy", "-p", "no:cacheprovider", "--accuracy-dataset", str(MINI_CNN),
        "--accuracy-samples", SAMPLES, *args, timeout=600,
    )  # fmt: skip


def without_rouge_thresholds(text: str) -> str:
    """4 articles are too few for the ROUGE thresholds; this test is about drift."""
    return re.sub(r"^(min_rouge\w+) = [0-9.]+", r"\1 = 0.0", text, flags=re.M)


def test_save_compare_round_trip_and_a_changed_engine_fails_by_article(pytester):
    lock = pytester.path / "engines.lock"
    lock.write_text(without_rouge_thresholds((ROOT / "engines.lock").read_text()))
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

    # another engine configuration: a shorter max_input_len cuts the articles shorter
    changed = pytester.path / "changed.lock"
    changed.write_text(lock.read_text().replace("max_input_len = 1024", "max_input_len = 256"))
    other = accuracy_run(pytester, "--engines-lock", str(changed), "--accuracy-baseline", str(saved))
    other.assert_outcomes(passed=1, failed=1)
    other.stdout.fnmatch_lines([
        "*outputs drifted from the baseline: *% of outputs identical to the baseline < 90.0%*",
        "*articles compared: *% identical, mean ROUGE-L vs baseline *",
        "*article #* (*): ROUGE-L *",
        "*baseline: *",
        "*now: *",
    ])  # fmt: skip
