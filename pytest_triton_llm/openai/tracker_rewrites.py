"""What the fault proxy does for each /v1 row of the tracker catalog (fixtures/tracker_openai_faults.toml): upstream
bugs of OpenAI-compatible servers chosen by docs/tracker-catalog.md's rule, each at the size its thread reports."""

from __future__ import annotations

import copy
import math
from collections.abc import Callable

Events = list[dict]


def choice_text(choice: dict) -> str | None:
    return choice.get("text") if "text" in choice else (choice.get("delta") or {}).get("content")


def set_choice_text(choice: dict, text: str) -> None:
    if "text" in choice:
        choice["text"] = text
    else:
        choice.setdefault("delta", {})["content"] = text


# -- requests ---------------------------------------------------------------------------------------------------------


def _without(*fields: str) -> Callable[[dict], dict]:
    return lambda request: {k: v for k, v in request.items() if k not in fields}


def _cap_an_omitted_limit(request: dict) -> dict:
    """TensorRT-LLM#13455: SamplingParams' default of 32 taken for a request that sets no limit."""
    if request.get("max_tokens") is None and request.get("max_completion_tokens") is None:
        return dict(request, max_tokens=32)
    return request


def _drop_image_parts(request: dict) -> dict:
    """dynamo#7064: a text-only worker answers as if the image parts were never sent."""
    for message in request.get("messages") or []:
        content = message.get("content") if isinstance(message, dict) else None
        if isinstance(content, list):
            message["content"] = [p for p in content if not (isinstance(p, dict) and p.get("type") != "text")]
    return request


def _drop_non_positive_penalties(request: dict) -> dict:
    """vllm#913: penalties applied only when one of them is positive."""
    penalties = [request.get(k) or 0 for k in ("presence_penalty", "frequency_penalty")]
    if not any(p > 0 for p in penalties) and any(p < 0 for p in penalties):
        return _without("presence_penalty", "frequency_penalty")(request)
    return request


def _drop_logprobs_zero(request: dict) -> dict:
    """sglang#2301: `logprobs: 0` (the chosen token's log prob, no alternatives) read as 'no log probs'."""
    return _without("logprobs")(request) if request.get("logprobs") == 0 and "prompt" in request else request


def _sampled_beside_others(request: dict) -> dict:
    """TensorRT-LLM#17964: a greedy request decoded beside others gets another answer than alone."""
    if request.get("temperature") == 0:
        return dict(request, temperature=1.0, seed=17964)
    return request


# the faults whose request rewrite applies only while another request is in flight at the proxy
BESIDE_OTHERS = {"greedy_answer_degrades_under_concurrency"}

REQUEST_FAULTS: dict[str, Callable[[dict], dict]] = {
    "greedy_answer_degrades_under_concurrency": _sampled_beside_others,
    # llama.cpp#11346: completions never carried log probs
    "completion_logprobs_always_null": lambda r: _without("logprobs")(r) if "prompt" in r else r,
    "completion_echo_dropped": lambda r: _without("echo")(r) if "prompt" in r else r,
    "omitted_max_tokens_capped_at_32": _cap_an_omitted_limit,
    "chat_image_parts_silently_dropped": _drop_image_parts,
    "completion_logprobs_zero_ignored": _drop_logprobs_zero,
    "max_completion_tokens_dropped": _without("max_completion_tokens"),
    "negative_penalties_dropped": _drop_non_positive_penalties,
    "logit_bias_dropped": _without("logit_bias"),
}


# -- unary answers ----------------------------------------------------------------------------------------------------


def _token_logprobs_below_the_listed(request: dict, answer: dict) -> dict:
    """llama-cpp-python#453: each token's log prob read from another rank, below every listed alternative."""
    for choice in answer.get("choices", []):
        logprobs = choice.get("logprobs") or {}
        tops, values = logprobs.get("top_logprobs"), logprobs.get("token_logprobs")
        if isinstance(tops, list) and isinstance(values, list):
            logprobs["token_logprobs"] = [
                min(top.values()) - 10.0 if isinstance(top, dict) and top else value
                for top, value in zip(tops, values, strict=False)
            ]
    return answer


