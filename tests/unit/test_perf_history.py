"""The perf history: reports appended to one SQLite file, judged by Apache Otava's change points (the real `otava`,
from .venv-otava or PATH), through the command a nightly runs."""

from __future__ import annotations

import datetime as dt
import json
import statistics
from pathlib import Path

import pytest

from pytest_triton_llm.cli.main import main
from pytest_triton_llm.perf.history.judge import load_settings
from pytest_triton_llm.perf.history.otava import OtavaError, find_otava
from pytest_triton_llm.perf.history.store import HistoryError, append, read

from ..conftest import ROOT, need_tool

NIGHTS = json.loads((ROOT / "tests" / "data" / "perf_history_nights.json").read_text())
FIRST_NIGHT = dt.datetime(2026, 10, 1, 2, 0, tzinfo=dt.timezone.utc)


def report(night: int, point: dict, image: str = "26.05-trtllm-python-py3", deployment: str = "llama-3.1-8b:inflight") -> dict:
    """A --triton-llm-report document of night `night` (1-based) with one load point."""
    started = (FIRST_NIGHT + dt.timedelta(days=night - 1)).isoformat(timespec="seconds")
    info = {"image": image, "server_version": "2.60.0", "backend": "tensorrtllm", "engine_digest": "e1"}
    return {
        "schema": 1,
        "run": {"started": started, "hardware": "NVIDIA H200"},
        "deployments": {deployment: {**info, "metrics": {"perf": {"concurrency=8": point}}}},
    }


def history_of(tmp_path: Path, name: str, step_image_at: int | None = None) -> Path:
    """The nights of NIGHTS[name], each added by the command's --add as a nightly adds its report."""
    history = tmp_path / "history.sqlite"
    for night, point in enumerate(NIGHTS[name], start=1):
        image = "26.07-trtllm-python-py3" if step_image_at and night >= step_image_at else "26.05-trtllm-python-py3"
        path = tmp_path / f"night-{night}.json"
        path.write_text(json.dumps(report(night, point, image)))
        append(history, json.loads(path.read_text()), load_settings().metrics, commit=f"c{night:02d}")
    return history


@pytest.fixture
def otava() -> str:
    try:
        return find_otava(None)
    except OtavaError as exc:
        need_tool(str(exc))
        raise


def test_a_9_percent_step_at_night_12_is_named_with_what_changed_and_fails(otava, tmp_path, capsys):
    history = history_of(tmp_path, "step", step_image_at=12)
    assert main(["perf-history", str(history), "--otava", otava, "--plots", str(tmp_path / "plots")]) == 1
    out = capsys.readouterr().out
    [line] = [line for line in out.splitlines() if line.startswith("REGRESSION ")]
    values = [n["output_tokens_per_s"] for n in NIGHTS["step"]]
    expected = 100 * (statistics.fmean(values[11:]) / statistics.fmean(values[:11]) - 1)  # the data's own step, -9% drawn
    assert f"output_tokens_per_s: {expected:+.1f}% from run 12 of 20 (2026-10-12" in line, line
    assert "image 26.05-trtllm-python-py3 -> 26.07-trtllm-python-py3" in line and "commit c11 -> c12" in line, line
    assert (tmp_path / "plots" / "llama-3.1-8b_inflight_concurrency=8_NVIDIA_H200.png").stat().st_size > 10_000


def test_20_clean_nights_pass(otava, tmp_path, capsys):
    history = history_of(tmp_path, "clean")
    assert main(["perf-history", str(history), "--otava", otava]) == 0
    out = capsys.readouterr().out
    assert "0 new regression(s) among the newest 10 runs of 1 series" in out, out


def test_an_old_regression_is_reported_and_does_not_fail(otava, tmp_path, capsys):
    history = history_of(tmp_path, "step", step_image_at=12)
    assert main(["perf-history", str(history), "--otava", otava, "--newest", "5"]) == 0
    assert "older regression llama-3.1-8b:inflight concurrency=8" in capsys.readouterr().out


def test_the_newest_run_alone_20_percent_worse_fails_unconfirmed(otava, tmp_path, capsys):
    history = tmp_path / "history.sqlite"
    for night, point in enumerate(NIGHTS["clean"][:5], start=1):
        worse = dict(point, output_tokens_per_s=point["output_tokens_per_s"] * 0.8) if night == 5 else point
        append(history, report(night, worse), load_settings().metrics, commit=f"c{night}")
    assert main(["perf-history", str(history), "--otava", otava]) == 1
    [line] = [line for line in capsys.readouterr().out.splitlines() if line.startswith("REGRESSION ")]
    assert "from run 5 of 5" in line and "the newest run alone, unconfirmed" in line, line


