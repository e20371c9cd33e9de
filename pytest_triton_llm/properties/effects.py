"""The effect checks of the property matrix: for one input, the answer it must produce, on any path and in any mode.

Each check compares with a value derived from the request and the path's own greedy answer (asked unary, once per
session): the greedy text cut at N tokens, the greedy text ending at the stop word, a token repeated N times under its
bias. Where the path is an entry model of an engine deployment, the tensorrt_llm answer to the same request is the
reference too (`Context.core`): the entry model must answer as the engine does. Texts compared across modes (a stream,
a batch) follow the engine's equality rule: exact on float32; float16 kernels are not batch-invariant."""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from ..triton.llmapi_contract import GREEDY_BEST_OF
from ..triton.tensor_contract import NO_END
from ..verdicts.equality import HALF, assert_agree
from ..verdicts import logits as logits_verdict
from ..verdicts.guided import JudgeUnavailable, problems
from .guides import load_guides
from .kv_blocks import kv_reuse_stats, perf_metrics_blocks, table_blocks
from .kv_retention import kv_retention, kv_retention_decode
from .matrix import LLMAPI, OPENAI, TENSORRT_LLM, TRITON
from .requests import Answer, Ask, Unanswerable
from .triton_paths import FILLERS

LONG = "long"  # prompt roles, filled from fixtures/prompts.toml by the suite
SAMPLE = "sample"
REPEAT = "repeat"
QUESTION = "question"
ENDS = "ends"
SEEDS = (1, 2)  # two draws at temperature 1 over SAMPLED tokens of the colors prompt: both greedy only if sampling is off
SAMPLED = 8  # tokens of each sampled answer: a list of colors has several likely tokens at every step
CHOICES = 2  # n of the choices check
RETOKENIZED_SLACK = 2  # tokens a sampled text may gain when encoded again (its tokens need not be the canonical ones)
STRONG_PENALTY = 2.0  # TL#9442's values (suites/test_regressions.py)
NEUTRAL = {"repetition_penalty": 1.0, "presence_penalty": 0.0, "frequency_penalty": 0.0}
# a negative presence or frequency penalty rewards the tokens already generated (OpenAI's range is -2..2): vllm#913
# answered one as if no penalty had been sent
REWARD = {"presence_penalty": -STRONG_PENALTY, "frequency_penalty": -STRONG_PENALTY}
BIAS = 100.0  # far above any logit gap: the biased token wins every step
# prompt tables: the country is the table's row, whose answers (the capital) differ by the row read
TABLE_PROMPT, TABLE_WORDS = "The capital of{} is", (" France", " Japan")
ROOM = 256  # tokens an answer must end within, by itself, for the min_tokens check
OMITTED_SHOWS = 32  # a limit below this many tokens shows where max_tokens is left out (SamplingParams' default: 32)
LOG_PROB_TOLERANCE = 1e-3  # per token, between two sums of the same float32 values
# a prompt this share of max_input_len long: past the half where long-prompt bugs began (TensorRT-LLM#1830), and past
# 512 tokens (vllm#10126) on a 1024-token window
LONG_PROMPT_SHARE = 0.6
COUNTED = 2  # numbers the answer to a long count must continue it with
ASSUMED_INPUT_LEN = 1024  # a /v1 endpoint named without --openai-engine: a window every served LLM has
# asking for log probs may cost this much (a ratio of two answers timed side by side, the best of ROUNDS each) plus
# SLACK_S: TensorRT-LLM#2367 streamed 11x slower with return_log_probs
LOG_PROBS_COST, SLACK_S, ROUNDS = 3.0, 0.25, 2
# the unguided requests batched with a guided one: a guide that reached their rows shows in their first tokens, and
# one length for all lets every guide's batch reuse their answers alone
FILLER_TOKENS = 16


@dataclass
class Context:
    """One cell: a path asked in a mode, for a property; `core` is the deployment's tensorrt_llm path where `path` is
    an entry model in front of it; `cache` holds unary answers across cells (one per path and request)."""

    path: Any  # a TritonPath or an OpenAIPath: name, key, surface, tokenizer, answer, lacks, question
    mode: str
    prop: str
    prompts: dict[str, str]
    rule: Any = None  # verdicts.equality.Rule, None for exact
    core: Any = None  # the TritonPath of tensorrt_llm behind an entry model
    cache: dict = field(default_factory=dict)

    def ask(self, ask: Ask) -> Answer:
        return self.batched(ask) if self.mode == "batched" else self.path.answer(ask, self.mode)

    def ask_with(self, ask: Ask, fields: dict) -> Answer:
        """`ask` with raw /v1 request `fields` added to its body (OpenAIPath.answer_with), in the cell's mode."""
        if self.mode == "batched":
            return self.batched(ask, fields)
        return self.path.answer_with(ask, self.mode, fields)

    def batched(self, ask: Ask, fields: dict | None = None) -> Answer:
        """`ask` sent at once with FILLERS, after them: a row past the batch's first, whose options and state a server
        that reads them from the first row loses. Each filler must answer as it does alone: `ask`'s options reach no
        other request of the batch. `fields`: raw /v1 fields of `ask`'s body (OpenAIPath.batch)."""
        fillers = [Ask.of(p, FILLER_TOKENS) for p in FILLERS]
        sent = [*fillers, ask]
        *beside, answer = self.path.batch(sent) if fields is None else self.path.batch(sent, fields)
        for filler, got in zip(fillers, beside, strict=True):
            self.same(self.unary(filler).text, got.text, f"{filler.prompt!r} batched with {dict(ask.options)} (as alone)")
        return answer

    def unary(self, ask: Ask, path=None) -> Answer:
        path = path or self.path
        key = (path.key, repr(ask))
        if key not in self.cache:
            self.cache[key] = path.answer(ask, "unary")
        return self.cache[key]

    def greedy(self, role: str, max_tokens: int) -> Answer:
        return self.unary(Ask.of(self.prompts[role], max_tokens))

    def refused(self, ask: Ask, words: tuple[str, ...], what: str) -> None:
        """`ask` must be refused, its error naming one of `words` (upstream's own); `what` says why it must be."""
        try:
            answer = self.ask(ask)
        except AssertionError as exc:  # the path's words for an error response
            assert any(w in str(exc) for w in words), f"{self.path.name} ({self.mode}): {what}: {exc}"
            return
        raise AssertionError(f"{self.path.name} ({self.mode}): {what}, yet it was answered: {answer.text!r}")

    def same(self, expected: str, actual: str, what: str) -> None:
        """`actual` equals `expected`: exactly in unary mode; else under the engine's rule (verdicts.equality)."""
        rule = None if self.mode == "unary" else self.rule
        assert_agree([expected], [actual], rule, self.path.tokenizer, f"{self.path.name} ({self.mode}): {what}")

    def reference_ids(self, role: str, max_tokens: int) -> list[int]:
        """The greedy token ids for `role`: the path's own, else the engine's behind the entry model (which the
        `prompt` property checks it equals), else Unanswerable."""
        own = self.greedy(role, max_tokens)
        if own.token_ids is not None:
            return own.token_ids
        if self.core is not None:
            return self.unary(Ask.of(self.prompts[role], max_tokens), self.core).token_ids or []
        raise Unanswerable(f"{self.path.name} returns text only and serves no tensorrt_llm model beside it to read ids from")

    @property
    def token_surface(self) -> bool:
        return self.path.surface in (TRITON, TENSORRT_LLM)

    def decode(self, ids: list[int]) -> str:
        return self.path.tokenizer.decode(ids, skip_special_tokens=True)

    def sampling(self, **options) -> dict:
        """Sampling options, top_k left out where the path has no such field (it then keeps its own default)."""
        if self.path.surface == OPENAI and self.path.lacks(["top_k"]):
            options.pop("top_k", None)
        return options


