"""The triton-llm section of pytest's terminal summary."""

from __future__ import annotations


from ..stack.lock import DUMMY, DUMMY_LABEL
from ..perf.budgets import match_label
from ..perf.mlperf import verdict_line
from ..perf.judged_by import judged_by
from ..perf.publish import dummy_deployments
from ..perf.metrics import V1_PERF
from ..common.tables import table


def summary_lines(state, config) -> list[str]:
    # from the report: with pytest-xdist it holds what every worker served
    records = {d: r for d, r in state.report.deployments.items() if "engine_digest" in r}
    fault = fault_lines(state.fault_line(), records)
    if not records and set(state.report.extra) <= {"server"}:  # nothing served or measured (/v1 records run-level)
        return fault
    order = [ref.id for ref in state.selected]  # lock order, whichever worker reported first
    rows = []
    for deployment_id, r in sorted(records.items(), key=lambda kv: order.index(kv[0]) if kv[0] in order else len(order)):
        how = f"{'cached' if r['engine_cached'] else 'built'} {r['engine_s']:.1f} s"
        if r.get("weights") == DUMMY:  # its numbers are speed only
            how += f", {DUMMY_LABEL}"
        engine = f"{r['engine']} {r['engine_digest'][:12]} ({how})"
        rows.append(
            [
                deployment_id,
                engine,
                f"Triton {r['server_version']} ({r['runtime']})",
                f"{r['server_ready_s']:.1f} s",
                r["server_log"],
            ]
        )
    lines = fault + (table(["deployment", "engine", "server", "ready in", "server log"], rows) if rows else [])
    lines += code_lines(records)
    lines += migration_v1_lines(records)
    perf = {**state.report.perf_results(), **state.report.v1_perf_results()}
    lines += perf_lines(perf, dummy_deployments(state.report.deployments))
    lines += sweep_lines(state.report.perf_sweeps())
    for key, value in state.report.extra.items():  # run-level measurements the suites recorded
        if key == V1_PERF or (key == "server" and not records):  # in the perf tables above; no Triton served
            continue
        lines.append(f"{key}: {value.get('summary', value) if isinstance(value, dict) else value}")
    startup = state.startup_s if state.startup_s is not None else state.report.worker_times.get("startup_s")
    first_test = state.first_test_s if state.first_test_s is not None else state.report.worker_times.get("first_test_s")
    if startup is not None:
        first = f"; the first test ran at {first_test:.1f} s" if first_test is not None else ""
        lines.append(f"session start-up: {startup:.1f} s until the first deployment was ready{first}")
    lines.append(wall_time_line(config, state.wall_s))
    if state.options.report:
        lines.append(f"report: {state.options.report}")
    return lines


def skip_reasons(items) -> list[str]:
    """--collect-only: how many collected tests will be skipped, per reason (what the served stack lacks, ...)."""
    reasons: dict[str, int] = {}
    for item in items:
        mark = item.get_closest_marker("skip")
        if mark is not None:
            reason = mark.kwargs.get("reason") or (mark.args[0] if mark.args else "")
            reasons[reason] = reasons.get(reason, 0) + 1
    if not reasons:
        return [f"{len(items)} tests collected; none will be skipped"]
    return [
        f"{len(items)} tests collected; {sum(reasons.values())} will be skipped:",
        *(f"  {n} x {reason}" for reason, n in sorted(reasons.items(), key=lambda kv: -kv[1])),
    ]


def fault_lines(line: str | None, records: dict) -> list[str]:
    """A fault run says so first, and where the fault was (and was not) injected."""
    if line is None:
        return []
    where = [
        f"  {d}: " + ("injected into " + f["model"] if f["injected"] else f"not injected: {f['why']}")
        for d, r in records.items()
        if (f := r.get("stand_in_fault"))
    ]
    return [line, *where, ""]


