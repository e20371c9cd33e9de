"""The triton-llm section of pytest's terminal summary."""

from __future__ import annotations


def table(headers: list[str], rows: list[list[str]]) -> list[str]:
    widths = [max(len(str(x)) for x in col) for col in zip(headers, *rows, strict=True)]
    fmt = "  ".join(f"{{:<{w}}}" for w in widths)
    return [fmt.format(*headers), fmt.format(*("-" * w for w in widths))] + [fmt.format(*map(str, r)) for r in rows]


def summary_lines(state) -> list[str]:
    records = state.manager.records if state.manager else {}
    if not records:
        return []
    rows = []
    for deployment_id, r in records.items():
        engine = f"{r['engine']} {r['engine_digest'][:12]} ({'cached' if r['engine_cached'] else 'built'} {r['engine_s']:.1f} s)"
        rows.append(
            [
                deployment_id,
                engine,
                f"Triton {r['server_version']} ({r['runtime']})",
                f"{r['server_ready_s']:.1f} s",
                r["server_log"],
            ]
        )
    lines = table(["deployment", "engine", "server", "ready in", "server log"], rows)
    perf = state.report.perf_results()
    if perf:
        headers = ["deployment", "load point", "req/s", "tok/s", "latency p50/p99 ms", "TTFT p50 ms", "ITL p50 ms"]
        rows = [
            [
                d,
                name,
                p["throughput_rps"],
                p["output_tokens_per_s"],
                _pair(p["latency_ms"]),
                _stat(p["ttft_ms"]),
                _stat(p["itl_ms"]),
            ]
            for d, points in perf.items()
            for name, p in points.items()
        ]
        lines += ["", *table(headers, rows)]
    for key, value in state.report.extra.items():  # run-level measurements the suites recorded
        lines.append(f"{key}: {value.get('summary', value) if isinstance(value, dict) else value}")
    if state.startup_s is not None:
        first = f"; the first test ran at {state.first_test_s:.1f} s" if state.first_test_s is not None else ""
        lines.append(f"session start-up: {state.startup_s:.1f} s until the first deployment was ready{first}")
    if state.options.report:
        lines.append(f"report: {state.options.report}")
    return lines


def _stat(stats: dict | None, key: str = "p50") -> str:
    return "-" if not stats else f"{stats[key]:g}"


def _pair(stats: dict | None) -> str:
    return "-" if not stats else f"{stats['p50']:g} / {stats['p99']:g}"