def greedy(ctx: Context) -> None:
    expected = ctx.greedy(LONG, 16)
    assert expected.text, f"{ctx.path.name}: the greedy answer is empty"
    ctx.same(expected.text, ctx.ask(Ask.of(ctx.prompts[LONG], 16)).text, "the greedy answer differs from the unary one")
    if ctx.mode == "unary" and ctx.core is not None:
        engine = ctx.unary(Ask.of(ctx.prompts[LONG], 16), ctx.core)
        assert expected.text == engine.text, (
            f"{ctx.path.name} answers {expected.text!r}; tensorrt_llm's ids decode to {engine.text!r}"
        )
    # a chat answer replies, it does not continue; streamed on /v1 only (vllm#10126: streams of long prompts broke)
    streamed_here = ctx.mode == "unary" or (ctx.mode == "streamed" and ctx.path.surface == OPENAI)
    if ctx.prop == "prompt" and streamed_here and not getattr(ctx.path, "chat", False):
        long_prompt(ctx)


def counting_prompt(tokenizer, tokens: int) -> tuple[str, str]:
    """'1 2 3 ... n' in at most `tokens` tokens, and what must follow it: ' n+1 n+2'."""
    n, used = 0, 0
    while used + (cost := len(tokenizer.encode(f" {n + 1}", add_special_tokens=False))) <= tokens:
        n, used = n + 1, used + cost
    return " ".join(str(i) for i in range(1, n + 1)), "".join(f" {n + i}" for i in range(1, COUNTED + 1))


def long_prompt(ctx: Context) -> None:
    """A prompt of most of max_input_len is continued as its content says, as a short one is: a count goes on
    counting."""
    limit = ctx.path.max_input_len or ASSUMED_INPUT_LEN
    prompt, follows = counting_prompt(ctx.path.tokenizer, int(LONG_PROMPT_SHARE * limit))
    answer = ctx.ask(Ask.of(prompt, 4 * COUNTED + 2))
    assert answer.text.lstrip().startswith(follows.lstrip()), (
        f"{ctx.path.name}: a count to {prompt.rsplit(' ', 1)[-1]} ({int(LONG_PROMPT_SHARE * limit)} tokens or fewer, "
        f"max_input_len {limit}) is continued with {answer.text!r}, not {follows.lstrip()!r}"
    )


def max_tokens(ctx: Context) -> None:
    long = ctx.greedy(LONG, 24)
    ids = _ids_or_reencoded(ctx, long)
    if len(ids) < 24:
        raise Unanswerable(f"{ctx.path.name}: the greedy answer ended by itself before 24 tokens: {long.text!r}")
    for n in (1, 7):
        answer = ctx.ask(Ask.of(ctx.prompts[LONG], n))
        if answer.tokens is not None:
            assert answer.tokens == n, f"{ctx.path.name} ({ctx.mode}): max_tokens {n} gave {answer.tokens} tokens"
        if answer.token_ids is not None:
            assert answer.token_ids == ids[:n], f"{ctx.path.name} ({ctx.mode}): max_tokens {n}: {answer.token_ids} != {ids[:n]}"
        ctx.same(ctx.decode(ids[:n]), answer.text, f"max_tokens {n} must cut the greedy answer at its {n}th token")
    if ctx.path.surface == OPENAI and ctx.mode == "unary":
        omitted_max_tokens(ctx)
        max_completion_tokens(ctx)


def max_completion_tokens(ctx: Context) -> None:
    """On chat, max_completion_tokens cuts as max_tokens does where the family takes it (llama-cpp-python#1907)."""
    if not ctx.path.chat or ctx.path.support("max_completion_tokens") not in ("yes", "partial"):
        return
    expected = ctx.unary(Ask.of(ctx.prompts[LONG], 7)).text
    answer = ctx.path.answer_with(Ask.of(ctx.prompts[LONG], None), "unary", {"max_completion_tokens": 7})
    ctx.same(expected, answer.text, "max_completion_tokens 7 must cut the answer as max_tokens 7 does")


def omitted_max_tokens(ctx: Context) -> None:
    """A /v1 request without max_tokens runs to the limit its family's contract gives (TensorRT-LLM#13455: Dynamo's
    worker cut such answers at SamplingParams' 32): an answer that ends by itself ends there, else it is cut."""
    limit = ctx.path.omitted_limit()
    if limit is None:
        return
    try:
        prompt, ended, count = _ended(ctx, longer_than=OMITTED_SHOWS)
    except Unanswerable:
        return  # no answer here runs long enough to show a cut; the cell's own checks stand
    expected = ended.text if count <= limit else ctx.unary(Ask.of(prompt, int(limit))).text
    answer = ctx.ask(Ask.of(prompt, None))
    ctx.same(expected, answer.text, f"without max_tokens the answer must run to {limit} tokens or its own end ({count})")


def _ids_or_reencoded(ctx: Context, answer: Answer) -> list[int]:
    try:
        return ctx.reference_ids(LONG, 24) if answer.token_ids is None else answer.token_ids
    except Unanswerable:
        ids = ctx.path.tokenizer.encode(answer.text, add_special_tokens=False)
        if ctx.decode(ids) != answer.text:
            raise Unanswerable(f"{ctx.path.name}: re-encoding the greedy text does not give it back") from None
        return ids


def temperature(ctx: Context) -> None:
    prompt, expected = ctx.prompts[SAMPLE], ctx.greedy(SAMPLE, SAMPLED).text
    cold = ctx.ask(Ask.of(prompt, SAMPLED, **ctx.sampling(temperature=0.0, top_k=50, seed=5)))
    ctx.same(expected, cold.text, "temperature 0 must sample the greedy answer")
    hot = [ctx.ask(Ask.of(prompt, SAMPLED, **ctx.sampling(temperature=1.0, top_k=50, seed=s))).text for s in SEEDS]
    assert any(text != expected for text in hot), (
        f"{ctx.path.name} ({ctx.mode}): temperature 1 sampled the greedy answer with seeds {SEEDS}"
    )


def top_k(ctx: Context) -> None:
    prompt, expected = ctx.prompts[SAMPLE], ctx.greedy(SAMPLE, SAMPLED).text
    for seed in SEEDS:
        answer = ctx.ask(Ask.of(prompt, SAMPLED, temperature=1.0, top_k=1, seed=seed))
        ctx.same(expected, answer.text, f"top_k 1 at temperature 1 (seed {seed}) must be the greedy answer")
    # a dropped top_k leaves the server's default (top_k 0, top_p 0: greedy), which the check above cannot see
    wide = [ctx.ask(Ask.of(prompt, SAMPLED, temperature=1.0, top_k=50, seed=s)).text for s in SEEDS]
    assert any(text != expected for text in wide), f"{ctx.path.name} ({ctx.mode}): top_k 50 sampled the greedy answer"


def top_p(ctx: Context) -> None:
    prompt, expected = ctx.prompts[SAMPLE], ctx.greedy(SAMPLE, SAMPLED).text
    for seed in SEEDS:
        answer = ctx.ask(Ask.of(prompt, SAMPLED, **ctx.sampling(temperature=1.0, top_p=0.01, top_k=0, seed=seed)))
        ctx.same(expected, answer.text, f"top_p 0.01 at temperature 1 (seed {seed}) keeps the likeliest token only")
    # as for top_k: a dropped top_p leaves greedy decoding, which only a wide top_p shows
    wide = [ctx.ask(Ask.of(prompt, SAMPLED, **ctx.sampling(temperature=1.0, top_p=0.95, top_k=0, seed=s))).text for s in SEEDS]
    assert any(text != expected for text in wide), f"{ctx.path.name} ({ctx.mode}): top_p 0.95 sampled the greedy answer"