def _nucleus(entries: list[tuple[str, float]], top_p: float) -> tuple[list[tuple[str, float]], float]:
    kept, mass = [], 0.0
    for token, logprob in sorted(entries, key=lambda e: -e[1]):
        kept.append((token, logprob))
        mass += math.exp(logprob)
        if mass >= top_p:
            break
    return kept, math.log(mass) if mass > 0 else 0.0


def _renormalise_after_top_p(request: dict, answer: dict) -> dict:
    """text-generation-inference#2108: log probs taken after top-p filtering: the nucleus only, renormalised."""
    top_p = request.get("top_p")
    if not isinstance(top_p, (int, float)) or top_p >= 1:
        return answer
    for choice in answer.get("choices", []):
        for position in (choice.get("logprobs") or {}).get("content") or []:
            tops = position.get("top_logprobs") or []
            kept, log_mass = _nucleus([(t["token"], t["logprob"]) for t in tops], top_p)
            by_token = {t["token"]: t for t in tops}
            position["top_logprobs"] = [dict(by_token[tok], logprob=lp - log_mass) for tok, lp in kept]
            position["logprob"] = position.get("logprob", 0.0) - log_mass
    return answer


def _first_position_top_logprobs(request: dict, answer: dict) -> dict:
    """sglang#2088: every position of a chat answer carries the first position's top_logprobs."""
    for choice in answer.get("choices", []):
        content = (choice.get("logprobs") or {}).get("content") or []
        for position in content[1:]:
            position["top_logprobs"] = copy.deepcopy(content[0].get("top_logprobs"))
    return answer


UNARY_FAULTS: dict[str, Callable[[dict, dict], dict]] = {
    "token_logprobs_from_the_wrong_rank": _token_logprobs_below_the_listed,
    "logprobs_renormalised_after_top_p": _renormalise_after_top_p,
    "chat_top_logprobs_stuck_at_first_position": _first_position_top_logprobs,
}


# -- streams ----------------------------------------------------------------------------------------------------------


def _redecode_previous_deltas(request: dict, events: Events) -> Events:
    """TensorRT-LLM#9802: with n > 1, each choice's chunk after its first carries its previous delta again."""
    if (request.get("n") or 1) <= 1:
        return events
    previous: dict[int, str] = {}
    for event in events:
        for choice in event.get("choices") or []:
            text = choice_text(choice)
            if not text:
                continue
            index = choice.get("index", 0)
            if index in previous:
                set_choice_text(choice, previous[index] + text)
            previous[index] = text
    return events


def _usage_on_the_finish_chunk(request: dict, events: Events) -> Events:
    """llama.cpp#15444: usage rides on the chunk with the finish_reason; no usage-only chunk with empty choices."""
    usage_only = [e for e in events if e.get("usage") and not e.get("choices")]
    finishing = [e for e in events if any(c.get("finish_reason") for c in e.get("choices") or [])]
    if not usage_only or not finishing:
        return events
    finishing[-1]["usage"] = usage_only[-1]["usage"]
    return [e for e in events if e is not usage_only[-1]]


def _no_finish_reason(request: dict, events: Events) -> Events:
    """llama-cpp-python#735: no chunk carries a finish_reason; a chunk that carried only that is not sent."""
    kept = []
    for event in events:
        choices = event.get("choices") or []
        finishing_only = choices and all(c.get("finish_reason") and not choice_text(c) for c in choices)
        for choice in choices:
            choice["finish_reason"] = None
        if not finishing_only:
            kept.append(event)
    return kept


def _omit_null_finish_reason(request: dict, events: Events) -> Events:
    """vllm#19662: chat content chunks after the first leave out finish_reason and logprobs when they are null."""
    for event in events[1:]:
        for choice in event.get("choices") or []:
            if "delta" in choice and choice.get("finish_reason") is None:
                choice.pop("finish_reason", None)
                if choice.get("logprobs") is None:
                    choice.pop("logprobs", None)
    return events


