from pathlib import Path

import pytest

from pytest_triton_llm.verdicts.equality import DEFAULT_RULES, EXACT, HALF, Rule, assert_agree, compare, rule_for
from pytest_triton_llm.stack.lock import LockError, load_lock

FP16 = DEFAULT_RULES["float16"]
OUTPUTS = [list(range(100 * i, 100 * i + 24)) for i in range(8)]  # 8 outputs of 24 tokens


def flipped(outputs: list[list[int]], which: int, at: int) -> list[list[int]]:
    changed = [list(o) for o in outputs]
    changed[which][at] += 1
    return changed


def test_identical_outputs_pass_the_exact_rule():
    verdict = compare(OUTPUTS, [list(o) for o in OUTPUTS], EXACT)
    assert verdict.passed
    assert verdict.identical_pct == 100.0
    assert verdict.divergences == (None,) * 8


def test_one_token_flipped_late_passes_the_float16_default_but_fails_exact():
    actual = flipped(OUTPUTS, which=3, at=17)
    assert compare(OUTPUTS, actual, FP16).passed
    verdict = compare(OUTPUTS, actual, EXACT)
    assert not verdict.passed
    assert verdict.divergences[3] == 17
    assert verdict.identical_pct == 87.5


def test_a_divergence_before_the_identical_prefix_fails():
    verdict = compare(OUTPUTS, flipped(OUTPUTS, which=5, at=FP16.min_identical_prefix_tokens - 1), FP16)
    assert not verdict.passed
    assert verdict.early == [5]
    assert compare(OUTPUTS, flipped(OUTPUTS, which=5, at=FP16.min_identical_prefix_tokens), FP16).passed


def test_too_few_fully_identical_outputs_fail_even_when_all_diverge_late():
    actual = OUTPUTS
    for which in range(3):  # 5 of 8 identical: 62.5% < 75%
        actual = flipped(actual, which, at=20)
    verdict = compare(OUTPUTS, actual, FP16)
    assert not verdict.passed and not verdict.early


def test_an_output_shorter_than_the_prefix_must_be_identical_entirely():
    assert not compare([[1, 2, 3]], [[1, 2, 3, 4]], Rule(8, 0.0)).passed
    assert compare([[1, 2, 3]], [[1, 2, 3]], Rule(8, 0.0)).passed
    assert compare([[1, 2, 3]], [[1, 2, 3, 4]], Rule(8, 0.0)).divergences == (3,)


def test_the_report_names_the_first_divergence_and_the_tokens_side_by_side():
    expected = [[7, 8, 9], list(range(500, 530))]
    actual = [[7, 8, 9], list(range(500, 517)) + [91] + list(range(518, 530))]
    report = compare(expected, actual, EXACT).report()
    assert "1 of 2 outputs differ (50.0% identical)" in report
    assert (
        "prompt 1: first divergence at token 17: expected [.., 514, 515, 516, 517, 518, 519, ..] "
        "got [.., 514, 515, 516, 91, 518, 519, ..]" in report
    )
    assert "prompt 0" not in report


def test_the_report_shows_an_output_that_ended_early_and_its_text():
    report = compare([[1, 2, 3]], [[1, 2]], EXACT).report(decode=lambda ids: " ".join(map(str, ids)), labels=["fox"])
    assert "fox: first divergence at token 2: expected [1, 2, 3] got [1, 2, <end>]" in report
    assert "as text from token 0: expected '1 2 3' got '1 2'" in report


def test_outputs_to_compare_must_pair_up():
    with pytest.raises(ValueError, match="2 outputs to compare with 1 expected"):
        compare([[1]], [[1], [2]], EXACT)


class _Engine:
    def __init__(self, dtype, equality=None):
        self.dtype, self.equality = dtype, equality


def test_the_rule_is_the_table_else_chosen_by_dtype_and_device():
    table = Rule(4, 50.0)
    assert rule_for(_Engine("float32"), "cpu") == EXACT
    assert rule_for(_Engine("float32"), "NVIDIA H200") == Rule(8, 75.0)  # TF32 and per-shape kernels: not exact
    assert rule_for(_Engine("bfloat16"), "cpu") == rule_for(_Engine("bfloat16"), "NVIDIA H200") == Rule(8, 75.0)
    assert rule_for(_Engine("float16", table), "cpu") == table
    assert rule_for(_Engine("float32", table), "cpu") == table  # the lock's table wins everywhere


