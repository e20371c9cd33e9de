"""Serving invariants in the spirit of MLPerf's TEST06: streams agree with unary answers, end tokens and counts are true.

Every check runs on every selected deployment, the text checks once per entry model (ensemble, tensorrt_llm_bls; the
llmapi model on llmapi deployments). Token-id checks go through the `tensorrt_llm` model, as upstream's
inflight_batcher_llm client does; the llmapi model returns text only, so there the same invariants are checked on
text. Everything asserted here is what real TensorRT-LLM does too: where its streamed text may legitimately differ
from the unary text (a character split across tokens), the comments say why and the check compares the rest.

Over /v1 (class TestOverV1, run with --openai-url):
Serving invariants over /v1 (MLPerf TEST06's questions asked of an OpenAI endpoint): usage adds up, concurrent
requests get the answers they get alone, and concurrent streams are whole, each ending as it does alone."""

from __future__ import annotations

import re
import pytest
from pytest_triton_llm.openai.client import usage_counts
from pytest_triton_llm.triton.llmapi_contract import output_text
from pytest_triton_llm.triton.tensor_contract import NO_END, returned_token_count
from concurrent.futures import ThreadPoolExecutor
from pytest_triton_llm.verdicts.equality import assert_agree

pytestmark = pytest.mark.invariants


TOKENS = 16


FIRST = 8  # enough to see the first token or piece begin the answer


EOS_BUDGET = 200  # room for the chat answer to end at its end token long before max_tokens does


REPLACEMENT = "\ufffd"


FAMILY = "\U0001f468\u200d\U0001f469\u200d\U0001f467"  # man, ZWJ, woman, ZWJ, girl: one grapheme of 5 code points


# Repetition makes even a small model go on with the pattern, so these make the model *produce* multi-byte text that a
# byte-level tokenizer splits inside characters (an emoji is 4 UTF-8 bytes, beyond the BMP: a UTF-16 surrogate pair).
UTF8_PROMPTS = {
    "cjk": " ".join(["东京"] * 8),
    "zwj_sequence": " ".join([FAMILY] * 6),
    "astral": " ".join(["\U0001d11e \U0001f642 \U0001f1eb\U0001f1f7"] * 4),  # G clef, a smiley, the French flag
    "combining_mark": " ".join(["cafe\u0301"] * 6),  # e + COMBINING ACUTE ACCENT: must not come back as a composed é
    "whitespace": "a\tb\tc\td\n\ne  f   g\n\t" * 2,
}


# Sent as the prompt where the deployment echoes it: the answer then holds this text whatever the model makes of it.
ECHO = f"Tokyo 東京, Zürich, naïve cafe\u0301 {FAMILY} \U0001f1eb\U0001f1f7 \U0001d11e \U0001f600\tone\ttwo\n\nthree   four  \n"


def _streams(served) -> bool:
    return "streaming" in served.ref.capabilities


def _matches_with_split_characters(streamed: str, unary: str) -> bool:
    """`streamed` is `unary`, except that runs of U+FFFD in it may stand for non-ASCII text of `unary`.

    The engine ensemble's postprocessing (upstream's as the stand-in's) detokenizes each streamed response on its own:
    a character whose UTF-8 bytes span two tokens comes out as U+FFFD in each piece, on real TensorRT-LLM too. So the
    concatenation is compared where it is free of replacement characters, and a replaced run may only cover characters
    that are multi-byte in the unary text (an ASCII character is one byte: it is never split)."""
    if streamed == unary:
        return True
    if REPLACEMENT not in streamed:
        return False
    pattern = r"[^\x00-\x7f]+".join(re.escape(part) for part in re.split(f"{REPLACEMENT}+", streamed))
    return re.fullmatch(pattern, unary, flags=re.DOTALL) is not None


def _cumulative_matches(streamed: str, unary: str) -> bool:
    """The llmapi model's last streamed text (the text so far) is the unary text, byte for byte; but TensorRT-LLM's
    incremental detokenizer holds back tokens whose text ends in an incomplete character, and its default one
    (tokenizers' DecodeStream) never flushes them: where max_tokens cut a character in two, the unary text ends in
    U+FFFD that the stream does not carry."""
    if streamed == unary:
        return True
    return unary.startswith(streamed) and unary[len(streamed) :].endswith(REPLACEMENT)


