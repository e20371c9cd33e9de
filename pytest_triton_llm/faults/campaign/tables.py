"""The campaign's tables: the fault table (each fault, what caught it) and the reverse table (each test function of the
suites, the faults it kills or why none can fail it: fixtures/fault_reasons.toml)."""

from __future__ import annotations

from pathlib import Path

from ...common.schema import SchemaError, load_toml
from ..catalog import CATALOG
from .schedule import Result
from .verdicts import CAUGHT, HARNESS, MISSED, FaultOutcome

REASONS = CATALOG.parent / "fault_reasons.toml"
NO_KILL = "kills no fault yet"


def _cell(text) -> str:
    return str(text).replace("|", "\\|").replace("\n", " ")


def _table(headers: list[str], rows: list[list]) -> list[str]:
    lines = ["| " + " | ".join(headers) + " |", "|" + " --- |" * len(headers)]
    return lines + ["| " + " | ".join(_cell(c) for c in row) + " |" for row in rows]


def function_of(nodeid: str) -> str:
    """A node id's test function: <module file>::<function>, parameters dropped."""
    path, _, rest = nodeid.partition("::")
    return f"{Path(path).name}::{rest.split('[', 1)[0].split('::')[-1]}"


def fault_table(outcomes: list[FaultOutcome], cleans: list[tuple[Result, bool, str]], header: str) -> str:
    rows = []
    for o in outcomes:
        caught = {CAUGHT: "yes", MISSED: "no"}.get(o.verdict, f"{HARNESS}: {o.why}")
        first = f"`{o.caught_by[0]}`" if o.caught_by else "-"
        rows.append([o.fault.name, o.fault.kind, f"[{o.fault.issue}]({o.fault.url})", caught, first, f"{o.result.seconds:.1f}"])
    clean_rows = [
        [r.run.deployment, " or ".join(r.run.markers), r.run.keyword or "-", "yes" if ok else "NO", what, f"{r.seconds:.1f}"]
        for r, ok, what in cleans
    ]
    lines = [
        "# Fault campaign",
        "",
        header,
        "",
        *_table(["fault", "class", "upstream issue", "caught", "first test that failed", "s"], rows),
        "",
        "## Clean runs",
        "",
        *_table(["deployment", "markers", "-k", "passed", "tests", "s"], clean_rows),
    ]
    return "\n".join(lines) + "\n"


def ran_in(outcomes: list[FaultOutcome]) -> dict[str, int]:
    """Test function -> how many fault runs that tell (caught or missed) ran it (skipped or not selected: not run)."""
    runs: dict[str, int] = {}
    for o in (o for o in outcomes if o.verdict in (CAUGHT, MISSED)):
        for key in {function_of(t["nodeid"]) for t in o.result.tests if t["outcome"] != "skipped"}:
            runs[key] = runs.get(key, 0) + 1
    return runs


def kills(outcomes: list[FaultOutcome]) -> dict[str, list[str]]:
    """Test function -> the faults it caught (it failed with the fault in, not on the clean run)."""
    killed: dict[str, list[str]] = {}
    for o in outcomes:
        for key in dict.fromkeys(function_of(n) for n in o.caught_by):
            killed.setdefault(key, []).append(o.fault.name)
    return killed


def load_reasons(path: Path = REASONS) -> dict[str, str]:
    """fixtures/fault_reasons.toml: test function -> why no stand-in fault can fail it."""
    data = load_toml(path)
    wrong = [k for k, v in data.items() if not isinstance(v, str)]
    if wrong:
        raise SchemaError(f"{path}: {wrong[0]!r}: expected a string (why no stand-in fault can fail the test)")
    return data


def reverse_rows(functions: list[str], outcomes: list[FaultOutcome], reasons: dict[str, str]) -> list[dict]:
    """One row per test function: the faults it kills, or why it kills none (its module::name's reason, its name's),
    and how many fault runs ran it."""
    killed, ran = kills(outcomes), ran_in(outcomes)
    rows = []
    for key in functions:
        names = killed.get(key, [])
        why = "" if names else reasons.get(key, reasons.get(key.split("::")[-1], NO_KILL))
        rows.append({"test": key, "kills": names, "why": why, "fault_runs": ran.get(key, 0)})
    return rows


def stale_reasons(rows: list[dict], reasons: dict[str, str]) -> list[str]:
    """Reasons that name no collected test, or a test that killed a fault after all."""
    names = {row["test"] for row in rows} | {row["test"].split("::")[-1] for row in rows}
    killers = {row["test"] for row in rows if row["kills"]} | {row["test"].split("::")[-1] for row in rows if row["kills"]}
    return sorted(k for k in reasons if k not in names or k in killers)


def reverse_table(rows: list[dict], header: str) -> str:
    cells = [[r["test"], ", ".join(r["kills"]) or "-", r["why"], r["fault_runs"]] for r in rows]
    lines = [
        "# Tests and the faults they kill",
        "",
        header,
        "",
        *_table(["test", "faults it kills", "why none", "fault runs that ran it"], cells),
    ]
    return "\n".join(lines) + "\n"