# -- the lock's [engines.<name>.equality] table ----------------------------------------------------------
def write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "engines.lock"
    path.write_text(text)
    return path


def with_equality(lock_text: str, table: str) -> str:
    head = "[engines.smollm2-135m.deployments.v1]"
    assert head in lock_text
    return lock_text.replace(head, f"[engines.smollm2-135m.equality]\n{table}\n\n{head}", 1)


def test_the_lock_reads_an_equality_table_and_keeps_it_out_of_the_cache_key(lock_text, tmp_path):
    plain = load_lock(write(tmp_path, lock_text)).engines["smollm2-135m"]
    assert plain.equality is None
    lock = load_lock(write(tmp_path, with_equality(lock_text, "min_identical_prefix_tokens = 4\nmin_identical_pct = 90")))
    engine = lock.engines["smollm2-135m"]
    assert engine.equality == Rule(4, 90.0)
    assert "equality" not in engine.recipe()
    assert engine.recipe() == plain.recipe()


@pytest.mark.parametrize(
    "table, expected",
    [
        (
            "min_identical_prefix_tokens = 8\nmin_identical_pct = 150",
            "field 'equality.min_identical_pct' must be between 0 and 100, got 150.0",
        ),
        (
            "min_identical_prefix_tokens = -1\nmin_identical_pct = 75",
            "field 'equality.min_identical_prefix_tokens' must be >= 0, got -1",
        ),
        (
            'min_identical_prefix_tokens = 8\nmin_identical_pct = "75"',
            "field 'equality.min_identical_pct': expected number, got string '75'",
        ),
        ("min_identical_prefix_tokens = 8", "missing field 'equality.min_identical_pct'"),
        ("min_identical_prefix_tokens = 8\nmin_identical_pct = 75\nmin_pct = 1", "unknown field 'equality.min_pct'"),
    ],
)
def test_an_invalid_equality_table_is_one_line_naming_the_field(lock_text, tmp_path, table, expected):
    path = write(tmp_path, with_equality(lock_text, table))
    with pytest.raises(LockError) as excinfo:
        load_lock(path)
    message = str(excinfo.value)
    assert message.startswith(f"{path}: engine 'smollm2-135m': ")
    assert expected in message
    assert "\n" not in message


def test_a_remote_servers_engine_of_unknown_dtype_gets_the_half_precision_default():
    from pytest_triton_llm.stack.runtimes.remote import ServedEngine

    engine = ServedEngine(backend="tensorrtllm", max_batch_size=8, max_input_len=512, max_output_len=64)
    assert rule_for(engine, "remote") == DEFAULT_RULES["float16"]


class _Words:
    """A tokenizer of whitespace-separated words, enough for compare_texts."""

    def encode(self, text, add_special_tokens=False):
        return [hash(w) % 1000 for w in text.split()]

    def decode(self, ids):
        return " ".join(map(str, ids))


def test_assert_agree_is_exact_under_an_exact_rule_and_forgives_only_a_late_fork_under_half():
    one_to_ten = " ".join(map(str, range(1, 11)))
    late_fork = " ".join(map(str, [*range(1, 10), 99]))
    assert_agree([one_to_ten], [one_to_ten], EXACT, _Words())
    with pytest.raises(AssertionError, match="expected"):
        assert_agree([one_to_ten], [late_fork], EXACT, _Words(), "batched")
    with pytest.raises(AssertionError, match="expected"):
        assert_agree([one_to_ten], [late_fork], HALF, None)  # no tokenizer to count tokens with: exact
    assert_agree([one_to_ten] * 4, [late_fork] + [one_to_ten] * 3, HALF, _Words())  # 3 of 4 whole, the fork after 8
    with pytest.raises(AssertionError, match="cut short"):
        assert_agree([one_to_ten] * 4, [one_to_ten[:12]] + [one_to_ten] * 3, HALF, _Words())
    with pytest.raises(AssertionError, match="at token 2"):
        assert_agree([one_to_ten] * 4, ["1 2 7"] + [one_to_ten] * 3, HALF, _Words())