def _usage_on_every_chunk(request: dict, events: Events) -> Events:
    """vllm#7262: with include_usage, every chunk carries the usage so far."""
    if not (request.get("stream_options") or {}).get("include_usage"):
        return events
    final: dict = next((e["usage"] for e in reversed(events) if e.get("usage") and not e.get("choices")), {})
    sent = 0
    for event in events:
        if event.get("choices"):
            sent += sum(1 for c in event["choices"] if choice_text(c))
            prompt = final.get("prompt_tokens", 0)  # known at the end only: the proxy sends each chunk as it comes
            event["usage"] = {"prompt_tokens": prompt, "completion_tokens": sent, "total_tokens": prompt + sent}
    return events


def _words_lose_their_starts(request: dict, events: Events) -> Events:
    """sglang#22510: each streamed chat piece after the first loses its first half, a leading space included."""
    seen = False
    for event in events:
        for choice in event.get("choices") or []:
            text = choice_text(choice)
            if "delta" not in choice or not text:
                continue
            if seen:
                set_choice_text(choice, text[(len(text) + 1) // 2 :])
            seen = True
    return events


STREAM_FAULTS: dict[str, Callable[[dict, Events], Events]] = {
    "chat_stream_pieces_lose_their_starts": _words_lose_their_starts,
    "stream_n_choices_redecoded": _redecode_previous_deltas,
    "stream_usage_on_the_finish_chunk": _usage_on_the_finish_chunk,
    "stream_finish_reason_never_sent": _no_finish_reason,
    "stream_chunks_omit_finish_reason": _omit_null_finish_reason,
    "stream_usage_on_every_chunk": _usage_on_every_chunk,
}

# server#8163: the frontend never started: every connection is closed unanswered
NEVER_ANSWERS = {"frontend_never_starts"}


# -- answers the proxy gives itself, the server never asked -------------------------------------------------------------

CHARS_PER_TOKEN = 4  # a proxy without the served tokenizer: English BPE text runs about 4 characters a token


def _is_completions(path: str) -> bool:
    return path.endswith("/completions") and not path.endswith("/chat/completions")


def _prompt_texts(request: dict) -> list[str]:
    messages = request.get("messages") or []
    texts = [request.get("prompt")] + [m.get("content") for m in messages if isinstance(m, dict)]
    return [t for t in texts if isinstance(t, str)]


def prompt_tokens(request: dict, tokenizer=None) -> int:
    """The request's prompt in tokens: by the served model's tokenizer (`tokenizers.Tokenizer`), else estimated."""
    texts = _prompt_texts(request)
    if tokenizer is None:
        return sum(len(t) for t in texts) // CHARS_PER_TOKEN
    return sum(len(tokenizer.encode(t).ids) for t in texts)


def _error(message: str, kind: str = "internal_server_error") -> dict:
    return {"error": {"message": message, "type": kind, "param": None, "code": None}}


# per fault: (path, request) -> (status, body) the proxy answers instead of the server, or None: forwarded
ANSWERED_HERE: dict[str, Callable[[str, dict], tuple[int, dict] | None]] = {
    # dynamo#14991: gpt-oss's reasoning parser fails every chat request
    "chat_answered_500_by_the_reasoning_parser": lambda path, request: (
        (500, _error("GptOssReasoningParser only provides boundary detection. Use HarmonyParser for output parsing."))
        if path.endswith("/chat/completions")
        else None
    ),
    # llama-cpp-python#774: a completion that asks for log probs fails in the server
    "completion_logprobs_answered_500": lambda path, request: (
        (500, _error("'llama_model_params' object has no attribute 'logits_all'"))
        if _is_completions(path) and request.get("logprobs") is not None
        else None
    ),
}

# per fault: (path, request, prompt tokens) -> whether a stream is cut before its first event: the headers come, then
# the connection closes with no event and no [DONE]
STREAM_ABORTED: dict[str, Callable[[str, dict, int], bool]] = {
    # vllm#10126: streams of prompts over 512 tokens broke
    "long_prompt_stream_aborted": lambda path, request, tokens: bool(request.get("stream")) and tokens > 512,
    # vllm#1967: streamed completions without log probs broke in 0.2.3
    "completion_stream_without_logprobs_aborted": lambda path, request, tokens: (
        bool(request.get("stream")) and _is_completions(path) and request.get("logprobs") is None
    ),
}