def min_p(ctx: Context) -> None:
    """min_p, a family extension on /v1: 1.0 keeps only the tokens as likely as the likeliest, so every seed samples
    the greedy answer at temperature 1; 0.0 keeps every token top_k 50 leaves, so some seed samples another (a dropped
    min_p keeps the family's default, 0.05 on llama.cpp, which the first check alone would not show)."""
    prompt, expected = ctx.prompts[SAMPLE], ctx.greedy(SAMPLE, SAMPLED).text

    def sample(s: int, value: float) -> str:
        return ctx.ask_with(Ask.of(prompt, SAMPLED, **ctx.sampling(temperature=1.0, top_k=50, seed=s)), {"min_p": value}).text

    for s in SEEDS:
        ctx.same(expected, sample(s, 1.0), f"min_p 1.0 at temperature 1 (seed {s}) keeps the likeliest token only")
    assert any(sample(s, 0.0) != expected for s in SEEDS), (
        f"{ctx.path.name} ({ctx.mode}): min_p 0.0 at temperature 1 sampled the greedy answer with seeds {SEEDS}"
    )


def seed(ctx: Context) -> None:
    prompt = ctx.prompts[SAMPLE]

    def sample(s: int) -> str:
        return ctx.ask(Ask.of(prompt, SAMPLED, **ctx.sampling(temperature=1.0, top_k=50, seed=s))).text

    first = sample(7)
    ctx.same(first, sample(7), "one seed must sample one text")
    if ctx.mode != "unary":
        alone = ctx.unary(Ask.of(prompt, SAMPLED, **ctx.sampling(temperature=1.0, top_k=50, seed=7))).text
        ctx.same(alone, first, "seed 7 must sample what it samples alone and unary")
    others = {sample(s) for s in SEEDS}
    assert others != {first}, f"{ctx.path.name} ({ctx.mode}): seeds {SEEDS} and 7 all sampled {first!r}"


def stop(ctx: Context) -> None:
    if ctx.token_surface:
        ids = ctx.reference_ids(LONG, 24)
        start = _round_trip_pair(ctx, ids)
        word = ids[start : start + 2]
        stop_word = word if ctx.path.surface == TENSORRT_LLM else ctx.decode(word)
        answer = ctx.ask(Ask.of(ctx.prompts[LONG], 24, stop=[stop_word]))
        ctx.same(ctx.decode(ids[: start + 2]), answer.text, f"stop word {ctx.decode(word)!r} must end the answer after it")
        return
    long = ctx.greedy(LONG, 24).text
    words = [w for w in long.split()[3:] if w.isalpha() and long.index(w) > 8]
    if not words:
        raise Unanswerable(f"{ctx.path.name}: the greedy answer has no word to stop at: {long!r}")
    answer = ctx.ask(Ask.of(ctx.prompts[LONG], 24, stop=[words[0]]))
    expected = long[: long.index(words[0])]
    assert answer.text.rstrip() == expected.rstrip(), (
        f"{ctx.path.name} ({ctx.mode}): stop {words[0]!r} must end the answer before it: {answer.text!r}, expected {expected!r}"
    )


def _round_trip_pair(ctx: Context, ids: list[int]) -> int:
    """The first position (from 4) of two tokens that tokenize back to themselves and occur nowhere earlier."""
    tokenizer = ctx.path.tokenizer
    for i in range(4, len(ids) - 4):
        pair = ids[i : i + 2]
        seen = any(ids[j : j + 2] == pair for j in range(i))
        if not seen and tokenizer.encode(ctx.decode(pair), add_special_tokens=False) == pair:
            return i
    raise Unanswerable(f"{ctx.path.name}: no two tokens of the greedy answer tokenize back to themselves")


def bad_words(ctx: Context) -> None:
    ids = ctx.reference_ids(LONG, 16)
    tokenizer = ctx.path.tokenizer
    at = next(
        (i for i in range(2, 8) if tokenizer.encode(ctx.decode(ids[i : i + 1]), add_special_tokens=False) == ids[i : i + 1]), None
    )
    if at is None:
        raise Unanswerable(f"{ctx.path.name}: no early token of the greedy answer tokenizes back to itself")
    banned = ids[at]
    word = [banned] if ctx.path.surface == TENSORRT_LLM else ctx.decode([banned])
    answer = ctx.ask(Ask.of(ctx.prompts[LONG], 16, bad_words=[word]))
    prefix = ctx.decode(ids[:at])
    assert answer.text.startswith(prefix) and answer.text != ctx.decode(ids), (
        f"{ctx.path.name} ({ctx.mode}): banning {ctx.decode([banned])!r} must change the answer at token {at} "
        f"and not before: {answer.text!r}"
    )
    if answer.token_ids is not None:
        assert banned not in answer.token_ids, f"{ctx.path.name} ({ctx.mode}): the banned token {banned} came: {answer.token_ids}"
    elif ctx.core is not None:
        engine = ctx.unary(Ask.of(ctx.prompts[LONG], 16, bad_words=[[banned]]), ctx.core)
        ctx.same(engine.text, answer.text, "the entry model must ban the word as tensorrt_llm bans its token")


def end_id(ctx: Context) -> None:
    ids = ctx.reference_ids(LONG, 16)
    end = ids[5]
    first = ids.index(end)
    answer = ctx.ask(Ask.of(ctx.prompts[LONG], 16, end_id=end))
    if answer.token_ids is not None:
        assert answer.token_ids == ids[:first], f"{ctx.path.name} ({ctx.mode}): end_id {end}: {answer.token_ids} != {ids[:first]}"
    ctx.same(ctx.decode(ids[:first]), answer.text, f"end_id {end} must end the answer before its first occurrence")


def exclude_input(ctx: Context) -> None:
    prompt = ctx.prompts[LONG]
    excluded = ctx.greedy(LONG, 12)
    if ctx.mode == "streamed" and ctx.path.surface == LLMAPI:
        raise Unanswerable("whether an llmapi stream returns the prompt differs by version (llmapi-0.19 and 1.0 never stream)")
    echoed = ctx.ask(Ask.of(prompt, 12, exclude_input=False))
    if ctx.mode == "streamed":  # the C++ backend streams generated tokens only (tensorrtllm_backend v0.19.0
        # model_instance_state.cc), whatever exclude_input_in_output says
        ctx.same(excluded.text, echoed.text, "a stream returns the generated tokens only, the prompt never")
        return
    if echoed.token_ids is not None:
        prompt_ids = ctx.path.served.encode(prompt)
        assert echoed.token_ids == prompt_ids + excluded.token_ids, f"{ctx.path.name} ({ctx.mode}): {echoed.token_ids}"
        return
    assert echoed.text.endswith(excluded.text) and echoed.text[: -len(excluded.text) or None].strip() == prompt.strip(), (
        f"{ctx.path.name} ({ctx.mode}): exclude_input false must return the prompt then the answer "
        f"{excluded.text!r}: {echoed.text!r}"
    )
    ctx.same(
        excluded.text, ctx.ask(Ask.of(prompt, 12, exclude_input=True)).text, "exclude_input true must return the answer alone"
    )


def choices(ctx: Context) -> None:
    """/v1's n: n choices indexed 0..n-1, each a whole sampled answer of at most max_tokens tokens, in every mode
    (TensorRT-LLM#9802: a stream with n > 1 sent each choice's tokens again). Sampled: greedy decoding with n > 1 is
    not every server's to serve."""
    if ctx.path.tokenizer is None:
        raise Unanswerable(f"{ctx.path.name}: no tokenizer to count each choice's tokens with (--tokenizer)")
    texts = ctx.path.choices(Ask.of(ctx.prompts[SAMPLE], SAMPLED, temperature=1.0, seed=SEEDS[0], n=CHOICES), ctx.mode)
    assert sorted(texts) == list(range(CHOICES)), f"{ctx.path.name} ({ctx.mode}): choices {sorted(texts)} for n={CHOICES}"
    for index, text in sorted(texts.items()):
        count = len(ctx.path.tokenizer.encode(text, add_special_tokens=False))
        assert 0 < count <= SAMPLED + RETOKENIZED_SLACK, (
            f"{ctx.path.name} ({ctx.mode}): choice {index} holds {count} tokens for max_tokens {SAMPLED}: {text!r}"
        )