def _agree(result, unary: str) -> bool:
    """A stream's text agrees with the unary text, by the rule of how the entry model streams (see above)."""
    return (_cumulative_matches if result.cumulative else _matches_with_split_characters)(result.text, unary)


# -- 1. the first streamed token is the first token of the unary answer -------------------------------------------------
@pytest.mark.triton_llm_requires("streaming", "inflight_batcher_llm", "prompt_excluded")
@pytest.mark.parametrize("name", ["fox", "italy", "numpy_mean"])
def test_the_first_streamed_token_is_the_first_token_of_the_unary_answer(triton_llm, prompts, name):
    ids = triton_llm.encode(prompts.completion[name])
    unary = triton_llm.client.generate_ids(ids, FIRST, end_id=NO_END, exclude_input_in_output=True).token_ids
    events = triton_llm.client.stream_ids(ids, FIRST, end_id=NO_END, exclude_input_in_output=True).content_events
    first = events[0].token_ids()
    # one token per response on TensorRT-LLM without speculative decoding; a larger first step must still be a prefix
    assert first, "the first streamed response carries no token"
    assert first == unary[: len(first)], (first, unary)


@pytest.mark.triton_llm_entry_models
@pytest.mark.triton_llm_requires("streaming")
@pytest.mark.parametrize("name", ["fox", "italy"])
def test_the_first_streamed_text_begins_the_unary_text(triton_llm, prompts, name):
    # prompts whose answer starts with a word: an incremental detokenizer may hold back a first token of whitespace
    prompt = prompts.completion[name]
    unary = triton_llm.client.generate(prompt, FIRST).text
    first = triton_llm.client.stream(prompt, FIRST).content_events[0].text()  # a piece, or on llmapi the text so far
    assert first, "the first streamed response carries no text"
    assert unary.startswith(first), (first, unary)


# -- 2. at most one end token, and only as the last one ------------------------------------------------------------------
def _ends_at_eos(served, prompts) -> tuple[list[int], list[int]]:
    """(prompt ids, greedy ids) of the chat question, which the model answers in a few words and ends with its eos."""
    ids = served.encode(served.chat_prompt(prompts.chat_question))
    out = served.client.generate_ids(ids, EOS_BUDGET, end_id=served.end_id, exclude_input_in_output=True).token_ids
    assert len(out) < EOS_BUDGET, "the answer did not reach its end token: nothing here shows how an answer ends"
    return ids, out


def _at_most_one_trailing(ids: list[int], end: int) -> None:
    # TEST06's rule: the end token that ended the answer may be returned, once and last (TensorRT-LLM and the stand-in
    # return the tokens before it), never a run of end tokens or one mid-answer
    assert ids.count(end) <= 1 and end not in ids[:-1], f"end token {end} in {ids}"


def _without_end(ids: list[int], end: int) -> list[int]:
    """The answer without the one end token that may close it: what a stream and a unary answer must both hold."""
    return ids[:-1] if ids[-1:] == [end] else ids


@pytest.mark.triton_llm_requires("inflight_batcher_llm", "prompt_excluded")
def test_the_end_token_comes_at_most_once_and_only_last(triton_llm, prompts):
    _, out = _ends_at_eos(triton_llm, prompts)
    _at_most_one_trailing(out, triton_llm.end_id)


@pytest.mark.triton_llm_requires("streaming", "inflight_batcher_llm", "prompt_excluded")
def test_a_streamed_answer_ends_like_the_unary_one_with_at_most_one_end_token(triton_llm, prompts):
    ids, unary = _ends_at_eos(triton_llm, prompts)
    streamed = triton_llm.client.stream_ids(ids, EOS_BUDGET, end_id=triton_llm.end_id, exclude_input_in_output=True)
    _at_most_one_trailing(streamed.token_ids, triton_llm.end_id)
    assert _without_end(streamed.token_ids, triton_llm.end_id) == _without_end(unary, triton_llm.end_id)


