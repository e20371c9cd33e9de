"""How equal greedy outputs that should be the same must be: a lock rule, and token lists compared under it."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from functools import partial


@dataclass(frozen=True)
class Rule:
    """An engine's `[engines.<name>.equality]` table: every compared output agrees with its expected one on at
    least its first `min_identical_prefix_tokens` tokens (entirely, if shorter), and at least
    `min_identical_pct` percent of the outputs are identical throughout. 100 percent is exact equality."""

    min_identical_prefix_tokens: int
    min_identical_pct: float

    def __post_init__(self):
        if self.min_identical_prefix_tokens < 0:
            raise ValueError(f"field 'equality.min_identical_prefix_tokens' must be >= 0, got {self.min_identical_prefix_tokens}")
        if not 0.0 <= self.min_identical_pct <= 100.0:
            raise ValueError(f"field 'equality.min_identical_pct' must be between 0 and 100, got {self.min_identical_pct}")

    @property
    def exact(self) -> bool:
        return self.min_identical_pct >= 100.0

    def describe(self) -> str:
        if self.exact:
            return "exact: every output identical"
        return (
            f"the first {self.min_identical_prefix_tokens} tokens of every output identical, "
            f">= {self.min_identical_pct:g}% of outputs identical"
        )


EXACT = Rule(min_identical_prefix_tokens=0, min_identical_pct=100.0)

# The rule of an engine without an [equality] table, by dtype and device. float32 on a CPU is batch-invariant: exact.
# On a GPU no dtype is: float32 GEMMs run as TF32 or pick other kernels per batch shape too, so float32 on a GPU gets
# the half-precision rule. float16/bfloat16 TensorRT-LLM kernels are not: another batch composition picks other GEMM/attention
# kernels, hence another reduction order ("different batch sizes may lead to different kernels. So, the
# results can be different. This is a known issue.", NVIDIA/TensorRT-LLM#1879). Rounding differences only move a
# greedy argmax where the top two logits nearly tie, so outputs agree for a while and then may fork, the fork
# carrying on to the end: Thinking Machines' "Defeating Nondeterminism in LLM Inference" (2025) saw 1000
# temperature-0 bf16 completions of one prompt agree on their first 102 tokens. Hence: an early divergence
# (within 8 tokens) is a bug (a wrong adapter, prompt, or request mix-up gives one at once), and 3 of 4 outputs
# of 16-32 tokens must match fully; a late flip in the others is rounding. An engine's table overrides this.
HALF = Rule(min_identical_prefix_tokens=8, min_identical_pct=75.0)
DEFAULT_RULES: dict[str, Rule] = {"float32": EXACT, "float16": HALF, "bfloat16": HALF}  # on a CPU
CPU = "cpu"  # the hardware a CPU server reports (hardware.hardware); any other name is a GPU's, or unknown


def rule_for(engine, hardware: str) -> Rule:
    """The one rule for an engine served on `hardware` (a GPU's name, "cpu", or unknown for a remote server), applied
    to every comparison of outputs that should be equal: its lock `equality` table, else exact for float32 on a CPU,
    else the half-precision rule (float16/bfloat16 anywhere, float32 on a GPU, a remote server's unknown dtype, an
    engine that is not known: a /v1 server without --openai-engine)."""
    if engine is None:
        return HALF
    if engine.equality is not None:
        return engine.equality
    if hardware == CPU:
        return DEFAULT_RULES.get(engine.dtype, HALF)
    return HALF


def rule_of(served) -> Rule:
    """The rule for a served deployment (its lock's [equality], else by dtype and device: rule_for)."""
    return rule_for(served.ref.engine, served.hardware)


def compare_texts(expected: list[str], actual: list[str], rule: Rule, tokenizer) -> Verdict:
    """`compare` of texts, as the tokens `tokenizer` makes of them (entry models answer text, not ids)."""
    encode = partial(tokenizer.encode, add_special_tokens=False)
    return compare([encode(t) for t in expected], [encode(t) for t in actual], rule)


def assert_agree(expected: list[str], actual: list[str], rule: Rule | None, tokenizer, what: str = "") -> None:
    """`actual` answers `expected` under `rule`: exactly where it is exact (or None, or no tokenizer gives the tokens);
    else as `compare_texts` judges, and never cut short: a batched or streamed half-precision answer may fork late,
    but a fork changes a token, it does not end the answer early (no answer may be a strict prefix of its expected)."""
    said = f"{what}: " if what else ""
    if rule is None or rule.exact or tokenizer is None:
        assert actual == expected, f"{said}\n  expected {expected!r}\n  got      {actual!r}"
        return
    short = [(e, a) for e, a in zip(expected, actual, strict=True) if len(a) < len(e) and e.startswith(a)]
    assert not short, f"{said}answers cut short: {short}"
    verdict = compare_texts(expected, actual, rule, tokenizer)
    assert verdict.passed, said + verdict.report(decode=tokenizer.decode)


def first_divergence(expected: Sequence, actual: Sequence) -> int | None:
    """The first index where the two differ (the shorter one's length if it is a prefix of the other), or None."""
    for i, (e, a) in enumerate(zip(expected, actual, strict=False)):
        if e != a:
            return i
    return None if len(expected) == len(actual) else min(len(expected), len(actual))


@dataclass(frozen=True)
class Verdict:
    """Pairs of token lists compared under a rule: where each pair first differs, and whether the rule holds."""

    rule: Rule
    expected: tuple[tuple, ...]
    actual: tuple[tuple, ...]
    divergences: tuple[int | None, ...]  # per pair: the first differing token, None where identical

    @property
    def identical_pct(self) -> float:
        if not self.divergences:
            return 100.0
        return 100.0 * sum(d is None for d in self.divergences) / len(self.divergences)

    @property
    def early(self) -> list[int]:
        """Pairs that differ within the rule's prefix (an output shorter than the prefix must be identical)."""
        n = self.rule.min_identical_prefix_tokens
        return [i for i, d in enumerate(self.divergences) if d is not None and d < n]

    @property
    def passed(self) -> bool:
        if self.rule.exact:
            return all(d is None for d in self.divergences)
        return not self.early and self.identical_pct >= self.rule.min_identical_pct

    def summary(self) -> dict:
        """For the run report: % identical and each differing pair's first divergence."""
        return {
            "compared": len(self.divergences),
            "identical_pct": round(self.identical_pct, 1),
            "first_divergences": {str(i): d for i, d in enumerate(self.divergences) if d is not None},
            "rule": self.rule.describe(),
            "passed": self.passed,
        }

    def report(self, decode: Callable[[list], str] | None = None, labels: Sequence[str] | None = None, context: int = 3) -> str:
        """Every differing pair: the first divergence and the tokens around it, expected beside actual (and as
        text, with `decode`); `labels` name the pairs (default: prompt <index>)."""
        differing = [(i, d) for i, d in enumerate(self.divergences) if d is not None]
        lines = [
            f"{len(differing)} of {len(self.divergences)} outputs differ ({self.identical_pct:.1f}% identical); "
            f"rule: {self.rule.describe()}"
        ]
        for i, d in differing:
            name = labels[i] if labels is not None else f"prompt {i}"
            early = " (within the identical prefix)" if i in self.early else ""
            want, got = (_window(s, d, context) for s in (self.expected[i], self.actual[i]))
            lines.append(f"{name}: first divergence at token {d}{early}: expected {want} got {got}")
            if decode is not None:
                start = max(0, d - context)
                lines.append(
                    f"    as text from token {start}: expected {decode(list(self.expected[i][start:]))!r} "
                    f"got {decode(list(self.actual[i][start:]))!r}"
                )
        return "\n".join(lines)


def _window(tokens: Sequence, at: int, context: int) -> str:
    start = max(0, at - context)
    shown = [str(t) for t in tokens[start : at + context]]
    if len(tokens) <= at:
        shown.append("<end>")
    head = [".."] if start > 0 else []
    tail = [".."] if len(tokens) > at + context else []
    return "[" + ", ".join(head + shown + tail) + "]"


def compare(expected: Sequence[Sequence[int]], actual: Sequence[Sequence[int]], rule: Rule) -> Verdict:
    """`actual[i]` against `expected[i]` for every i, under `rule`."""
    if len(expected) != len(actual):
        raise ValueError(f"{len(actual)} outputs to compare with {len(expected)} expected ones")
    want = tuple(tuple(e) for e in expected)
    got = tuple(tuple(a) for a in actual)
    return Verdict(rule, want, got, tuple(first_divergence(e, a) for e, a in zip(want, got, strict=True)))
