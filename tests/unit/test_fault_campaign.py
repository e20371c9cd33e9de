"""The fault campaign (`pytest-triton-llm faults`) with its subprocess boundary faked: each pytest run writes the report
a scripted stack would give, so that verdicts, tables, baselines, selection and exit codes are checked exactly."""

import argparse
import ast
import json
import signal
import sys
import time
from pathlib import Path

import pytest

from pytest_triton_llm.faults import load_catalog
from pytest_triton_llm.faults.campaign import plan as planning, schedule, tables, verdicts
from pytest_triton_llm.cli import main
from pytest_triton_llm.faults.campaign import add_arguments, campaign
from pytest_triton_llm.faults.campaign.plan import plan
from pytest_triton_llm.faults.campaign.tables import REASONS, load_reasons

ROOT = Path(__file__).resolve().parents[2]
SUITE = [
    "suites/test_streaming.py::test_stream_equals_unary[m:inflight-ensemble]",
    "suites/test_streaming.py::test_stream_equals_unary[m:inflight-tensorrt_llm_bls]",
    "suites/test_functional.py::test_contract[m:inflight]",
    "suites/test_perf.py::test_load_point[m:inflight-concurrency_1]",
]
ROW = """
[[fault]]
name = "{name}"
issue = "owner/repo#{number}"
title = "Title {number}"
versions = "0.7"
does = "drops spaces"
model = "postprocessing"
layout = "inflight_batcher_llm"
kind = "{kind}"
markers = {markers}
deployment = "{deployment}"
"""


def catalog(tmp_path, *rows: dict) -> Path:
    text = ""
    for number, row in enumerate(rows, 1):
        row = {"kind": "streaming text", "markers": '["streaming"]', "deployment": "m:inflight", **row}
        extra = {k: v for k, v in row.items() if k not in ("name", "kind", "markers", "deployment")}
        text += ROW.format(number=number, **row) + "".join(f"{k} = {v}\n" for k, v in extra.items())
    path = tmp_path / "faults.toml"
    path.write_text(text)
    return path


def options(argv: list[str]) -> dict[str, str]:
    """An argv's options and the word after each."""
    return dict(zip(argv, argv[1:], strict=False))


class Done:
    def __init__(self, code):
        self.code, self.stopped = code, False

    def poll(self):
        return self.code

    def stop(self):
        self.stopped = True


class FakeStack:
    """Plays every pytest run of a campaign: `failing` maps a fault's name (or "clean") to the node ids that fail."""

    def __init__(self, failing=None, not_injected=(), codes=None, skipped=None):
        self.failing, self.not_injected, self.codes, self.skipped = failing or {}, not_injected, codes or {}, skipped or {}
        self.argvs: list[list[str]] = []

    def __call__(self, argv, cwd, log, env=None):
        self.argvs.append(argv)
        log.parent.mkdir(parents=True, exist_ok=True)
        if "--collect-only" in argv:
            log.write_text("\n".join(SUITE) + "\n\n4 tests collected in 0.1s\n")
            return Done(0)
        option = options(argv)
        fault, deployment = option.get("--stand-in-fault"), option["--deployment"]
        failing, skipped = self.failing.get(fault or "clean", []), self.skipped.get(fault or "clean", [])
        outcome = {**dict.fromkeys(skipped, "skipped"), **dict.fromkeys(failing, "failed")}
        tests = [
            {
                "nodeid": n,
                "outcome": outcome.get(n, "passed"),
                "duration_s": 2.0,
                "deployment": deployment,
                "markers": [],
                "message": None,
            }
            for n in SUITE
        ]
        record = {}
        if fault is not None:
            injected = fault not in self.not_injected
            record = {
                "stand_in_fault": {
                    "name": fault,
                    "injected": injected,
                    **({} if injected else {"why": "it lives in the llmapi model"}),
                }
            }
        report = {"run": {"startup_s": 5.0}, "deployments": {deployment: record}, "tests": tests}
        Path(option["--triton-llm-report"]).write_text(json.dumps(report))
        return Done(self.codes.get(fault or "clean", 1 if failing else 0))

    def run_of(self, label: str) -> list[str]:
        """The argv of the fault run `label`, or of the clean run ("clean")."""
        return next(a for a in self.argvs if "--collect-only" not in a and options(a).get("--stand-in-fault", "clean") == label)