@pytest.mark.triton_llm_entry_models
def test_an_answer_ended_by_its_end_token_carries_no_end_token_text(triton_llm, prompts):
    client, eos_text = triton_llm.client, triton_llm.tokenizer.eos_token  # "<|im_end|>" for ChatML models
    prompt = triton_llm.chat_prompt(prompts.chat_question)
    # the llmapi model stops at the tokenizer's eos by itself and has no end_id input; the ensemble takes end_id
    options = {"return_finish_reason": True} if client.speaks_llmapi else {"end_id": triton_llm.end_id}
    unary = client.generate(prompt, EOS_BUDGET, **options)
    if client.speaks_llmapi:
        assert output_text(unary.raw, "finish_reason") == "stop", unary.text
    assert unary.text and not unary.text.endswith(eos_text), unary.text
    if _streams(triton_llm):
        streamed = client.stream(prompt, EOS_BUDGET, **options)
        assert not streamed.text.endswith(eos_text), streamed.text
        assert _agree(streamed, unary.text), (streamed.text, unary.text)


# -- 3. reported token counts are true -----------------------------------------------------------------------------------
def _ask_until(served, prompts, ending: str):
    """(prompt ids, max_tokens, end_id) of a request that `ending` ends: max_tokens, or the end token well before it."""
    if ending == "max_tokens":
        return served.encode(prompts.completion["columbus"]), TOKENS, NO_END
    return served.encode(served.chat_prompt(prompts.chat_question)), EOS_BUDGET, served.end_id


@pytest.mark.triton_llm_requires("inflight_batcher_llm", "prompt_excluded")
@pytest.mark.parametrize("ending", ["max_tokens", "end_id"])
def test_sequence_length_is_the_number_of_returned_ids(triton_llm, prompts, ending):
    ids, max_tokens, end_id = _ask_until(triton_llm, prompts, ending)
    result = triton_llm.client.generate_ids(ids, max_tokens, end_id=end_id, exclude_input_in_output=True)
    # output_ids may be padded past sequence_length (upstream's client slices it so), never shorter than it claims
    assert result.sequence_length <= result.raw["output_ids"].shape[-1]
    assert result.sequence_length == len(result.token_ids) == returned_token_count(result.raw)
    if ending == "max_tokens":
        assert result.sequence_length == max_tokens
        return
    assert 0 < result.sequence_length < max_tokens
    # it ended where the end token came, which it does not count: without an end id, one token more reaches that token
    on = triton_llm.client.generate_ids(ids, result.sequence_length + 1, end_id=NO_END, exclude_input_in_output=True)
    assert on.token_ids[:-1] == result.token_ids and on.token_ids[-1] == end_id not in result.token_ids, on.token_ids


@pytest.mark.triton_llm_requires("streaming", "inflight_batcher_llm", "prompt_excluded")
@pytest.mark.parametrize("ending", ["max_tokens", "end_id"])
def test_a_streamed_answer_counts_as_many_tokens_as_the_unary_one(triton_llm, prompts, ending):
    ids, max_tokens, end_id = _ask_until(triton_llm, prompts, ending)
    unary = triton_llm.client.generate_ids(ids, max_tokens, end_id=end_id, exclude_input_in_output=True)
    streamed = triton_llm.client.stream_ids(ids, max_tokens, end_id=end_id, exclude_input_in_output=True)
    for event in streamed.content_events:  # each response's sequence_length counts the ids it carries
        assert returned_token_count(event.outputs) == len(event.token_ids())
    assert sum(returned_token_count(e.outputs) for e in streamed.events) == len(streamed.token_ids)
    assert unary.sequence_length == len(unary.token_ids)
    # the same tokens, so the same count, but for a closing end token that only one side may return (see above)
    assert _without_end(streamed.token_ids, end_id) == _without_end(unary.token_ids, end_id)