def echo(ctx: Context) -> None:
    """/v1/completions' echo: the prompt's text before the greedy answer, in every mode (a stream sends it in its first
    chunk)."""
    if getattr(ctx.path, "chat", False):
        raise Unanswerable(
            "/v1/chat/completions: echo there puts the last message first when it has the assistant's role, which no "
            "family's contract here states"
        )
    expected = ctx.greedy(LONG, 12).text
    echoed = ctx.ask(Ask.of(ctx.prompts[LONG], 12, echo=True))
    ctx.same(ctx.prompts[LONG] + expected, echoed.text, "echo true must return the prompt's text, then the greedy answer")


def min_tokens(ctx: Context) -> None:
    prompt, ended, count = _ended(ctx)
    answer = ctx.ask(Ask.of(prompt, count + 12, min_tokens=count + 4))
    assert answer.text.startswith(ended.text) and len(answer.text) > len(ended.text), (
        f"{ctx.path.name} ({ctx.mode}): min_tokens {count + 4} must hold the end back past {ended.text!r}: {answer.text!r}"
    )
    if answer.tokens is not None:
        assert answer.tokens >= count + 4, f"{ctx.path.name} ({ctx.mode}): min_tokens {count + 4} gave {answer.tokens} tokens"
    if ctx.core is not None:
        held = ctx.unary(Ask.of(prompt, count + 12, min_tokens=count + 4), ctx.core).text
        ctx.same(held, answer.text, f"min_tokens {count + 4} must hold the end back as tensorrt_llm does")


def _ended(ctx: Context, longer_than: int = 0) -> tuple[str, Answer, int]:
    """(prompt, its greedy answer, its token count) of the first prompt whose greedy answer ends by itself after more
    than `longer_than` tokens: the chat question, the fox completion (and, for a longer one, the village one);
    Unanswerable, with the counts, where none does."""
    counts: list[int | None] = []
    candidates = [ctx.path.question(ctx.prompts[QUESTION]), ctx.prompts[ENDS], *([ctx.prompts[LONG]] if longer_than else [])]
    for prompt in candidates:
        ended = ctx.unary(Ask.of(prompt, ROOM))
        count = _count(ctx, ended, prompt)
        counts.append(count)
        if count is not None and longer_than < count < ROOM - 8:
            return prompt, ended, count
    raise Unanswerable(
        f"{ctx.path.name}: no prompt's greedy answer ends by itself after {longer_than} and within {ROOM - 8} tokens "
        f"(the chat question, the fox and the village prompts: {counts})"
    )


def _count(ctx: Context, answer: Answer, prompt: str) -> int | None:
    if answer.tokens is not None:
        return answer.tokens
    if ctx.core is not None:
        return ctx.unary(Ask.of(prompt, ROOM), ctx.core).tokens
    return None


def penalty(ctx: Context) -> None:
    if ctx.path.tokenizer is None:
        raise Unanswerable(f"{ctx.path.name}: no tokenizer to tell whether the greedy answer repeats itself (--tokenizer)")
    prompt, expected = ctx.prompts[REPEAT], ctx.greedy(REPEAT, 16).text
    ids = ctx.path.tokenizer.encode(expected, add_special_tokens=False)
    if len(set(ids)) > len(ids) // 2:
        raise Unanswerable(f"{ctx.path.name}: the greedy answer does not repeat itself: {expected!r}")
    neutral = ctx.ask(Ask.of(prompt, 16, **{ctx.prop: NEUTRAL[ctx.prop]}))
    ctx.same(expected, neutral.text, f"{ctx.prop} {NEUTRAL[ctx.prop]} (neutral) must leave the greedy answer as it is")
    strong = Ask.of(prompt, 16, **{ctx.prop: STRONG_PENALTY})
    penalized = ctx.ask(strong)
    assert penalized.text != expected, (
        f"{ctx.path.name} ({ctx.mode}): {ctx.prop} {STRONG_PENALTY} left the repetitive answer as it was"
    )
    if ctx.core is not None:
        ctx.same(ctx.unary(strong, ctx.core).text, penalized.text, f"{ctx.prop} must penalize as tensorrt_llm does")
    if ctx.prop in REWARD:
        _rewarding_penalty(ctx)


def _rewarding_penalty(ctx: Context) -> None:
    """A negative penalty rewards the tokens the answer already holds: a long greedy answer that seldom repeats a
    token repeats more (fewer distinct tokens: one dropped or turned into a penalty has as many or more), and as
    tensorrt_llm answers it. On the stand-in: 15 distinct of 16 greedy, 12 rewarded, 16 penalized (2026-12-02)."""
    greedy = ctx.greedy(LONG, 16)
    rewarding = Ask.of(ctx.prompts[LONG], 16, **{ctx.prop: REWARD[ctx.prop]})
    rewarded = ctx.ask(rewarding)
    encode = ctx.path.tokenizer.encode  # where a path answers text only (penalty() asked for its tokenizer)
    distinct = [len(set(a.token_ids or encode(a.text, add_special_tokens=False))) for a in (greedy, rewarded)]
    assert distinct[1] < distinct[0], (
        f"{ctx.path.name} ({ctx.mode}): {ctx.prop} {REWARD[ctx.prop]} (a reward) must make the answer repeat more: "
        f"{distinct[1]} distinct tokens against the greedy answer's {distinct[0]}: {rewarded.text!r}"
    )
    if ctx.core is not None:
        ctx.same(ctx.unary(rewarding, ctx.core).text, rewarded.text, f"{ctx.prop} {REWARD[ctx.prop]} as tensorrt_llm")


def log_probs(ctx: Context) -> None:
    ask = Ask.of(ctx.prompts[LONG], 8, log_probs=True)
    answer = ctx.ask(ask)
    if ctx.mode == "streamed":
        _log_probs_cost(ctx, ask)
    tolerance = LOG_PROB_TOLERANCE * 8 if ctx.rule is None or ctx.rule.exact or ctx.mode == "unary" else 0.5
    if answer.log_probs is not None and ctx.mode != "streamed":
        assert len(answer.log_probs) == 8, f"{ctx.path.name} ({ctx.mode}): {len(answer.log_probs)} log probs for 8 tokens"
        assert all(p <= 1e-6 for p in answer.log_probs), f"{ctx.path.name} ({ctx.mode}): a log prob above 0: {answer.log_probs}"
        if answer.cum_log_prob is not None and ctx.path.surface != OPENAI:  # /v1 sends no cumulative value: ours is the sum
            assert abs(sum(answer.log_probs) - answer.cum_log_prob) <= tolerance, (answer.log_probs, answer.cum_log_prob)
    assert answer.cum_log_prob is not None and answer.cum_log_prob < 0, (
        f"{ctx.path.name} ({ctx.mode}): cumulative log prob {answer.cum_log_prob}"
    )
    references = [ctx.unary(ask)] + ([ctx.unary(ask, ctx.core)] if ctx.core is not None else [])
    for reference in references:
        assert reference.cum_log_prob is not None and abs(reference.cum_log_prob - answer.cum_log_prob) <= tolerance, (
            f"{ctx.path.name} ({ctx.mode}): cumulative log prob {answer.cum_log_prob} != {reference.cum_log_prob} "
            "of the same request unary (and through tensorrt_llm)"
        )


def _log_probs_cost(ctx: Context, ask: Ask) -> None:
    """Asking for log probs does not slow the answer down many times: the same request with and without them, timed
    in turns, the best of ROUNDS each."""
    plain = Ask.of(ask.prompt, ask.max_tokens)
    best = {plain: float("inf"), ask: float("inf")}
    for _ in range(ROUNDS):
        for each in best:
            began = time.perf_counter()
            ctx.ask(each)
            best[each] = min(best[each], time.perf_counter() - began)
    assert best[ask] <= LOG_PROBS_COST * best[plain] + SLACK_S, (
        f"{ctx.path.name} ({ctx.mode}): {ask.max_tokens} tokens took {best[ask]:.2f} s with log probs and "
        f"{best[plain]:.2f} s without (more than {LOG_PROBS_COST}x + {SLACK_S} s)"
    )


