"""The /v1 paths of the property matrix: /v1/completions and /v1/chat/completions of --openai-url, asked unary,
streamed or in a batch of four. Canonical options become the family's request fields by fixtures/properties.toml's
openai names; a field the family's contract does not honour is Unanswerable with the contract's words."""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from typing import cast

from ..openai.client import OpenAIRequestError, chunk_log_probs
from .matrix import OPENAI
from .requests import Answer, Ask, Unanswerable
from .triton_paths import FILLERS

FIELDS = {  # canonical option -> the OpenAI request field (llama-cpp-python's repeat_penalty where a family has it)
    "temperature": "temperature",
    "top_k": "top_k",
    "top_p": "top_p",
    "seed": "seed",
    "stop": "stop",
    "min_tokens": "min_tokens",
    "repetition_penalty": "repeat_penalty",
    "presence_penalty": "presence_penalty",
    "frequency_penalty": "frequency_penalty",
    "bias": "logit_bias",
    "log_probs": "logprobs",
    "echo": "echo",
    "n": "n",
}


class OpenAIPath:
    """One endpoint of the target: `chat` False for /v1/completions, True for /v1/chat/completions."""

    surface = OPENAI

    def __init__(self, target, chat: bool):
        self.target, self.chat = target, chat
        self.name = "/v1/chat/completions" if chat else "/v1/completions"
        self.path = "/chat/completions" if chat else "/completions"
        self.key = self.name
        self.tokenizer = target.tokenizer
        # the lock's limit where --openai-engine names the served engine; unknown otherwise
        self.max_input_len: int | None = target.engine.max_input_len if target.engine is not None else None

    def lacks(self, names: list[str]) -> str | None:
        fields = self.target.family.fields
        if any(n in fields and fields[n].supported in ("yes", "partial") for n in names):
            return None
        known = [n for n in names if n in fields]
        return (
            self.target.family.why_not(known[0])
            if known
            else f"{self.target.family.title}: no request field {' or '.join(names)}"
        )

    def support(self, name: str) -> str | None:
        field = self.target.family.fields.get(name)
        return None if field is None else field.supported

    def question(self, question: str) -> str:
        """`question` as this endpoint asks it: a chat message, or on /v1/completions in the model's chat template."""
        if self.chat:
            return question
        if self.tokenizer is None:
            raise Unanswerable(f"{self.name}: no tokenizer to apply the chat template with (--tokenizer)")
        messages = [{"role": "user", "content": question}]
        return self.tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)

    def response_format(self, guide: tuple[str, str]) -> dict:
        """The family's response_format for guide (kind, text); Unanswerable where the endpoint or family takes none."""
        family = self.target.family
        guides, (kind, text) = family.guides, guide
        if guides is None:
            raise Unanswerable(
                family.why_not("response_format") if "response_format" in family.fields else f"{family.title}: no response_format"
            )
        if self.name not in guides.endpoints:
            raise Unanswerable(f"{family.title}: {self.name} takes no response_format ({family.fields['response_format'].note})")
        if kind not in guides.bodies:
            raise Unanswerable(f"{family.title}: response_format asks for no {kind} guide ({guides.cite})")
        return guides.body(kind, text)

    def body(self, ask: Ask, extra: dict | None = None) -> dict:
        fields = dict(extra or {})
        for option, value in ask.options:
            if option == "guide":
                fields["response_format"] = self.response_format(cast("tuple[str, str]", value))
                continue
            if option not in FIELDS:
                raise Unanswerable(f"{self.name}: the request has no field for {option}")
            name = FIELDS[option]
            if self.support(name) not in ("yes", "partial"):
                raise Unanswerable(
                    self.target.family.why_not(name) if self.support(name) else f"{self.target.family.title}: no field {name}"
                )
            fields[name] = value
        if "logprobs" in fields and self.chat:
            fields.update(logprobs=True, top_logprobs=1)
        elif "logprobs" in fields:
            fields["logprobs"] = 1
        if "logit_bias" in fields:
            fields["logit_bias"] = {str(token): weight for token, weight in fields["logit_bias"].items()}
        make = self.target.chat if self.chat else self.target.completion
        body = make(ask.prompt, ask.max_tokens, **fields)
        if ask.max_tokens is None:  # left out: the family's own limit applies (omitted_limit)
            body.pop("max_tokens", None)
        return body

    def omitted_limit(self) -> float | None:
        """The tokens an answer may run to when the request leaves max_tokens out, as the family's contract says: a
        number, inf (no limit but the window), or None where it is the server's option or unknown."""
        field = self.target.family.fields.get("max_tokens")
        if field is None or (self.chat and field.chat_default):  # the chat endpoint's own default: not stated
            return None
        if field.when_omitted == "none":
            return float("inf")
        return float(field.when_omitted) if field.when_omitted.isdigit() else None

    def answer(self, ask: Ask, mode: str) -> Answer:
        return self.answer_with(ask, mode, {})

    def refusal(self, ask: Ask, fields: dict) -> int | None:
        """The status of the error `fields` added to `ask` get (None: answered)."""
        try:
            self._unary(self.body(ask, fields))
        except OpenAIRequestError as exc:
            return exc.status
        return None

    def answer_with(self, ask: Ask, mode: str, fields: dict) -> Answer:
        """`ask` with raw request `fields` added as they are (a field the family ignores or refuses), unary or streamed
        (a batched request goes beside its fillers: effects.Context.batched)."""
        if mode not in ("unary", "streamed"):
            raise ValueError(f"answer_with sends unary or streamed requests, not {mode}")
        body, endpoint = self.body(ask, fields), self.target.endpoint
        try:
            if mode == "streamed":
                streamed = endpoint.stream(self.path, body)
                return _answer(streamed.text, streamed.log_probs if "logprobs" in body else None, streamed.usage)
            return self._unary(body)
        except OpenAIRequestError as exc:
            raise AssertionError(f"{self.name} ({mode}) refused {dict(ask.options)}: {exc}") from None

    def batch(self, asks: list[Ask], fields: dict | None = None) -> list[Answer]:
        """`asks` sent at once, each unary; their answers in order. `fields`: raw request fields of the last one (the
        cell's request, after its fillers)."""
        bodies = [self.body(ask) for ask in asks[:-1]] + [self.body(asks[-1], fields or {})]
        try:
            return self._at_once(bodies)
        except OpenAIRequestError as exc:
            raise AssertionError(f"{self.name} (batched) refused a request: {exc}") from None

    def choices(self, ask: Ask, mode: str) -> dict[int, str]:
        """Each choice's text by its index, for `ask` with n > 1: unary, streamed (its deltas joined per index) or
        among FILLERS at once."""
        body, endpoint = self.body(ask), self.target.endpoint
        if mode == "streamed":
            return {index: "".join(deltas) for index, deltas in endpoint.stream(self.path, body).by_choice.items()}
        with ThreadPoolExecutor(4) as pool:
            others = (
                [pool.submit(self._unary, self.body(Ask.of(p, ask.max_tokens))) for p in FILLERS] if mode == "batched" else []
            )
            answer = {choice.index: choice.text for choice in endpoint.choices(self.path, body)}
            for other in others:
                other.result()
        return answer

    def _at_once(self, bodies: list[dict]) -> list[Answer]:
        with ThreadPoolExecutor(len(bodies)) as pool:
            return list(pool.map(self._unary, bodies))

    def _unary(self, body: dict) -> Answer:
        done = self.target.endpoint.chat(body) if self.chat else self.target.endpoint.complete(body)
        return _answer(done.text, chunk_log_probs(done.logprobs, self.chat) if "logprobs" in body else None, done.usage)


def _answer(text: str, per_token: list[float] | None, usage: dict | None) -> Answer:
    """An answer's text, per-token log probs (where asked) and its usage's counts."""
    usage = usage or {}
    cum = sum(per_token) if per_token is not None else None
    return Answer(
        text,
        tokens=usage.get("completion_tokens"),
        log_probs=per_token,
        cum_log_prob=cum,
        prompt_tokens=usage.get("prompt_tokens"),
    )
