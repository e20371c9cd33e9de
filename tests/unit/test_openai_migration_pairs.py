"""fixtures/openai_migration.toml is checked before the migration gate reads it: a misspelt key or a bad value is one
line naming the entry, never a silent fallback to the engine's own rule."""

import pytest

from pytest_triton_llm.openai.migration import PAIRS_FILE, PairsFileError, load_pairs, pair_entry


def test_the_shipped_pairs_file_passes_its_checks_and_the_default_pair_is_judged():
    assert set(load_pairs()) == {"smollm2-135m"}
    assert pair_entry("smollm2-135m", "llama-cpp-python") == {
        "equality": {"min_identical_prefix_tokens": 2, "min_identical_pct": 30.0},
        "min_throughput_ratio": 0.6,
        "max_rouge_drop": 1.5,
    }
    assert pair_entry("smollm2-135m", "trtllm-serve") == {}


@pytest.mark.parametrize(
    "entry, problem",
    [
        ("max_rogue_drop = 1.5", "unknown key(s) max_rogue_drop; the keys are equality, max_rouge_drop, min_throughput_ratio"),
        ("min_throughput_ratio = -1", "min_throughput_ratio must be a number >= 0; got -1"),
        ('max_rouge_drop = "2"', "max_rouge_drop must be a number >= 0; got '2'"),
        ("equality = 2", "equality must be a table { min_identical_prefix_tokens, min_identical_pct }"),
        (
            "equality = { min_identical_prefix_tokens = 2, min_identical_pct = 130.0 }",
            "equality: field 'equality.min_identical_pct' must be between 0 and 100, got 130.0 (equality.Rule's fields)",
        ),
    ],
)
def test_a_bad_entry_is_one_line_naming_it(tmp_path, entry, problem):
    path = tmp_path / PAIRS_FILE.name
    path.write_text(f"[pairs.e.f]\n{entry}\n")
    with pytest.raises(PairsFileError) as caught:
        load_pairs(path)
    assert str(caught.value) == f"openai_migration.toml [pairs.e.f]: {problem}"