def embedding_bias(ctx: Context) -> None:
    tokenizer = ctx.path.tokenizer
    [token] = next(ids for w in (" blue", " the", " and") if len(ids := tokenizer.encode(w, add_special_tokens=False)) == 1)
    answer = ctx.ask(Ask.of(ctx.prompts[LONG], 6, bias={token: BIAS}))
    if answer.token_ids is not None:
        assert answer.token_ids == [token] * 6, f"{ctx.path.name} ({ctx.mode}): a bias of {BIAS} on {token}: {answer.token_ids}"
    expected = ctx.decode([token] * 6)
    assert answer.text == expected, (
        f"{ctx.path.name} ({ctx.mode}): a bias of {BIAS} on {tokenizer.decode([token])!r} must make every token "
        f"it: {answer.text!r}"
    )


def prompt_table(ctx: Context) -> None:
    """Rows of the model's own input embeddings stand for their tokens: on tensorrt_llm, the prompt whose country token
    is the id of its row (vocab_size + k) answers as the plain prompt does, for each of two rows that answer
    differently (a row off by one, or a table not read, answers the other country or fails); an entry model's text
    prompt has no such id, so a table sent with it leaves the answer as it is. Where blocks are reused, the table's
    blocks are keyed by its extra id (kv_blocks.table_blocks)."""
    if ctx.path.surface != TENSORRT_LLM:
        expected = ctx.greedy(LONG, 12).text
        answer = ctx.ask(Ask.of(ctx.prompts[LONG], 12, table=TABLE_WORDS))
        ctx.same(expected, answer.text, "a prompt table that no prompt id refers to must leave the answer as it is")
        return
    plain = {w: ctx.unary(Ask.of(TABLE_PROMPT.format(w), 8)).text for w in TABLE_WORDS}
    if len(set(plain.values())) < len(plain):
        raise Unanswerable(f"the plain prompts answer alike ({plain}): this model cannot show which row was read")
    # the table travels in the served model's datatype (FP16 as upstream declares it): over a float32 engine its
    # rounding may fork a greedy answer late, as half precision does
    rule = HALF if ctx.path.table_rounds else (None if ctx.mode == "unary" else ctx.rule)
    for word, expected in plain.items():
        answer = ctx.ask(Ask.of(TABLE_PROMPT.format(word), 8, table=TABLE_WORDS))
        what = f"{ctx.path.name} ({ctx.mode}): {word!r} as prompt-table row {TABLE_WORDS.index(word)}"
        assert_agree([expected], [answer.text], rule, ctx.path.tokenizer, what)
    table_blocks(ctx, TABLE_WORDS, TABLE_PROMPT.format(TABLE_WORDS[0]) + ". ")


def guided(ctx: Context) -> None:
    """Each guide of fixtures/guides.toml the path takes holds its answer: the guide's grammar accepts the whole text
    (jsonschema the schema's too); a streamed or batched answer equals the unary one, and the unguided requests batched
    with it answer as they do alone. A guide type no server takes is answered as the path's contract says."""
    guides, judged, why = load_guides(), 0, []
    for name, guide in guides.guides.items():
        ask = Ask.of(ctx.path.question(guide.question), guide.max_tokens, guide=(guide.kind, guide.guide))
        try:
            answer = _guided_answer(ctx, ask, guides.not_set_up)
            found = problems(guide.kind, guide.guide, answer.text, may_stop_short=not guide.ends)
        except (Unanswerable, JudgeUnavailable) as exc:
            why.append(f"{name}: {exc}")
            continue
        assert not found, f"{ctx.path.name} ({ctx.mode}): guide {name!r} ({guide.kind}): {found[0]}"
        if ctx.mode != "unary":
            ctx.same(ctx.unary(ask).text, answer.text, f"guide {name!r}: the guided answer differs from the unary one")
        judged += 1
    if not judged:
        raise Unanswerable("; ".join(why))
    _unknown_guide_type(ctx)


def _guided_answer(ctx: Context, ask: Ask, not_set_up: str) -> Answer:
    """The guided answer in the cell's mode (batched, the unguided requests beside it answer as alone: Context.ask)."""
    try:
        return ctx.ask(ask)
    except AssertionError as exc:
        if not_set_up and not_set_up in str(exc):  # refused with the executor's words: a server without a backend
            raise Unanswerable(f"{ctx.path.name}: the server has no guided decoding backend ({exc})") from None
        raise


def _unknown_guide_type(ctx: Context) -> None:
    """A guide type no server takes: on /v1 the family's status for it; on Triton the unguided answer (the C++
    model's contract: an unknown type is no guide)."""
    unknown = load_guides().unknown
    if ctx.path.surface != OPENAI:
        expected = ctx.greedy(LONG, 12).text
        answer = ctx.ask(Ask.of(ctx.prompts[LONG], 12, guide=(unknown.kind, unknown.guide)))
        ctx.same(expected, answer.text, f"guide type {unknown.kind!r}, which is no guide there ({unknown.triton})")
        return
    guides = ctx.path.target.family.guides
    if ctx.mode != "unary" or ctx.path.name not in guides.endpoints:
        return
    body = {"response_format": json.loads(guides.unknown)}
    status = ctx.path.refusal(Ask.of(ctx.prompts[LONG], 4), body)
    assert status == int(guides.unknown_status), (
        f"{ctx.path.name}: response_format {guides.unknown}, which {ctx.path.target.family.title} does not take, was "
        f"answered with {'HTTP ' + str(status) if status else 'a completion'}; its contract: HTTP {guides.unknown_status} "
        f"({guides.cite})"
    )


def _template_tokens(ctx: Context, messages: list[dict], fields: dict, flags: dict) -> None:
    """A chat request of `messages` with request `fields` is answered from the model's chat template over them with
    `flags`: usage.prompt_tokens equals the reference tokenizer's count of that template."""
    if not getattr(ctx.path, "chat", False):
        raise Unanswerable(f"{ctx.path.name}: no chat template is applied there")
    tokenizer = ctx.path.tokenizer
    if tokenizer is None:
        raise Unanswerable(f"{ctx.path.name}: no tokenizer to apply the chat template with (--tokenizer)")
    answer = ctx.ask_with(Ask.of(messages[0]["content"], 4), {"messages": messages, **fields})
    if answer.prompt_tokens is None:
        raise Unanswerable(f"{ctx.path.name} ({ctx.mode}): the answer reports no usage.prompt_tokens")
    rendered = tokenizer.apply_chat_template(messages, tokenize=False, **flags)
    expected = len(tokenizer.encode(rendered, add_special_tokens=False))  # the template holds its special tokens
    assert answer.prompt_tokens == expected, (
        f"{ctx.path.name} ({ctx.mode}): {fields}: usage.prompt_tokens {answer.prompt_tokens}, the model's chat template "
        f"with {flags} gives {expected} tokens"
    )


def generation_prompt(ctx: Context) -> None:
    """add_generation_prompt true, then false: two counts that differ by the assistant turn's opening tokens."""
    messages = [{"role": "user", "content": ctx.prompts[QUESTION]}]
    for flag in (True, False):
        _template_tokens(ctx, messages, {"add_generation_prompt": flag}, {"add_generation_prompt": flag})


def continue_final_message(ctx: Context) -> None:
    """A last assistant message left open (a prefill): the template without a generation prompt and without that
    message's closing tokens."""
    messages = [{"role": "user", "content": ctx.prompts[QUESTION]}, {"role": "assistant", "content": "The answer is"}]
    flags = {"add_generation_prompt": False, "continue_final_message": True}
    _template_tokens(ctx, messages, flags, flags)