def test_a_report_added_twice_adds_its_runs_once_and_keeps_the_file(tmp_path):
    history = tmp_path / "history.sqlite"
    metrics = load_settings().metrics
    document = report(1, NIGHTS["clean"][0])
    assert (append(history, document, metrics), append(history, document, metrics)) == (1, 0)
    [series] = read(history, metrics)
    assert series.values["output_tokens_per_s"] == [NIGHTS["clean"][0]["output_tokens_per_s"]]
    assert series.values["ttft_ms.p99"] == [NIGHTS["clean"][0]["ttft_ms"]["p99"]]


def test_series_are_kept_apart_by_deployment_load_point_and_hardware(tmp_path):
    history, metrics = tmp_path / "history.sqlite", load_settings().metrics
    append(history, report(1, NIGHTS["clean"][0]), metrics)
    append(history, report(1, NIGHTS["clean"][0], deployment="llama-3.1-8b:llmapi"), metrics)
    other = report(2, NIGHTS["clean"][1])
    other["run"]["hardware"] = "NVIDIA A100-SXM4-80GB"
    append(history, other, metrics)
    assert sorted(s.name for s in read(history, metrics)) == [
        "llama-3.1-8b:inflight concurrency=8 (NVIDIA A100-SXM4-80GB)",
        "llama-3.1-8b:inflight concurrency=8 (NVIDIA H200)",
        "llama-3.1-8b:llmapi concurrency=8 (NVIDIA H200)",
    ]


def test_no_history_file_and_no_otava_are_one_line_each(tmp_path, capsys, monkeypatch):
    assert main(["perf-history", str(tmp_path / "none.sqlite"), "--otava", "/bin/true"]) == 2
    assert "no perf history here" in capsys.readouterr().err
    monkeypatch.setenv("PATH", str(tmp_path))
    monkeypatch.chdir(tmp_path)
    history = tmp_path / "history.sqlite"
    append(history, report(1, NIGHTS["clean"][0]), load_settings().metrics)
    assert main(["perf-history", str(history)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "pip install apache-otava==0.8.0" in err, err


def test_a_history_of_another_schema_is_refused_not_rewritten(tmp_path):
    import sqlite3

    history = tmp_path / "history.sqlite"
    with sqlite3.connect(history) as connection:
        connection.execute("CREATE TABLE meta (key TEXT PRIMARY KEY, value TEXT NOT NULL)")
        connection.execute("INSERT INTO meta VALUES ('schema', '99')")
    before = history.read_bytes()
    with pytest.raises(HistoryError, match="schema 99; this version reads schema 1"):
        read(history, load_settings().metrics)
    assert history.read_bytes() == before


def test_a_file_that_is_not_a_history_is_refused_before_the_session_runs(tmp_path):
    from pytest_triton_llm.perf.history.store import check

    wrong = tmp_path / "notes.txt"
    wrong.write_text("my notes, not a database\n" * 100)
    with pytest.raises(HistoryError, match="not a perf history"):
        check(wrong)
    assert wrong.read_text() == "my notes, not a database\n" * 100
    check(tmp_path / "new.sqlite")  # a new file is fine, and not created until a run is appended
    assert not (tmp_path / "new.sqlite").exists()


def test_a_change_point_of_another_metric_does_not_hide_the_newest_runs_own_drop():
    from pytest_triton_llm.perf.history.judge import regressions
    from pytest_triton_llm.perf.history.otava import ChangePoint
    from pytest_triton_llm.perf.history.store import Series

    rates = [22.97, 23.93, 24.42, 23.28, 16.82]  # benchmarks/results/perf_history_nights.json, concurrency=1
    one = Series("d:inflight", "concurrency=1", "cpu", [f"2026-11-29T0{i}:00:00+00:00" for i in range(5)])
    one.attributes = [{} for _ in rates]
    one.values = {"output_tokens_per_s": rates, "itl_ms.p50": [40.0, 40.5, 39.8, 40.2, 57.2]}
    itl = ChangePoint(one.name, "itl_ms.p50", 4, 43.0, 0.00028, 40.1, 57.2)  # Otava's, on the other metric
    found = {(r.metric, r.index, r.confirmed) for r in regressions([one], [itl], load_settings())}
    assert found == {("itl_ms.p50", 4, True), ("output_tokens_per_s", 4, False)}


def test_an_openai_endpoints_load_points_are_a_series_of_their_own(tmp_path):
    history, metrics = tmp_path / "history.sqlite", load_settings().metrics
    point = dict(NIGHTS["clean"][0], engine="smollm2-135m", deployment="openai:trtllm-serve", image="openai")
    document = {"run": {"started": "2026-11-29T02:00:00+00:00", "hardware": "NVIDIA H200"}, "v1_perf": {"concurrency=4": point}}
    assert append(history, document, metrics) == 1
    [series] = read(history, metrics)
    assert series.name == "smollm2-135m:openai:trtllm-serve concurrency=4 (NVIDIA H200)"
    assert series.values["output_tokens_per_s"] == [point["output_tokens_per_s"]] and series.attributes[0]["image"] == "openai"