@pytest.mark.triton_llm_requires("inflight_batcher_llm", "exclude_input_in_output")
def test_the_count_includes_the_prompt_only_when_the_prompt_is_returned(triton_llm):
    ids = triton_llm.encode(ECHO)  # multi-byte text: ids and characters differ in number
    without = triton_llm.client.generate_ids(ids, TOKENS, end_id=NO_END, exclude_input_in_output=True)
    with_prompt = triton_llm.client.generate_ids(ids, TOKENS, end_id=NO_END, exclude_input_in_output=False)
    assert without.sequence_length == len(without.token_ids) == TOKENS
    assert with_prompt.sequence_length == len(with_prompt.token_ids) == len(ids) + TOKENS
    assert with_prompt.token_ids == ids + without.token_ids


# -- 4. streamed text is the unary text, whitespace and multi-byte UTF-8 included ----------------------------------------
@pytest.mark.triton_llm_entry_models
@pytest.mark.triton_llm_requires("streaming")
@pytest.mark.parametrize("name", sorted(UTF8_PROMPTS))
def test_streamed_text_is_the_unary_text_in_every_script_and_whitespace(triton_llm, name):
    prompt = UTF8_PROMPTS[name]
    unary = triton_llm.client.generate(prompt, TOKENS).text
    streamed = triton_llm.client.stream(prompt, TOKENS)
    assert _agree(streamed, unary), (streamed.text, unary)


@pytest.mark.triton_llm_entry_models
@pytest.mark.triton_llm_requires("streaming")
def test_an_echoed_utf8_prompt_comes_back_byte_for_byte_streamed_or_not(triton_llm):
    client = triton_llm.client
    if client.speaks_llmapi:
        options = {"exclude_input_in_output": False}  # sampling_param_exclude_input_from_output, per request
    elif triton_llm.ref.options.exclude_input_in_output:
        pytest.skip(
            f"{triton_llm.id} excludes the prompt from its output (the lock's exclude_input_in_output) and its "
            f"{triton_llm.entry} has no input to ask for it: nothing echoes the prompt"
        )
    else:
        options = {}
    unary = client.generate(ECHO, TOKENS, **options).text
    streamed = client.stream(ECHO, TOKENS, **options)
    assert unary.encode("utf-8").startswith(ECHO.encode("utf-8")), unary  # not normalized, no space or tab lost
    # The engine ensemble's C++ backend never streams the prompt (LlmRequest::createResult counts streamed tokens from
    # the prompt's end): its stream is the generated text alone. The llmapi model streams `output.text` of the LLM
    # API, whose prompt echo in a stream differs by version (llmapi-0.19 and 1.0 do not stream at all): there the
    # stream must agree with one of the two, and the unary answer above carries the byte-for-byte check.
    generated = unary[len(ECHO) :]
    if client.speaks_llmapi:
        assert _agree(streamed, unary) or _agree(streamed, generated), (streamed.text, unary)
    else:
        assert _agree(streamed, generated), (streamed.text, generated)


@pytest.mark.triton_llm_requires("llmapi", "streaming")
@pytest.mark.parametrize("name", sorted(UTF8_PROMPTS))
def test_each_streamed_llmapi_text_extends_the_one_before(triton_llm, name):
    # TensorRT-LLM's LLM API detokenizes incrementally and holds back a token whose text ends in an incomplete
    # character, so the text so far only ever grows at its end; a response that decoded a half character as U+FFFD
    # would be taken back by the next one, and a client printing the deltas would print garbage.
    texts = [e.text() for e in triton_llm.client.stream(UTF8_PROMPTS[name], TOKENS).content_events]
    broken = [(a, b) for a, b in zip(texts, texts[1:], strict=False) if not b.startswith(a)]
    assert not broken, broken[:3]


CONCURRENT = 4
V1_PATHS = {"completions": "/completions", "chat": "/chat/completions"}


def _v1_requests(openai_target, prompts, endpoint: str):
    """CONCURRENT greedy request bodies for `endpoint` (chat: each prompt as the user's message), and the call that
    answers one unary."""
    if endpoint == "chat":
        return [openai_target.chat(p, TOKENS) for p in prompts.batch(CONCURRENT)], openai_target.endpoint.chat
    return [openai_target.completion(p, TOKENS) for p in prompts.batch(CONCURRENT)], openai_target.endpoint.complete


