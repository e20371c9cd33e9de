"""The terminal summary's lines for the migration gate to /v1: one line per check, from the report's records."""

from pytest_triton_llm.terminal import migration_v1_lines


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