def arguments(*argv: str) -> argparse.Namespace:
    parser = argparse.ArgumentParser()
    add_arguments(parser)
    return parser.parse_args(list(argv))


def run_campaign(tmp_path, faults: Path, stack: FakeStack, *argv: str, reasons: Path = REASONS) -> int:
    args = arguments("--out", str(tmp_path / "out"), *argv)
    return campaign(args, ["suites"], tmp_path, start=stack, catalog=faults, reasons=reasons)


def test_a_caught_fault_and_a_passing_clean_run_exit_0_with_both_tables(tmp_path, capsys):
    faults = catalog(tmp_path, {"name": "drops_space"})
    stack = FakeStack(failing={"drops_space": [SUITE[1], SUITE[0]]})
    assert run_campaign(tmp_path, faults, stack) == 0
    out = tmp_path / "out"
    table = (out / "fault-table.md").read_text().splitlines()
    link = "[owner/repo#1](https://github.com/owner/repo/issues/1)"
    assert table[6] == f"| drops_space | streaming text | {link} | yes | `{SUITE[0]}` | {table[6].rsplit('| ', 1)[1]}"
    assert table[12:] == [f"| m:inflight | streaming | - | yes | 4 passed | {table[12].rsplit('| ', 1)[1]}"]
    lines = capsys.readouterr().out.splitlines()
    assert lines[1].startswith("[1/2] clean m:inflight: passed (4 passed) in ")
    assert lines[2].startswith(f"[2/2] drops_space: caught by {SUITE[0]} in ")  # the first to fail, as run
    assert lines[3] == "1 faults: 1 caught, 0 missed, 0 harness errors; clean runs: 1 of 1 passed"
    document = json.loads((out / "campaign.json").read_text())
    assert document["faults"][0]["caught_by"] == [SUITE[0], SUITE[1]]
    assert document["overhead"] == {
        "runs": 2,
        "median_overhead_s": document["overhead"]["median_overhead_s"],
        "median_tests_s": 8.0,
        "median_server_ready_s": 5.0,
    }


def test_each_run_is_its_own_pytest_with_its_selection_basetemp_and_report(tmp_path):
    faults = catalog(
        tmp_path, {"name": "drops_space", "markers": '["streaming", "invariants"]', "keyword": '"fox"', "pytest_args": '["-x"]'}
    )
    stack = FakeStack(failing={"drops_space": [SUITE[0]]})
    run_campaign(tmp_path, faults, stack)
    out = tmp_path / "out"
    assert stack.run_of("drops_space") == [
        sys.executable,
        "-m",
        "pytest",
        "suites",
        "-m",
        "streaming or invariants",
        "--deployment",
        "m:inflight",
        "-k",
        "fox",
        "--stand-in-fault",
        "drops_space",
        "-p",
        "no:cacheprovider",
        "-q",
        "--basetemp",
        str(out / "basetemp" / "drops_space"),
        "--triton-llm-report",
        str(out / "runs" / "drops_space.json"),
        "-x",
    ]
    assert stack.run_of("clean")[4:10] == ["-m", "streaming or invariants", "--deployment", "m:inflight", "-k", "(fox)"]
    assert stack.argvs[0][3:] == [
        "suites",
        "--collect-only",
        "-q",
        "-p",
        "no:cacheprovider",
        "--basetemp",
        str(out / "basetemp" / "collect"),
    ]


def test_clean_runs_select_every_faults_keyword_or_its_markers_the_timed_ones_alone(tmp_path):
    faults = catalog(
        tmp_path,
        {"name": "slow", "markers": '["perf", "regressions"]', "keyword": '"concurrency_1"'},
        {"name": "drops_space", "markers": '["streaming", "invariants"]'},
    )
    untimed, timed, *faults_runs = plan(list(load_catalog(faults).values()), tmp_path)
    assert (untimed.label, untimed.markers, untimed.keyword, untimed.alone) == (
        "clean m:inflight",
        ("regressions", "streaming", "invariants"),
        "(concurrency_1) or (streaming or invariants)",
        False,
    )
    assert (timed.label, timed.markers, timed.keyword, timed.alone) == (
        "clean m:inflight (timed)",
        ("perf",),
        "(concurrency_1)",
        True,
    )
    assert [(r.label, r.cleans, r.alone) for r in faults_runs] == [
        ("slow", ("clean m:inflight", "clean m:inflight (timed)"), True),
        ("drops_space", ("clean m:inflight", "clean m:inflight (timed)"), False),
    ]