def code_lines(records: dict) -> list[str]:
    """Which code served each python model of each deployment: the project's stand-in, upstream's of a tag, the image's."""
    rows = [[d, model, origin] for d, r in records.items() for model, origin in sorted(r.get("model_code", {}).items())]
    return ["", *table(["deployment", "model", "code"], rows)] if rows else []


def migration_v1_lines(records: dict) -> list[str]:
    """The migration gate to /v1, per Triton deployment: outputs, streams and throughput side by side in one line each."""
    lines = []
    for deployment, r in records.items():
        metrics = r.get("metrics", {})
        if (prompts := metrics.get("migration_v1_prompts")) is not None:
            lines.append(
                f"migration to /v1 ({deployment} vs {prompts['against']}, {prompts['family']}): {prompts['identical']} of "
                f"{prompts['prompts']} greedy answers identical (rule: {prompts['rule']})"
            )
        if (streams := metrics.get("migration_v1_streams")) is not None:
            sides = {"triton": streams["triton"], "/v1": streams["v1"]}
            said = [f"{side} {'adds up' if s['stream'] == s['unary'] else 'DIFFERS'}" for side, s in sides.items() if s]
            lines.append(f"migration to /v1 ({deployment}): streams against unary answers: {', '.join(said)}")
        if (rouge := metrics.get("migration_v1_rouge")) is not None:
            drops = ", ".join(f"{m} {r['mean_drop']:+.2f} ({r['verdict']})" for m, r in rouge["paired"].items())
            detectable = max(r["detectable_drop"] for r in rouge["paired"].values())
            lines.append(
                f"migration to /v1 ({deployment}): ROUGE drop on {rouge['articles']} articles, /v1 against Triton: {drops}; "
                f"allowed {rouge['max_drop']:g}, detectable {detectable:.2f} at power {rouge['power']:g}"
            )
        if (perf := metrics.get("migration_v1_perf")) is not None:
            budget = perf["budget"]  # the pair entry's floor, else --perf-migration-floor's
            floor = f"{budget['min_throughput_ratio']}" + (f" ({budget['option']})" if "option" in budget else "")
            ttft = {side: (perf[side]["ttft_ms"] or {}).get("p50") for side in ("v1", "triton")}
            lines.append(
                f"migration to /v1 ({deployment}): {perf['v1']['output_tokens_per_s']} tokens/s on /v1 against "
                f"{perf['triton']['output_tokens_per_s']} at concurrency {perf['concurrency']} "
                f"({perf['v1_vs_triton_throughput_ratio']}x, the median of rounds {perf['round_ratios']}; floor {floor}); "
                f"TTFT p50 {ttft['v1']} against {ttft['triton']} ms"
            )
    return ["", *lines] if lines else []


def perf_lines(perf: dict, dummy: frozenset[str] = frozenset()) -> list[str]:
    """perf: {deployment: {load point: report entry}} -> the measurements' table, then per load point whether it was
    judged, against which budget and on which hardware (a GPU without a budget must not pass unnoticed). Deployments in
    `dummy` are marked: their engines have random weights, so their numbers are speed only."""
    if not perf:
        return []
    entries = [(f"{d} ({DUMMY_LABEL})" if d in dummy else d, name, p) for d, points in perf.items() for name, p in points.items()]
    headers = ["deployment", "load point", "req/s", "tok/s", "latency p50/p99 ms", "TTFT p50 ms", "ITL p50 ms"]
    rows = [
        [d, name, p["throughput_rps"], p["output_tokens_per_s"], _pair(p["latency_ms"]), _stat(p["ttft_ms"]), _stat(p["itl_ms"])]
        for d, name, p in entries
    ]
    verdicts = [[d, name, p.get("hardware", "-"), perf_verdict(p), compare_verdict(p)] for d, name, p in entries]
    files = sorted({p["budget_file"] for _, _, p in entries if "budget_file" in p})
    return [
        "",
        *table(headers, rows),
        *repeat_lines(entries),
        *goodput_lines(entries),
        *mlperf_lines(entries),
        *speculation_lines(entries),
        "",
        *table(["deployment", "load point", "hardware", "budget", "baseline"], verdicts),
        *(f"perf budgets: {f}" for f in files),
        judged_line([p for _, _, p in entries]),
    ]


