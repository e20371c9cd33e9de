"""A compatibility matrix from run reports: suites x images, with outcomes and key metrics (markdown)."""

from __future__ import annotations

import json
from collections import Counter, defaultdict
from pathlib import Path

from ..common.errors import TritonLLMError
from ..host.images import NO_IMAGE
from ..stack.lock import DUMMY, DUMMY_LABEL
from ..perf.judged_by import judged_by


class ReportError(TritonLLMError, ValueError):
    pass


def load_report(path: Path) -> dict:
    try:
        document = json.loads(path.read_text())
    except (OSError, json.JSONDecodeError) as exc:
        raise ReportError(f"{path}: not a readable JSON report ({exc})") from None
    if not isinstance(document, dict) or document.get("schema") != 1 or "tests" not in document:
        raise ReportError(f"{path}: not a pytest-triton-llm report (written by --triton-llm-report, schema 1)")
    return document


def reports_in(paths: list[Path]) -> tuple[list[Path], list[str]]:
    """(report files, notes): files as given, and the reports in each folder (searched recursively); a folder's JSON
    that is not a report (an accuracy baseline, a perf baseline kept beside it) is left out with a note."""
    found, notes = [], []
    for path in paths:
        if not path.is_dir():
            found.append(path)
            continue
        for candidate in sorted(path.rglob("*.json")):
            try:
                load_report(candidate)
            except ReportError as exc:
                notes.append(f"skipped {exc}")
                continue
            found.append(candidate)
    return found, notes


def served_by(document: dict) -> str:
    """What answered as tensorrt_llm in a report's deployments (the project stand-in, TensorRT-LLM x.y), joined."""
    found = sorted({d.get("served_by", "not recorded") for d in document.get("deployments", {}).values()})
    return " + ".join(found) or "-"


def column(document: dict, path: Path) -> str:
    """The image a report ran on (images.NO_IMAGE for a tritonserver of the host's own), or the file name."""
    options = document.get("run", {}).get("options", {})
    image = options.get("image")
    if image and image != NO_IMAGE:
        return image.removeprefix("nvcr.io/nvidia/tritonserver:").removesuffix("-python-py3")
    versions = {d.get("server_version") for d in document.get("deployments", {}).values()} - {None}
    # pytest ran inside a serving image, on the image's own tritonserver (stack/runtimes/discovery.py)
    where = "in-image" if document.get("server", {}).get("origin") == "the serving image's" else "local"
    return f"{where} (Triton {', '.join(sorted(versions))})" if versions else path.stem


def suite_of(nodeid: str) -> str:
    name = nodeid.split("::", 1)[0].rsplit("/", 1)[-1]
    return name.removeprefix("test_").removesuffix(".py")


def cell(outcomes: Counter) -> str:
    if not outcomes:
        return "-"
    bad = outcomes["failed"] + outcomes["error"]
    parts = [f"{bad} failed"] if bad else []
    parts += [f"{outcomes[k]} {k}" for k in ("passed", "skipped") if outcomes[k]]
    return ("FAIL " if bad else "") + ", ".join(parts)


def metrics(document: dict) -> dict[str, str]:
    found = {}
    points = [p for info in document.get("deployments", {}).values() for p in info.get("metrics", {}).get("perf", {}).values()]
    if points:
        found["perf judged by"] = judged_by(points)
    ratio = document.get("inflight_vs_v1_throughput_ratio")
    if ratio is not None:
        found["inflight / V1 throughput"] = f"{ratio:.2f}x"
    for deployment, info in document.get("deployments", {}).items():
        accuracy = info.get("metrics", {}).get("accuracy", {})
        if "rouge1" in accuracy:
            found[f"ROUGE-1 {deployment}"] = f"{accuracy['rouge1']:.2f}"
        perf = info.get("metrics", {}).get("perf", {})
        if perf:
            best = max(p.get("output_tokens_per_s", 0) for p in perf.values())
            dummy = f" ({DUMMY_LABEL})" if info.get("weights") == DUMMY else ""  # random weights: speed only
            found[f"peak tok/s {deployment}{dummy}"] = f"{best:.1f}"
        if info.get("server_ready_s") is not None:
            found[f"ready s {deployment}"] = f"{info['server_ready_s']:.1f}"
    return found


def render_matrix(paths: list[Path]) -> str:
    if len(paths) < 1:
        raise ReportError("give at least one report")
    columns: list[str] = []
    served: dict[str, str] = {}
    outcomes: dict[str, dict[str, Counter]] = defaultdict(lambda: defaultdict(Counter))
    values: dict[str, dict[str, str]] = defaultdict(dict)
    for path in paths:
        document = load_report(path)
        name = column(document, path)
        while name in columns:  # two reports of one image: keep both columns apart
            name += "'"
        columns.append(name)
        served[name] = served_by(document)
        for test in document["tests"]:
            outcomes[suite_of(test["nodeid"])][name][test["outcome"]] += 1
        for key, value in metrics(document).items():
            values[key][name] = value

    def row(first: str, cells: list[str]) -> str:
        return "| " + " | ".join([first, *cells]) + " |"

    lines = [row("suite", columns), row("---", ["---"] * len(columns))]
    # first: what answered as tensorrt_llm; a column of the stand-in says nothing of TensorRT-LLM's compatibility
    lines += [row("**tensorrt_llm served by**", [served[c] for c in columns])]
    lines += [row(suite, [cell(outcomes[suite].get(c, Counter())) for c in columns]) for suite in sorted(outcomes)]
    if values:
        lines += ["", row("metric", columns), row("---", ["---"] * len(columns))]
        lines += [row(key, [values[key].get(c, "-") for c in columns]) for key in sorted(values)]
    return "\n".join(lines) + "\n"