def test_a_missed_fault_exits_1_and_says_no(tmp_path, capsys):
    faults = catalog(tmp_path, {"name": "drops_space"})
    assert run_campaign(tmp_path, faults, FakeStack()) == 1
    row = (tmp_path / "out" / "fault-table.md").read_text().splitlines()[6]
    assert row.split(" | ")[3:5] == ["no", "-"]
    assert "drops_space: MISSED (4 passed, 0 skipped) in " in capsys.readouterr().out


def test_a_fault_that_was_not_injected_is_a_harness_error_not_a_miss(tmp_path, capsys):
    faults = catalog(tmp_path, {"name": "drops_space"})
    stack = FakeStack(failing={"drops_space": [SUITE[0]]}, not_injected=("drops_space",))
    assert run_campaign(tmp_path, faults, stack) == 1
    row = (tmp_path / "out" / "fault-table.md").read_text().splitlines()[6]
    assert row.split(" | ")[3:5] == ["harness error: not injected into m:inflight: it lives in the llmapi model", "-"]
    assert json.loads((tmp_path / "out" / "campaign.json").read_text())["faults"][0]["verdict"] == "harness error"
    assert "1 faults: 0 caught, 0 missed, 1 harness errors" in capsys.readouterr().out


def test_a_failure_the_clean_run_had_too_is_a_harness_error_not_a_catch(tmp_path, capsys):
    faults = catalog(tmp_path, {"name": "drops_space"})
    stack = FakeStack(failing={"drops_space": [SUITE[0], SUITE[2]], "clean": [SUITE[0], SUITE[2]]})
    assert run_campaign(tmp_path, faults, stack) == 1
    outcome = json.loads((tmp_path / "out" / "campaign.json").read_text())["faults"][0]
    assert (outcome["verdict"], outcome["why"], outcome["caught_by"]) == (
        "harness error",
        f"2 tests failed, none of which the clean run ran without a failure (first: {SUITE[0]})",
        [],
    )


def test_a_test_that_passed_clean_and_failed_with_the_fault_catches_it_beside_clean_failures(tmp_path):
    faults = catalog(tmp_path, {"name": "drops_space"})
    stack = FakeStack(failing={"drops_space": [SUITE[0], SUITE[2]], "clean": [SUITE[0]]})
    assert run_campaign(tmp_path, faults, stack) == 1  # the clean run failed
    outcome = json.loads((tmp_path / "out" / "campaign.json").read_text())["faults"][0]
    assert (outcome["verdict"], outcome["caught_by"]) == ("caught", [SUITE[2]])


def test_a_drift_test_skipped_on_the_clean_run_without_a_baseline_catches_the_fault(tmp_path):
    faults = catalog(
        tmp_path, {"name": "drift", "markers": '["accuracy"]', "pytest_args": '["--accuracy-baseline", "{accuracy_baseline}"]'}
    )
    stack = FakeStack(failing={"drift": [SUITE[2]]}, skipped={"clean": [SUITE[2]]})
    assert run_campaign(tmp_path, faults, stack) == 0
    outcome = json.loads((tmp_path / "out" / "campaign.json").read_text())["faults"][0]
    assert (outcome["verdict"], outcome["caught_by"]) == ("caught", [SUITE[2]])


@pytest.mark.parametrize(
    "code, why", [(2, "pytest exited 2 (interrupted, or a collection error)"), (5, "pytest exited 5 (no test selected)")]
)
def test_a_fault_run_that_pytest_itself_ended_is_a_harness_error(tmp_path, code, why):
    faults = catalog(tmp_path, {"name": "drops_space"})
    stack = FakeStack(failing={"drops_space": [SUITE[0]]}, codes={"drops_space": code})
    assert run_campaign(tmp_path, faults, stack) == 1
    outcome = json.loads((tmp_path / "out" / "campaign.json").read_text())["faults"][0]
    assert (outcome["verdict"], outcome["why"]) == ("harness error", f"{why}: {tmp_path / 'out' / 'runs' / 'drops_space.log'}")


