"""The terminal summary's lines for the migration gate to /v1: one line per check, from the report's records."""

from pytest_triton_llm.plugin.terminal import migration_v1_lines


def _drift(mean_drop: float, verdict: str, detectable: float) -> dict:
    return {"mean_drop": mean_drop, "verdict": verdict, "detectable_drop": detectable}


def test_the_rouge_line_gives_each_metrics_drop_verdict_and_the_gates_power():
    records = {
        "smollm2-135m:inflight": {
            "metrics": {
                "migration_v1_rouge": {
                    "articles": 60,
                    "max_drop": 2.0,
                    "power": 0.8,
                    "paired": {
                        "rouge1": _drift(0.41, "pass", 3.1),
                        "rouge2": _drift(-0.2, "pass", 2.6),
                        "rougeLsum": _drift(2.9, "fail", 3.4),
                    },
                }
            }
        }
    }
    assert migration_v1_lines(records) == [
        "",
        "migration to /v1 (smollm2-135m:inflight): ROUGE drop on 60 articles, /v1 against Triton: rouge1 +0.41 (pass), "
        "rouge2 -0.20 (pass), rougeLsum +2.90 (fail); allowed 2, detectable 3.40 at power 0.8",
    ]


def test_a_deployment_without_migration_records_gives_no_lines():
    assert migration_v1_lines({"smollm2-135m:v1": {"metrics": {"accuracy": {}}}}) == []


def test_the_perf_line_gives_both_sides_tokens_per_s_the_round_ratios_and_the_floor():
    side = lambda rate, ttft: {"output_tokens_per_s": rate, "ttft_ms": {"p50": ttft}}  # noqa: E731
    perf = {
        "concurrency": 4,
        "triton": side(60.0, 165.1),
        "v1": side(18.3, 253.7),
        "round_ratios": [0.285, 0.288, 0.276],
        "v1_vs_triton_throughput_ratio": 0.285,
        "budget": {"file": "fixtures/openai_migration.toml", "min_throughput_ratio": 0.6},
    }
    assert migration_v1_lines({"e:inflight": {"metrics": {"migration_v1_perf": perf}}}) == [
        "",
        "migration to /v1 (e:inflight): 18.3 tokens/s on /v1 against 60.0 at concurrency 4 (0.285x, the median of "
        "rounds [0.285, 0.288, 0.276]; floor 0.6); TTFT p50 253.7 against 165.1 ms",
    ]