def judged_line(points: list[dict]) -> str:
    """What judged this run's perf, in one line (a nightly job's summary must say whether anything did)."""
    return f"perf judged by: {judged_by(points)}"


REPEATED = ("output_tokens_per_s", "latency_ms.p99", "ttft_ms.p99")  # what the spread table shows of --perf-repeats


def repeat_lines(entries: list[tuple[str, str, dict]]) -> list[str]:
    """With --perf-repeats: per load point the runs' mean, 95% t interval and CV of throughput and tail latencies."""
    repeated = [(d, name, p) for d, name, p in entries if p.get("repeats")]
    if not repeated:
        return []
    headers = ["deployment", "load point", "runs", *(f"{m} mean [95% CI] (CV)" for m in REPEATED)]
    rows = [[d, name, len(p.get("runs", [])), *(_spread(p["repeats"].get(m)) for m in REPEATED)] for d, name, p in repeated]
    return ["", *table(headers, rows)]


def speculation_lines(entries: list[tuple[str, str, dict]]) -> list[str]:
    """A speculating deployment's load points: the draft tokens its requests proposed, those kept, the rate."""
    counted = [(d, name, p["speculation"]) for d, name, p in entries if p.get("speculation")]
    if not counted:
        return []
    headers = ["deployment", "load point", "requests", "draft tokens", "accepted", "acceptance rate"]
    rows = [[d, name, s["requests"], s["drafted"], s["accepted"], s["acceptance_rate"]] for d, name, s in counted]
    return ["", *table(headers, rows)]


def goodput_lines(entries: list[tuple[str, str, dict]]) -> list[str]:
    """With --perf-slo: per load point the SLOs, the share of requests within all of them and their rate."""
    judged = [(d, name, p["goodput"]) for d, name, p in entries if p.get("goodput")]
    if not judged:
        return []
    rows = [
        [
            d,
            name,
            ", ".join(f"{m} <= {v:g}" for m, v in g["slos"].items()),
            f"{g['good']}/{g['total']}",
            f"{g['fraction']:.1%}",
            g["goodput_rps"],
        ]
        for d, name, g in judged
    ]
    return ["", *table(["deployment", "load point", "SLOs", "within", "fraction", "goodput req/s"], rows)]


def mlperf_lines(entries: list[tuple[str, str, dict]]) -> list[str]:
    """With --perf-mlperf: per load point VALID or INVALID under the benchmark's limits, and why."""
    judged = [(d, name, p["mlperf"]) for d, name, p in entries if p.get("mlperf")]
    if not judged:
        return []
    rows = [[d, name, m["benchmark"], _num(m["ttft_p99_ms"]), _num(m["tpot_p99_ms"]), verdict_line(m)] for d, name, m in judged]
    return ["", *table(["deployment", "load point", "MLPerf", "TTFT p99 ms", "TPOT p99 ms", "verdict"], rows)]


def sweep_lines(sweeps: dict) -> list[str]:
    """With --perf-sweep: per deployment its steps, where it stopped and the knee."""
    lines = []
    for deployment, sweep in sweeps.items():
        rows = [
            [
                s["concurrency"],
                s["output_tokens_per_s"] if s["ci95"] is None else f"{s['output_tokens_per_s']:g} {s['ci95']}",
                "-" if s.get("gain") is None else f"{s['gain_pct']:+.1f}%",
                _pair(s["latency_ms"]),
                "-" if not s.get("goodput") else f"{s['goodput']['goodput_rps']:g} ({s['goodput']['fraction']:.0%})",
                "knee" if s["concurrency"] == sweep["knee"] else "",
            ]
            for s in sweep["steps"]
        ]
        headers = ["concurrency", "tok/s", "gain", "latency p50/p99 ms", "goodput req/s (within)", ""]
        knee = f"knee at concurrency={sweep['knee']}" if sweep["knee"] is not None else "no knee"
        lines += ["", f"perf sweep {deployment} (workload {sweep['workload']}): {knee}, {sweep['knee_why']}; {sweep['stopped']}"]
        lines += table(headers, rows)
    return lines