@pytest.mark.parametrize(
    "failing, code, what",
    [
        ([SUITE[2]], 1, f"1 failed, 3 passed; first: {SUITE[2]}"),
        ([], 5, "pytest exited 5 (no test selected)"),
        ([], 2, "pytest exited 2 (interrupted, or a collection error)"),
    ],
)
def test_a_clean_run_that_fails_selects_nothing_or_cannot_collect_exits_1(tmp_path, failing, code, what):
    faults = catalog(tmp_path, {"name": "drops_space"})
    stack = FakeStack(failing={"drops_space": [SUITE[0]], "clean": failing}, codes={"clean": code})
    assert run_campaign(tmp_path, faults, stack) == 1
    clean = json.loads((tmp_path / "out" / "campaign.json").read_text())["clean"][0]
    assert clean["passed"] is False
    log = tmp_path / "out" / "runs" / "clean_m_inflight.log"
    assert clean["tests"] == (what if failing else f"{what}: {log}")


def test_perf_faults_run_against_a_clean_twin_and_their_clean_run_is_the_a_a_check_of_every_rule(tmp_path):
    against = '"--perf-workload", "smoke", "--perf-against", "m:inflight", "--perf-repeats", "6", '
    faults = catalog(
        tmp_path,
        {
            "name": "slow_ttft",
            "markers": '["perf"]',
            "keyword": '"concurrency_1"',
            "pytest_args": f'[{against}"--perf-compare-fail=ttft_ms.p50:15"]',
        },
        {
            "name": "slow_tokens",
            "markers": '["perf"]',
            "keyword": '"concurrency_1"',
            "pytest_args": f'[{against}"--perf-compare-fail", "output_tokens_per_s:10"]',
        },
    )
    stack = FakeStack(failing={"slow_ttft": [SUITE[3]], "slow_tokens": [SUITE[3]]})
    assert run_campaign(tmp_path, faults, stack) == 0
    assert stack.run_of("clean")[-9:] == [
        "--perf-workload",
        "smoke",
        "--perf-against",
        "m:inflight",
        "--perf-repeats",
        "6",
        "--perf-compare-fail=ttft_ms.p50:15",
        "--perf-compare-fail",
        "output_tokens_per_s:10",
    ]
    assert "--stand-in-fault" not in stack.run_of("clean")
    assert stack.run_of("slow_ttft")[-7:] == [
        "--perf-workload",
        "smoke",
        "--perf-against",
        "m:inflight",
        "--perf-repeats",
        "6",
        "--perf-compare-fail=ttft_ms.p50:15",
    ]


def test_an_accuracy_baseline_is_saved_by_the_clean_run_and_read_by_the_fault(tmp_path):
    faults = catalog(
        tmp_path,
        {
            "name": "drift",
            "markers": '["accuracy"]',
            "pytest_args": '["--accuracy-samples=5", "--accuracy-baseline={accuracy_baseline}"]',
        },
    )
    stack = FakeStack(failing={"drift": [SUITE[2]]})
    assert run_campaign(tmp_path, faults, stack) == 0
    baseline = str(tmp_path / "out" / "baselines" / "accuracy-baseline-m_inflight.json")
    assert stack.run_of("clean")[-3:] == ["--accuracy-samples=5", "--accuracy-save", baseline]
    assert stack.run_of("drift")[-2:] == ["--accuracy-samples=5", f"--accuracy-baseline={baseline}"]


def test_a_fault_whose_baseline_run_failed_is_not_run(tmp_path):
    faults = catalog(
        tmp_path, {"name": "drift", "markers": '["accuracy"]', "pytest_args": '["--accuracy-baseline", "{accuracy_baseline}"]'}
    )
    stack = FakeStack(failing={"clean": [SUITE[2]]})
    assert run_campaign(tmp_path, faults, stack) == 1
    assert [a for a in stack.argvs if "--stand-in-fault" in a] == []
    outcome = json.loads((tmp_path / "out" / "campaign.json").read_text())["faults"][0]
    assert (outcome["verdict"], outcome["why"]) == (
        "harness error",
        "not run: clean m:inflight (baselines) did not pass, so its baseline is not a clean one",
    )