def draft_tokens(ctx: Context) -> None:
    """External draft tokens on tensorrt_llm, asked as upstream's speculative client asks the target (len(draft) + 1
    tokens): the answer is the greedy answer's first m + 1 tokens, m the draft's prefix that agrees with it. A right
    draft of 3 gives the first 4; one wrong from its second token the first 2: a target that took the draft unverified
    answers other tokens, one that rejected it all answers 1."""
    if ctx.path.surface != TENSORRT_LLM:
        raise Unanswerable(f"{ctx.path.name}: draft tokens are tensorrt_llm's input (entry models draft through a draft model)")
    greedy = ctx.reference_ids(LONG, 8)
    if len(greedy) < 4:
        raise Unanswerable(f"{ctx.path.name}: the greedy answer ends before 4 tokens: {greedy}")
    wrong = [(greedy[1] + 1) % len(ctx.path.tokenizer), (greedy[2] + 7) % len(ctx.path.tokenizer)]
    for draft, agreed in ((greedy[:3], 3), ([greedy[0], *wrong], 1)):
        answer = ctx.ask(Ask.of(ctx.prompts[LONG], len(draft) + 1, draft=tuple(draft)))
        assert answer.token_ids == greedy[: agreed + 1], (
            f"{ctx.path.name} ({ctx.mode}): draft {draft} agrees with the greedy answer {greedy} on {agreed} token(s), so "
            f"the target answers its first {agreed + 1}; got {answer.token_ids}"
        )


PEAK = 30.0  # a draft logit this far above the rest: the draft's probability of its token rounds to 1 in float32
WHOLE = {"temperature": 1.0, "top_k": 0, "top_p": 1.0}  # sampling over the whole vocabulary: every token's p > 0


def draft_acceptance(ctx: Context) -> None:
    """draft_logits and draft_acceptance_threshold on tensorrt_llm: the target accepts a draft token d by probability,
    p[d] > threshold * q[d] (acceptDraftTokensByLogits; p its sampling's distribution, q the draft's softmax). Sampling
    over the whole vocabulary, a draft of the greedy answer's first 3 tokens with logits peaked on them: at threshold 0
    every token is kept whatever the seed (4 tokens, the draft's 3 first; compared by token, as without logits, a
    sampled answer would leave the draft); at threshold 1 the first is refused (p[d] < q[d], which rounds to 1) and
    its replacement, drawn from max(p - q, 0), is never d: one token, another than the draft's."""
    if ctx.path.surface != TENSORRT_LLM:
        raise Unanswerable(f"{ctx.path.name}: draft logits are tensorrt_llm's input (the BLS sends its draft model's)")
    greedy = ctx.reference_ids(LONG, 4)
    if len(greedy) < 4:
        raise Unanswerable(f"{ctx.path.name}: the greedy answer ends before 4 tokens: {greedy}")
    draft, left = greedy[:3], False
    peaked = [[PEAK if i == token else 0.0 for i in range(len(ctx.path.tokenizer))] for token in draft]
    for seed in SEEDS:
        plain = ctx.unary(Ask.of(ctx.prompts[LONG], 4, **WHOLE, seed=seed)).token_ids or []
        left = left or plain[:3] != draft
        kept = ctx.ask(Ask.of(ctx.prompts[LONG], 4, **WHOLE, seed=seed, draft=tuple(draft), draft_logits=peaked, threshold=0.0))
        assert (kept.token_ids or [])[:3] == draft and len(kept.token_ids or []) == 4, (
            f"{ctx.path.name} ({ctx.mode}, seed {seed}): at threshold 0 every draft token with p > 0 is kept: "
            f"expected {draft} and one token more, got {kept.token_ids}"
        )
        refused = ctx.ask(
            Ask.of(ctx.prompts[LONG], 4, **WHOLE, seed=seed, draft=tuple(draft), draft_logits=peaked, threshold=1.0)
        )
        replaced = refused.token_ids or []
        assert len(replaced) == 1 and replaced[0] != draft[0], (
            f"{ctx.path.name} ({ctx.mode}, seed {seed}): at threshold 1 a draft token whose q rounds to 1 is refused and "
            f"replaced by another: expected one token other than {draft[0]}, got {refused.token_ids}"
        )
    # where both seeds sample the draft itself, an engine that compared tokens would pass the threshold-0 check too
    assert left, f"{ctx.path.name} ({ctx.mode}): the whole-vocabulary samples of seeds {SEEDS} were the greedy {draft}"


def draft_logits(ctx: Context) -> None:
    """use_draft_logits through the BLS: its draft model's generation logits go with its tokens to tensorrt_llm, which
    accepts by probability (upstream's lib/decode.py); greedy, the target's distribution is one-hot, so the answer is
    still the one without speculation. Without a draft model, and streamed, upstream's BLS refuses it in its words."""
    ask = Ask.of(ctx.prompts[LONG], 12, num_draft_tokens=3, use_draft_logits=True)
    refusal = None if ctx.path.drafts else "no draft model"
    refusal = refusal or ("streamed" if ctx.mode == "streamed" else None)
    if refusal is not None:
        ctx.refused(ask, (SPECULATIVE_REFUSALS[refusal],), f"{refusal}: use_draft_logits must be refused")
        return
    if not ctx.path.served.ref.engine.gather_generation_logits:
        raise Unanswerable(f"{ctx.path.name}: its engine returns no generation logits (gather_generation_logits)")
    ctx.same(
        ctx.greedy(LONG, 12).text,
        ctx.ask(ask).text,
        "speculative decoding with the draft's logits (use_draft_logits) must not change the greedy answer",
    )


# top-p decay: a floor far below any likeliest token's probability turns decoding greedy after the first token
DECAY, FLOOR = 1e-3, 1e-6
WIDE = {"temperature": 1.0, "top_p": 0.95, "top_k": 0}  # top_k 0: TensorRT-LLM decays top-p in its top-p layer only


def top_p_decay(ctx: Context) -> None:
    """Top-p decay on tensorrt_llm (computeToppDecay; TensorRT-LLM#16184 dropped it on the PyTorch backend): after each
    sampled token top_p becomes max(top_p * decay, top_p_min). From 0.95 with decay 1e-3 and floor 1e-6 only the
    likeliest token is left after the first: the answer is the undecayed answer's first token (the same seed draws it)
    and then the greedy continuation of prompt + that token. With the floor at 0.95 nothing decays: the answer is the
    undecayed one. top_p_reset_ids is not sent: which output slot the C++ kernel compares with it was not pinned down."""
    if ctx.path.surface != TENSORRT_LLM:
        raise Unanswerable(f"{ctx.path.name}: top-p decay is tensorrt_llm's input only")
    prompt, moved = ctx.prompts[SAMPLE], False
    for seed in SEEDS:
        undecayed = ctx.unary(Ask.of(prompt, SAMPLED, **WIDE, seed=seed)).token_ids or []
        floored = ctx.ask(Ask.of(prompt, SAMPLED, **WIDE, seed=seed, decay=(DECAY, WIDE["top_p"])))
        ctx.same(ctx.decode(undecayed), floored.text, f"top_p_min {WIDE['top_p']} leaves top_p as sent (seed {seed})")
        first = undecayed[:1]
        rest = ctx.unary(Ask.of(prompt, SAMPLED - 1, after=tuple(first))).token_ids or []
        decayed = ctx.ask(Ask.of(prompt, SAMPLED, **WIDE, seed=seed, decay=(DECAY, FLOOR)))
        ctx.same(
            ctx.decode(first + rest),
            decayed.text,
            f"top-p decay {DECAY} (floor {FLOOR}, seed {seed}): the sampled first token {first}, then greedy from there",
        )
        moved = moved or undecayed[1:] != rest
    # without a sampled answer that leaves the greedy path after its first token, a dropped decay would pass
    assert moved, f"{ctx.path.name} ({ctx.mode}): top_p 0.95 sampled the greedy continuation with seeds {SEEDS}"


RETURNED = 2  # num_return_sequences of the sequences check