def _num(value: float | None) -> str:
    return "-" if value is None else f"{value:g}"


def _spread(s: dict | None) -> str:
    if s is None:
        return "-"
    if s["ci_low"] is None:
        return f"{s['mean']:.4g}"
    return f"{s['mean']:.4g} [{s['ci_low']:.4g}, {s['ci_high']:.4g}] ({s['cv']:.0%})"


def perf_verdict(entry: dict) -> str:
    """One load point's budget verdict: judged by which budget (its place in the file, what it matches) and how it
    fared; or not judged, and why (no budget matches this deployment on that hardware and image)."""
    if "judged" not in entry:  # the test failed (errors, missing tokens) before the budget check
        return "not judged: the load point failed before its budget check"
    if str(entry.get("budget", "")).startswith("calibrating"):
        return f"not judged: {entry['budget']}"
    if not entry["judged"]:
        return f"not judged: no budget for hardware '{entry['hardware']}', image '{entry['image']}' in {entry['budget_file']}"
    match = entry["budget_match"]
    missed = [limit for limit, verdict in entry["budget"].items() if verdict == "MISSED"]
    unsure = [limit for limit, verdict in entry["budget"].items() if verdict == "inconclusive"]
    outcome = f"MISSED {', '.join(missed)}" if missed else f"inconclusive {', '.join(unsure)}" if unsure else "ok"
    if entry.get("runs"):
        outcome += f" ({len(entry['runs'])} runs)"
    return f"judged by budget #{match['entry']} [{match_label(match)}]: {outcome}"


def compare_verdict(entry: dict) -> str:
    """--perf-compare's or --perf-against's verdict at one load point: not compared, regressed (how), or ok, with what
    it could catch and what differs from the baseline (another image or engine: an upgrade gate)."""
    compared = entry.get("compared")
    if compared is None:
        return "not compared"
    outcome = f"REGRESSED: {'; '.join(compared['regressions'])}" if compared["regressions"] else "ok"
    if "against" in compared:  # --perf-against: a reference measured in the same rounds
        across = f" against {compared['against']} ({compared['rounds']} interleaved rounds)"
    else:
        across = f" (across {', '.join(compared['differs'])})" if compared["differs"] else ""
    return f"{outcome}{across}; {'; '.join(compared['power'])}"


def _stat(stats: dict | None, key: str = "p50") -> str:
    return "-" if not stats else f"{stats[key]:g}"


def _pair(stats: dict | None) -> str:
    return "-" if not stats else f"{stats['p50']:g} / {stats['p99']:g}"


def wall_time_line(config, wall_s: float) -> str:
    """This run's wall time, next to the last run of the same selection with another worker count
    (pytest's cache keeps them, so `-n 2` can be read against `-n 1`)."""
    workers = getattr(config.option, "numprocesses", None) or 1
    line = f"wall time: {wall_s:.1f} s with {workers} worker{'s' if workers != 1 else ''}"
    cache = getattr(config, "cache", None)
    if cache is None:
        return line
    selection = "|".join(
        [
            config.option.markexpr or "",
            config.option.keyword or "",
            *sorted(config.option.deployment),
            *sorted(str(a) for a in config.args),
        ]
    )
    key = "triton_llm/wall_times"
    times = cache.get(key, {})
    others = {w: t for w, t in times.get(selection, {}).items() if w != str(workers)}
    times.setdefault(selection, {})[str(workers)] = round(wall_s, 1)
    cache.set(key, times)
    if others:
        line += (
            " (same selection, "
            + ", ".join(f"{w} worker{'s' if w != '1' else ''}: {t:.1f} s" for w, t in sorted(others.items()))
            + ")"
        )
    return line