def test_a_clean_run_passes_the_arguments_of_all_its_rows_but_those_that_read_a_baseline(tmp_path):
    faults = catalog(
        tmp_path,
        {"name": "slow", "markers": '["perf"]', "pytest_args": '["--perf-workload", "smoke"]'},
        {
            "name": "drift",
            "markers": '["accuracy"]',
            "pytest_args": '["--accuracy-dataset=cnn.json", "--accuracy-baseline", "{accuracy_baseline}", "--accuracy-strict"]',
        },
        {"name": "slower", "markers": '["perf"]', "pytest_args": '["--perf-workload=smoke"]'},
    )
    clean, timed = plan(list(load_catalog(faults).values()), tmp_path)[:2]
    baseline = str(tmp_path / "baselines" / "accuracy-baseline-m_inflight.json")
    assert clean.args == ("--accuracy-dataset=cnn.json", "--accuracy-strict", "--accuracy-save", baseline)
    assert timed.args == ("--perf-workload", "smoke")


def test_rows_of_one_deployment_that_give_an_option_different_values_are_refused(tmp_path, capsys):
    faults = catalog(
        tmp_path,
        {"name": "a", "pytest_args": '["--perf-workload", "smoke"]'},
        {"name": "b", "pytest_args": '["--perf-workload", "default"]'},
        {"name": "c"},
    )
    assert run_campaign(tmp_path, faults, FakeStack()) == 2
    assert capsys.readouterr().err == (
        "pytest-triton-llm faults: error: faults a and b of m:inflight give --perf-workload "
        "different values (smoke / default): its clean run can run only one\n"
    )


def test_the_reverse_table_lists_every_test_function_with_its_kills_or_why_none(tmp_path):
    faults = catalog(tmp_path, {"name": "drops_space"}, {"name": "eats_bytes"}, {"name": "off", "markers": '["functional"]'})
    reasons = tmp_path / "reasons.toml"
    reasons.write_text('"test_contract" = "reads the configs"\n"test_gone" = "was removed"\n')
    stack = FakeStack(
        failing={"drops_space": [SUITE[0], SUITE[1]], "eats_bytes": [SUITE[1]], "off": [SUITE[2]]}, not_injected=("off",)
    )
    assert run_campaign(tmp_path, faults, stack, reasons=reasons) == 1
    table = (tmp_path / "out" / "reverse-table.md").read_text().splitlines()
    assert table[2] == "3 test functions of the suites, 1 kill a fault; 3 faults run."
    assert table[4:] == [
        "| test | faults it kills | why none | fault runs that ran it |",
        "| --- | --- | --- | --- |",
        "| test_streaming.py::test_stream_equals_unary | drops_space, eats_bytes |  | 2 |",
        "| test_functional.py::test_contract | - | reads the configs | 2 |",  # a harness error's failure kills nothing
        f"| test_perf.py::test_load_point | - | {tables.NO_KILL} | 2 |",
    ]
    assert json.loads((tmp_path / "out" / "campaign.json").read_text())["stale_reasons"] == ["test_gone"]


def test_list_prints_one_line_per_fault_and_a_count(tmp_path, capsys):
    faults = catalog(tmp_path, {"name": "a", "smoke": "true"}, {"name": "b", "deployment": "m:v1", "kind": "sampling"})
    stack = FakeStack()
    assert run_campaign(tmp_path, faults, stack, "--list") == 0
    assert capsys.readouterr().out.splitlines() == [
        "a | streaming text | owner/repo#1 | Title 1 | postprocessing | streaming",
        "b | sampling | owner/repo#2 | Title 2 | postprocessing | streaming",
        "2 faults (1 smoke) on 2 deployments",
    ]
    assert stack.argvs == []


def test_smoke_runs_the_smoke_rows_and_the_clean_runs_of_their_deployments(tmp_path):
    faults = catalog(
        tmp_path,
        {"name": "a", "smoke": "true"},
        {"name": "b", "deployment": "m:v1"},
        {"name": "c", "smoke": "true", "deployment": "m:llmapi"},
    )
    stack = FakeStack(failing={"a": [SUITE[0]], "c": [SUITE[0]]})
    assert run_campaign(tmp_path, faults, stack, "--smoke") == 0
    ran = [(options(a).get("--stand-in-fault"), options(a)["--deployment"]) for a in stack.argvs[1:]]
    assert ran == [(None, "m:inflight"), (None, "m:llmapi"), ("a", "m:inflight"), ("c", "m:llmapi")]


def test_only_runs_the_named_faults_and_refuses_an_unknown_name(tmp_path, capsys):
    faults = catalog(tmp_path, {"name": "a"}, {"name": "b"})
    stack = FakeStack(failing={"b": [SUITE[0]]})
    assert run_campaign(tmp_path, faults, stack, "--only", "b") == 0
    assert [options(a).get("--stand-in-fault") for a in stack.argvs[1:]] == [None, "b"]
    assert run_campaign(tmp_path, faults, stack, "--only", "nope") == 2
    assert capsys.readouterr().err == "pytest-triton-llm faults: error: --only nope: no such fault (--list names them)\n"