def return_sequences(ctx: Context) -> None:
    """num_return_sequences on the Triton paths: one answer per sequence, sequence_index 0..n-1 (TensorRT-LLM's
    backend sends each sequence's responses on their own, the final flag with the last). The executor runs each
    further sequence as a child request of the same sampling config (LlmRequest::createChildRequest): greedy, every
    sequence is the greedy answer; sampled, sequence 0 keeps the request's seed (the answer of n = 1) and sequence 1
    draws otherwise (TensorRT-LLM#3311: 'one normal sequence and the rest are filled with eos token')."""
    if not hasattr(ctx.path, "sequences"):
        raise Unanswerable(f"{ctx.path.name}: num_return_sequences is a Triton input")
    expected = ctx.greedy(LONG, 12).text
    greedy = ctx.path.sequences(Ask.of(ctx.prompts[LONG], 12, sequences=RETURNED), ctx.mode)
    assert sorted(greedy) == list(range(RETURNED)), (
        f"{ctx.path.name} ({ctx.mode}): sequence indices {sorted(greedy)} for num_return_sequences={RETURNED}"
    )
    for index, answer in greedy.items():
        ctx.same(expected, answer.text, f"greedy sequence {index} of {RETURNED} must be the greedy answer")
    sampled = dict(temperature=1.0, top_k=0, top_p=0.95, seed=SEEDS[0])
    alone = ctx.unary(Ask.of(ctx.prompts[SAMPLE], SAMPLED, **sampled)).text
    drawn = ctx.path.sequences(Ask.of(ctx.prompts[SAMPLE], SAMPLED, sequences=RETURNED, **sampled), ctx.mode)
    assert sorted(drawn) == list(range(RETURNED)), f"{ctx.path.name} ({ctx.mode}): sampled sequence indices {sorted(drawn)}"
    ctx.same(alone, drawn[0].text, f"sampled sequence 0 must be the answer of num_return_sequences 1 (seed {SEEDS[0]})")
    assert drawn[1].text, f"{ctx.path.name} ({ctx.mode}): sampled sequence 1 is empty (sequence 0: {drawn[0].text!r})"
    # two seeds that sample two texts alone: a sequence 1 equal to sequence 0 shared its seed (which seed it draws
    # with, the request's + 1 in TensorRT-LLM's createChildRequest today, is not pinned for every version)
    if ctx.unary(Ask.of(ctx.prompts[SAMPLE], SAMPLED, **{**sampled, "seed": SEEDS[1]})).text != alone:
        assert drawn[1].text != drawn[0].text, (
            f"{ctx.path.name} ({ctx.mode}): sampled sequence 1 repeats sequence 0 {drawn[0].text!r}: not a draw of its own"
        )


LOOKAHEAD = (4, 3, 4)  # window, n-gram and verification-set sizes: TensorRT-LLM's examples' smallest
# how upstream's tensorrt_llm refuses a request's lookahead config where its model instance sets none: the C++
# backend (utils.cc getLookaheadDecodingFromTensors) and the python one (model.py), word for word
NO_EXECUTOR_LOOKAHEAD = (
    "Cannot set the request lookahead decoding configuration when model instance lookahead parameters are not set.",
    "can only be set if the model instance lookahead parameters are also specified",
)


def lookahead(ctx: Context) -> None:
    """A request's lookahead decoding config on tensorrt_llm: only a model instance whose decoding_mode is lookahead
    (with its lookahead_* parameters) takes one; the harness renders none (the lock has no such option), so upstream's
    backend refuses it in its own words, and the next request is answered. A backend that took it silently would run
    the request without the speculation it asked for."""
    if ctx.path.surface != TENSORRT_LLM:
        raise Unanswerable(f"{ctx.path.name}: lookahead decoding's config is tensorrt_llm's input only")
    ctx.refused(
        Ask.of(ctx.prompts[LONG], 4, lookahead=LOOKAHEAD),
        NO_EXECUTOR_LOOKAHEAD,
        f"a lookahead config {LOOKAHEAD} without the model instance's must be refused",
    )
    ctx.same(ctx.greedy(LONG, 4).text, ctx.ask(Ask.of(ctx.prompts[LONG], 4)).text, "after refusing lookahead, the next answer")


SPECULATIVE_REFUSALS = {  # upstream's tensorrt_llm_bls (model.py and lib/decode.py Request.validate), word for word
    "no draft model": "cannot perform speculative decoding without draft model",
    "streamed": "streaming is not supported with speculative decoding",
}


def draft_model(ctx: Context) -> None:
    """num_draft_tokens through the BLS: its draft model proposes, tensorrt_llm verifies, in turns; greedy, the answer
    is the one without speculation (the equality rule), whatever the draft's length: one token a turn, and the engine's
    max_draft_len (TensorRT-LLM#2208 saw answers change with num_draft_tokens). A draft model of its own (the lock's
    tensorrt_llm_draft) has drafts refused mid-way, where a target drafting for itself has all kept. Where the
    deployment names no draft model (tensorrt_llm_draft_model_name) and for a stream, upstream's BLS refuses it with
    its own words."""
    longest = max(1, ctx.path.served.ref.engine.max_draft_len)
    refusal = None if ctx.path.drafts else "no draft model"
    refusal = refusal or ("streamed" if ctx.mode == "streamed" else None)
    if refusal is not None:
        ask = Ask.of(ctx.prompts[LONG], 12, num_draft_tokens=longest)
        ctx.refused(ask, (SPECULATIVE_REFUSALS[refusal],), f"{refusal}: num_draft_tokens must be refused")
        return
    greedy = ctx.greedy(LONG, 12).text
    for drafted in sorted({1, longest}):
        ctx.same(
            greedy,
            ctx.ask(Ask.of(ctx.prompts[LONG], 12, num_draft_tokens=drafted)).text,
            f"speculative decoding (num_draft_tokens {drafted}) must not change the greedy answer",
        )


def perf_metrics(ctx: Context) -> None:
    """return_perf_metrics: the executor's RequestPerfMetrics come back (model_instance_state.cc). Its time points are
    in order over an answer of 8 tokens (arrival <= first scheduled <= first token < last token); with no draft its
    speculative counts are 0 (where the deployment speculates by itself, they add up); its KV-cache block counts are
    those of a prompt sent twice (kv_blocks.py). On tensorrt_llm, given external draft tokens, the counts are the draft's
    (LlmRequest::updateNumTokensPerIteration): a right draft of 3 gives 3 drafted and 3 accepted (rate 1), one wrong
    from its second token 3 and 1 (rate 1/3)."""
    answer = ctx.ask(Ask.of(ctx.prompts[LONG], 8, perf_metrics=True))
    where = f"{ctx.path.name} ({ctx.mode})"
    m = answer.metrics
    assert m is not None, f"{where}: asked for return_perf_metrics, no perf metric came back"
    names = ("arrival_time_ns", "first_scheduled_time_ns", "first_token_time_ns", "last_token_time_ns")
    assert all(name in m for name in names), f"{where}: perf metrics without all four time points: {m}"
    times = [m[name] for name in names]
    assert times[0] <= times[1] <= times[2] < times[3], (
        f"{where}: arrival, first scheduled, first and last token times of an 8-token answer must be in order (the "
        f"last after the first): {times}"
    )
    # the counts only: where nothing was drafted, the rate's value is not read from upstream's code (0 or NaN)
    counts = (m.get("total_draft_tokens"), m.get("total_accepted_draft_tokens"))
    if ctx.path.served.ref.speculative_config:  # it drafts by itself (model.yaml): the counts must add up
        proposed, kept = counts
        assert proposed is not None and kept is not None and 0 <= kept <= min(proposed, 7), (
            f"{where}: the deployment speculates; (drafted, accepted) over an 8-token answer must have 0 <= accepted <= "
            f"min(drafted, 7), the first token being the context phase's: {counts}"
        )
    else:
        assert counts == (0, 0), f"{where}: no draft was sent, yet (drafted, accepted) = {counts}"
    perf_metrics_blocks(ctx)
    if ctx.path.surface != TENSORRT_LLM:
        return
    greedy = ctx.reference_ids(LONG, 8)
    if len(greedy) < 4:
        raise Unanswerable(f"{ctx.path.name}: the greedy answer ends before 4 tokens: {greedy}")
    wrong = [(greedy[1] + 1) % len(ctx.path.tokenizer), (greedy[2] + 7) % len(ctx.path.tokenizer)]
    for draft, agreed in ((greedy[:3], 3), ([greedy[0], *wrong], 1)):
        got = ctx.ask(Ask.of(ctx.prompts[LONG], len(draft) + 1, draft=tuple(draft), perf_metrics=True)).metrics or {}
        drafted = (got.get("total_draft_tokens"), got.get("total_accepted_draft_tokens"), got.get("acceptance_rate", -1.0))
        expected = (len(draft), agreed, agreed / len(draft))
        assert drafted[:2] == expected[:2] and abs((drafted[2] or 0.0) - expected[2]) < 1e-6, (
            f"{where}: draft {draft} agrees with the greedy answer {greedy} on {agreed} token(s): (drafted, accepted, "
            f"rate) must be {expected}, got {drafted}"
        )