class TestOverV1:
    """The same capability over an OpenAI endpoint: run with --openai-url, deselected without it."""

    @pytest.mark.parametrize("endpoint", ["completions", "chat"])
    def test_usage_adds_up(self, openai_target, prompts, endpoint):
        """The totals add up, and completion_tokens counts what was generated: exactly max_tokens where max_tokens cut
        the answer (its finish_reason says so), fewer where the model stopped. A family that answers "stop" for both
        (Triton's openai_frontend) cannot say which ended an answer: there only the bounds are checked."""
        cut = openai_target.max_tokens_finish_reason
        cut = None if cut == "stop" else cut
        bodies, ask = _v1_requests(openai_target, prompts, endpoint)
        for body in bodies:
            answer = ask(body)
            usage = answer.usage
            assert usage["total_tokens"] == usage["prompt_tokens"] + usage["completion_tokens"], usage
            assert usage["prompt_tokens"] > 0 and 0 < usage["completion_tokens"] <= TOKENS, usage
            if cut is not None and answer.finish_reason == cut:
                assert usage["completion_tokens"] == TOKENS, (answer.finish_reason, usage, answer.text)

    @pytest.mark.parametrize("endpoint", ["completions", "chat"])
    def test_concurrent_requests_get_the_answers_they_get_alone(self, openai_target, prompts, openai_equality_rule, endpoint):
        """The texts under the endpoint's equality rule; where a text is the one it was alone, its finish_reason and
        token counts must be too (a usage mixed up between requests, or counted for the batch, shows there)."""
        bodies, answer = _v1_requests(openai_target, prompts, endpoint)
        alone = [answer(body) for body in bodies]
        with ThreadPoolExecutor(CONCURRENT) as pool:
            together = list(pool.map(answer, bodies))
        assert_agree([a.text for a in alone], [t.text for t in together], openai_equality_rule, openai_target.tokenizer)
        same = [(a, t) for a, t in zip(alone, together, strict=True) if a.text == t.text]
        for a, t in same:
            ended = [(each.finish_reason, usage_counts(each.usage)) for each in (t, a)]
            assert ended[0] == ended[1], (t.text, t.usage, a.usage)

    @pytest.mark.parametrize("delivery", ["unary", "streamed"])
    def test_a_chat_answer_ended_by_its_end_token_carries_no_special_token_text(self, openai_target, prompts, delivery):
        """The chat template's end token ends the answer (finish_reason "stop") and, like every special token of the
        served tokenizer ("<|im_end|>", "<|endoftext|>"), never shows in its text, unary or streamed."""
        body = openai_target.chat(prompts.chat_short, EOS_BUDGET)
        if delivery == "streamed":
            answer = openai_target.endpoint.stream(V1_PATHS["chat"], body)
        else:
            answer = openai_target.endpoint.chat(body)
        assert answer.finish_reason == "stop", f"no end within {EOS_BUDGET} tokens: {answer.text!r}"
        shown = [t for t in openai_target.tokenizer.all_special_tokens if t and t in answer.text]
        assert answer.text.strip() and not shown, (shown, answer.text)

    @pytest.mark.parametrize("endpoint", ["completions", "chat"])
    def test_concurrent_streams_are_whole_and_end_as_they_do_alone(self, openai_target, prompts, openai_equality_rule, endpoint):
        """A server that ends one stream early when another request arrives (llama-cpp-python's interrupt_requests,
        its default) fails here: that stream stops short of its unary text (an early divergence, which no rule allows)."""
        bodies, answer = _v1_requests(openai_target, prompts, endpoint)
        alone = [answer(body) for body in bodies]
        path = V1_PATHS[endpoint]
        with ThreadPoolExecutor(CONCURRENT) as pool:
            streams = list(pool.map(lambda body: openai_target.endpoint.stream(path, body), bodies))
        assert_agree([a.text for a in alone], [s.text for s in streams], openai_equality_rule, openai_target.tokenizer)
        assert all(s.done for s in streams), [s.done for s in streams]
        same = [(s.finish_reason, a.finish_reason) for s, a in zip(streams, alone, strict=True) if s.text == a.text]
        assert all(mine == theirs for mine, theirs in same), same