class Slow:
    """A child that runs for `polls` polls, and says when it overlapped another."""

    live: list = []

    def __init__(self, label, polls, overlaps):
        self.label, self.left, self.overlaps = label, polls, overlaps
        Slow.live.append(self)
        overlaps[label] = {c.label for c in Slow.live if c is not self}
        for other in Slow.live:
            overlaps[other.label] |= {label} - {other.label}

    def poll(self):
        self.left -= 1
        if self.left > 0:
            return None
        if self in Slow.live:
            Slow.live.remove(self)
        return 0

    def stop(self):
        pass


def run_two_at_once(tmp_path, monkeypatch, *rows: dict, long: str = "") -> dict[str, set[str]]:
    """Plays a campaign of `rows` at --jobs 2 (each run lasts 3 polls, `long` 6): which runs overlapped which."""
    monkeypatch.setattr(schedule, "POLL_S", 0)
    runs = plan(list(load_catalog(catalog(tmp_path, *rows)).values()), tmp_path)
    overlaps, Slow.live = {}, []

    def start(argv, cwd, log, env=None):
        given = options(argv)
        timed = all(m in planning.TIMED_MARKERS for m in given["-m"].split(" or "))
        suffix = " (timed)" if timed else " (baselines)" if "--accuracy-save" in argv else ""
        label = given.get("--stand-in-fault", f"clean {given['--deployment']}{suffix}")
        return Slow(label, 6 if label == long else 3, overlaps)

    results = schedule.execute(runs, 2, start, ["suites"], tmp_path, tmp_path, lambda r: None, lambda r: True)
    assert [r.run.label for r in results] == [r.label for r in runs]
    return overlaps


def test_jobs_2_runs_the_clean_runs_first_then_faults_in_the_free_slots(tmp_path, monkeypatch):
    overlaps = run_two_at_once(
        tmp_path,
        monkeypatch,
        {"name": "a"},
        {"name": "b", "pytest_args": '["--accuracy-baseline", "{accuracy_baseline}"]'},
        {"name": "c", "deployment": "m:v1"},
        long="clean m:inflight (baselines)",
    )
    # b reads the baseline that the clean run of its own rows saves: it starts once that one ended, whatever else runs
    assert overlaps == {
        "clean m:inflight": {"clean m:inflight (baselines)"},
        "clean m:inflight (baselines)": {"clean m:inflight", "clean m:v1"},
        "clean m:v1": {"clean m:inflight (baselines)"},
        "a": {"b"},
        "b": {"a"},
        "c": set(),
    }


def test_jobs_2_runs_a_timed_run_alone_while_untimed_runs_behind_it_take_the_free_slot(tmp_path, monkeypatch):
    overlaps = run_two_at_once(
        tmp_path, monkeypatch, {"name": "a"}, {"name": "p", "markers": '["perf"]'}, {"name": "b"}, long="a"
    )
    # p waits for both slots while b runs beside the long a, then p runs alone
    assert overlaps == {
        "clean m:inflight": {"a"},
        "clean m:inflight (timed)": set(),
        "a": {"clean m:inflight", "b"},
        "b": {"a"},
        "p": set(),
    }


def collect_then_run_forever(children: list):
    """A start that answers the collection as the fake stack does and leaves every pytest run running (in `children`)."""

    def start(argv, cwd, log, env=None):
        if "--collect-only" in argv:
            return FakeStack()(argv, cwd, log, env)
        children.append(Done(None))
        return children[-1]

    return start


def test_ctrl_c_stops_the_running_pytest_and_exits_130(tmp_path, monkeypatch, capsys):
    faults = catalog(tmp_path, {"name": "drops_space"})
    children = []
    start = collect_then_run_forever(children)

    def interrupt(seconds):
        raise KeyboardInterrupt

    monkeypatch.setattr(schedule.time, "sleep", interrupt)
    assert campaign(arguments("--out", str(tmp_path / "out")), ["suites"], tmp_path, start=start, catalog=faults) == 130
    assert [c.stopped for c in children] == [True, True]  # the clean run and the fault's run beside it
    assert "pytest-triton-llm faults: interrupted after 0:00; every running pytest was stopped" in capsys.readouterr().err