def token_counts(ctx: Context) -> None:
    """return_num_input_tokens and return_num_output_tokens (TensorRT-LLM 1.1's backend, model_instance_state.cc
    fillTritonResponse; PR 5445): every response carries the prompt's token count and the count of the tokens it
    returns, each streamed response its own, so that over one request they add up to max_tokens where no end token can
    end it (so that no closing end token, which a stream may return and a unary answer not, is counted); the BLS
    passes both on from tensorrt_llm (NVIDIA/TensorRT-LLM#8150 fixed a BLS that did not)."""
    prompt, tokens = ctx.prompts[LONG], 8
    answer = ctx.ask(Ask.of(prompt, tokens, token_counts=True, end_id=NO_END))
    where = f"{ctx.path.name} ({ctx.mode})"
    counts = answer.counts or []
    assert counts and all(n is not None and o is not None for n, o in counts), (
        f"{where}: asked for num_input_tokens and num_output_tokens, each response must carry both: {counts}"
    )
    prompt_tokens = len(ctx.path.served.encode(prompt))
    assert {n for n, _ in counts} == {prompt_tokens}, (
        f"{where}: the prompt is {prompt_tokens} tokens, num_input_tokens said {[n for n, _ in counts]}"
    )
    returned = [o or 0 for _, o in counts]  # each one present, as checked above
    assert sum(returned) == tokens and (ctx.mode == "streamed" or len(returned) == 1), (
        f"{where}: {tokens} tokens were generated (no end token can end them), num_output_tokens said {returned} (a "
        "unary answer in one response, a stream's responses each their own tokens)"
    )


def logits(ctx: Context) -> None:
    """Gathered logits describe the greedy answer they came with (verdicts/logits.py): on an answer max_tokens cut and
    on one its end token ended, where TensorRT-LLM 0.10 dropped a step and every later row came one early
    (NVIDIA/TensorRT-LLM#1569)."""
    if ctx.mode == "streamed":
        raise Unanswerable(
            "what TensorRT-LLM's executor streams as logits was not read (NVIDIA/TensorRT-LLM#2090: a buffer of every "
            "step's rows with each response); unary and batched answers carry them whole"
        )
    engine = ctx.path.served.ref.engine
    if not (engine.gather_context_logits and engine.gather_generation_logits):
        raise Unanswerable(
            f"{ctx.path.served.id}: its engine gathers no logits (engines.lock gather_context_logits and "
            "gather_generation_logits, trtllm-build's flags): TensorRT-LLM refuses the request"
        )
    ended, _, count = _ended(ctx)
    encode = ctx.path.served.encode
    for prompt, max_tokens in ((ctx.prompts[LONG], 8), (ended, count + 8)):
        answer = ctx.ask(Ask.of(prompt, max_tokens, logits=True))
        tokens = answer.token_ids
        if tokens is None:  # an entry model's text: the ids of tensorrt_llm behind it, greedy alike
            if ctx.core is None:
                raise Unanswerable(f"{ctx.path.name} returns text only and serves no tensorrt_llm beside it")
            tokens = ctx.unary(Ask.of(prompt, max_tokens), ctx.core).token_ids or []
        cut = len(tokens) == max_tokens
        found = logits_verdict.problems(tokens, len(encode(prompt)), answer.context_logits, answer.generation_logits, cut)
        assert not found, f"{ctx.path.name} ({ctx.mode}), {len(tokens)} tokens of {prompt[:40]!r}: " + "; ".join(found)


def beam_settings_at_width_1(ctx: Context) -> None:
    expected = ctx.greedy(LONG, 12).text
    ctx.same(
        expected,
        ctx.ask(Ask.of(ctx.prompts[LONG], 12, beam=True)).text,
        "beam-search settings must not change a beam-width-1 answer",
    )


def best_of(ctx: Context) -> None:
    """The llmapi model's best_of (the LLM API's SamplingParams): above 1 on a request that decodes greedily (no top_k
    but 1, no top_p) it is refused in the LLM API's words, and the next request is answered; best_of 1 is the answer
    without it; sampled, best_of 2 is answered with one text (n = 1: TritonPath.read counts them). Which of the two
    draws comes back (the likelier by cumulative log prob where the executor returns them, else the first) is not
    compared: whether the PyTorch backend returns them without logprobs was not read."""
    prompt = ctx.prompts[LONG]
    for greedy_ask in (Ask.of(prompt, 8, best_of=2), Ask.of(prompt, 8, temperature=1.0, top_k=1, best_of=2)):
        what = f"greedy {dict(greedy_ask.options)}: the LLM API refuses best_of above 1 under greedy decoding"
        ctx.refused(greedy_ask, (GREEDY_BEST_OF.format(best_of=2),), what)
    expected = ctx.greedy(LONG, 8).text
    ctx.same(expected, ctx.ask(Ask.of(prompt, 8)).text, "after refusing best_of 2, the next answer")
    ctx.same(expected, ctx.ask(Ask.of(prompt, 8, best_of=1)).text, "best_of 1 must leave the greedy answer as it is")
    sampled = ctx.ask(Ask.of(ctx.prompts[SAMPLE], SAMPLED, temperature=1.0, top_k=50, seed=7, best_of=2))
    assert sampled.text, f"{ctx.path.name} ({ctx.mode}): a sampled request with best_of 2 answered no text"


def pad_id(ctx: Context) -> None:
    ids = ctx.reference_ids(LONG, 12)
    answer = ctx.ask(Ask.of(ctx.prompts[LONG], 12, pad_id=ids[3]))
    ctx.same(ctx.decode(ids), answer.text, f"pad_id {ids[3]} (a token of the answer) must not end or change it")


def ignored(ctx: Context, name: str, value) -> None:
    """A field the family's contract says it ignores: the answer is the one without it."""
    expected = ctx.greedy(LONG, 12).text
    answer = ctx.ask_with(Ask.of(ctx.prompts[LONG], 12), {name: value})
    ctx.same(expected, answer.text, f"{name}={value!r}, which the family ignores, must leave the answer as it is")


def refused(ctx: Context, name: str, value) -> None:
    """A field the family's contract says it refuses: an error, and the next request is answered."""
    status = ctx.path.refusal(Ask.of(ctx.prompts[LONG], 4), {name: value})
    assert status is not None and 400 <= status < 500, (
        f"{ctx.path.name}: {name}={value!r}, which the family refuses, was answered (status {status})"
    )
    ctx.same(ctx.greedy(LONG, 4).text, ctx.ask(Ask.of(ctx.prompts[LONG], 4)).text, f"after refusing {name}, the next answer")


EFFECTS: dict[str, Callable[[Context], None]] = {
    f.__name__: f
    for f in (
        greedy,
        echo,
        choices,
        max_tokens,
        temperature,
        top_k,
        top_p,
        top_p_decay,
        min_p,
        return_sequences,
        best_of,
        lookahead,
        seed,
        stop,
        bad_words,
        end_id,
        exclude_input,
        min_tokens,
        penalty,
        log_probs,
        embedding_bias,
        prompt_table,
        guided,
        draft_tokens,
        draft_acceptance,
        draft_model,
        draft_logits,
        perf_metrics,
        kv_reuse_stats,
        kv_retention,
        kv_retention_decode,
        token_counts,
        logits,
        generation_prompt,
        continue_final_message,
        beam_settings_at_width_1,
        pad_id,
    )
}