def test_a_stopped_pytest_process_gets_sigterm_even_where_sigint_is_ignored(tmp_path):
    script = "import signal, sys, time; signal.signal(signal.SIGINT, signal.SIG_IGN); "
    script += "signal.signal(signal.SIGTERM, lambda *a: sys.exit(42)); print('up', flush=True); time.sleep(60)"
    child = schedule.PytestProcess([sys.executable, "-c", script], tmp_path, tmp_path / "log", {})
    deadline = time.monotonic() + 30
    while "up" not in (tmp_path / "log").read_text() and time.monotonic() < deadline:
        time.sleep(0.05)
    child.stop()
    assert child.poll() == 42


def test_sigterm_stops_the_campaign_as_ctrl_c_does(tmp_path, monkeypatch):
    faults = catalog(tmp_path, {"name": "drops_space"})
    children = []
    start = collect_then_run_forever(children)

    monkeypatch.setattr(schedule.time, "sleep", lambda seconds: signal.raise_signal(signal.SIGTERM))
    before = signal.getsignal(signal.SIGTERM)
    assert campaign(arguments("--out", str(tmp_path / "out")), ["suites"], tmp_path, start=start, catalog=faults) == 130
    assert [c.stopped for c in children] == [True, True]  # the clean run and the fault's run beside it
    assert signal.getsignal(signal.SIGTERM) is before


def test_the_faults_command_is_wired_into_the_cli(capsys):
    assert main(["faults", "--list"]) == 0
    count = capsys.readouterr().out.splitlines()[-1]
    assert count.endswith(" deployments") and " faults (" in count


def test_the_packaged_catalog_makes_a_campaign_plan(tmp_path):
    runs = plan(list(load_catalog().values()), tmp_path)
    faults = [r for r in runs if r.fault is not None]
    assert {r.label for r in runs if r.fault is None} == {label for r in faults for label in r.cleans}
    assert {r.deployment for r in runs if r.fault is None} == {r.deployment for r in faults}


def test_every_reason_names_a_test_function_of_the_suites():
    functions = set()
    for path in (ROOT / "suites").glob("test_*.py"):
        names = {n.name for n in ast.walk(ast.parse(path.read_text())) if isinstance(n, ast.FunctionDef)}
        functions |= {name for name in names if name.startswith("test_")}
        functions |= {f"{path.name}::{name}" for name in names if name.startswith("test_")}
    assert sorted(set(load_reasons()) - functions) == []


def test_a_fault_that_keeps_the_deployment_from_loading_is_caught_by_the_session_start(tmp_path):
    from pytest_triton_llm.faults.campaign.plan import Run, log_path
    from pytest_triton_llm.faults.campaign.schedule import Result
    from pytest_triton_llm.faults.campaign.verdicts import CAUGHT, NEVER_READY, judge_fault

    fault = load_catalog()["llmapi_missing_openai_module"]
    run = Run(fault.name, fault.deployment, fault.markers, fault.keyword, (), fault, cleans=("clean",))
    log_path(tmp_path, run.label).parent.mkdir(parents=True)
    log_path(tmp_path, run.label).write_text(
        f"! _pytest.outcomes.Exit: triton-llm: tritonserver for {fault.deployment} stopped before it was ready (model "
        "tensorrt_llm failed to load: ModuleNotFoundError: No module named 'openai')\n"
    )
    clean = Result(Run("clean", fault.deployment, fault.markers, "", ()), 0, 1.0, {"tests": []})
    outcome = judge_fault(Result(run, 4, 1.0, None), [clean], tmp_path)
    assert (outcome.verdict, outcome.caught_by) == (CAUGHT, [NEVER_READY])
    log_path(tmp_path, run.label).write_text("ERROR: --deployment smollm2-135m:nope: no such deployment\n")
    assert judge_fault(Result(run, 4, 1.0, None), [clean], tmp_path).verdict == "harness error"


def test_runs_at_once_share_the_cores_openmp_threads_and_a_run_alone_takes_them_all(monkeypatch):
    monkeypatch.delenv("OMP_NUM_THREADS", raising=False)
    monkeypatch.setenv("TRITON_LLM_KEEP_WARM", "0")
    monkeypatch.setattr(schedule.os, "sched_getaffinity", lambda pid: {0, 1, 2, 3})
    assert schedule.run_env(alone=False, jobs=2) == {"OMP_NUM_THREADS": "2"}
    assert schedule.run_env(alone=True, jobs=2) == {"OMP_NUM_THREADS": "4"}
    assert schedule.run_env(alone=False, jobs=8) == {"OMP_NUM_THREADS": "1"}
    monkeypatch.setenv("OMP_NUM_THREADS", "3")  # the user's choice stands
    assert schedule.run_env(alone=False, jobs=2) == {}


def test_runs_keep_their_servers_warm_for_the_next_run_unless_the_user_chose(monkeypatch):
    monkeypatch.setenv("OMP_NUM_THREADS", "3")
    monkeypatch.delenv("TRITON_LLM_KEEP_WARM", raising=False)
    assert schedule.run_env(alone=True, jobs=1) == {"TRITON_LLM_KEEP_WARM": str(schedule.WARM_BETWEEN_RUNS_S)}
    monkeypatch.setenv("TRITON_LLM_KEEP_WARM", "0")
    assert schedule.run_env(alone=True, jobs=1) == {}


def test_a_server_that_never_got_ready_catches_only_a_fault_that_keeps_models_from_loading(tmp_path):
    from pytest_triton_llm.faults.campaign.plan import Run, log_path
    from pytest_triton_llm.faults.campaign.schedule import Result
    from pytest_triton_llm.faults.campaign.verdicts import HARNESS, judge_fault

    fault = load_catalog()["stop_words_ignored"]
    assert not fault.stops_loading
    run = Run(fault.name, fault.deployment, fault.markers, fault.keyword, (), fault, cleans=("clean",))
    log_path(tmp_path, run.label).parent.mkdir(parents=True)
    log_path(tmp_path, run.label).write_text(
        f"! _pytest.outcomes.Exit: triton-llm: tritonserver for {fault.deployment} stopped before it was ready (exit code -6)\n"
    )
    clean = Result(Run("clean", fault.deployment, fault.markers, "", ()), 0, 1.0, {"tests": []})
    assert judge_fault(Result(run, 4, 1.0, None), [clean], tmp_path).verdict == HARNESS
    assert verdicts.host_broke_the_start(Result(run, 4, 1.0, None), tmp_path)


class StartsThenBreaks(FakeStack):
    """The first run of fault `broken` stops before its server is ready (exit 4, as the session's one line says)."""

    def __init__(self, broken: str, times: int = 1):
        super().__init__(failing={broken: [SUITE[0]]})
        self.broken, self.left = broken, times

    def __call__(self, argv, cwd, log, env=None):
        option = options(argv)
        if option.get("--stand-in-fault") == self.broken and self.left:
            self.left -= 1
            self.argvs.append(argv)
            log.parent.mkdir(parents=True, exist_ok=True)
            log.write_text(
                f"! _pytest.outcomes.Exit: triton-llm: tritonserver for {option['--deployment']} stopped "
                "before it was ready (exit code -6)\n"
            )
            return Done(4)
        return super().__call__(argv, cwd, log, env)


def test_a_run_whose_server_the_host_broke_at_start_runs_once_more_and_keeps_its_first_log(tmp_path, capsys):
    faults = catalog(tmp_path, {"name": "drops_space"})
    stack = StartsThenBreaks("drops_space")
    assert run_campaign(tmp_path, faults, stack) == 0
    assert [options(a).get("--stand-in-fault") for a in stack.argvs if "--collect-only" not in a].count("drops_space") == 2
    assert (tmp_path / "out" / "runs" / "drops_space.first.log").read_text().endswith("(exit code -6)\n")
    retry_line = next(line for line in capsys.readouterr().out.splitlines() if line.startswith("retrying "))
    assert retry_line.startswith("retrying drops_space once: pytest exited 4 (a usage error), its server never ready")


def test_a_run_the_host_breaks_twice_is_a_harness_error(tmp_path):
    faults = catalog(tmp_path, {"name": "drops_space"})
    stack = StartsThenBreaks("drops_space", times=2)
    assert run_campaign(tmp_path, faults, stack) == 1
    assert [options(a).get("--stand-in-fault") for a in stack.argvs if "--collect-only" not in a].count("drops_space") == 2
    outcome = json.loads((tmp_path / "out" / "campaign.json").read_text())["faults"][0]
    assert (outcome["name"], outcome["verdict"]) == ("drops_space", "harness error")
