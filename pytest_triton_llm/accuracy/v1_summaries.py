"""Summaries of CNN/DailyMail articles over an OpenAI endpoint, as an engine's [accuracy] table says: what the /v1
accuracy test and the migration gate to /v1 score."""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor

from .prompting import build_prompt, user_message

V1_CONCURRENCY = 4  # a server that runs one request at a time (llama-cpp-python) queues the rest
V1_ENDPOINT = {"chat": "/chat/completions", "plain": "/completions"}  # by the [accuracy] table's prompt


def v1_summaries(openai_target, articles, settings, tokenizer, max_input_len: int) -> list[str]:
    """Greedy summaries over /v1 as an engine's [accuracy] table says, V1_CONCURRENCY at a time: each article the user
    message of /v1/chat/completions (the server renders its own chat template, as users' clients call it) or, for a
    "plain" prompt, the rendered text on /v1/completions; cut to fit by `tokenizer` as on Triton."""

    def summary(article) -> str:
        if settings.prompt == "chat":
            message = user_message(article, settings, tokenizer, max_input_len)
            return openai_target.endpoint.chat(openai_target.chat(message, settings.max_new_tokens)).text
        prompt = build_prompt(article, settings, tokenizer, max_input_len)
        return openai_target.endpoint.complete(openai_target.completion(prompt, settings.max_new_tokens)).text

    with ThreadPoolExecutor(V1_CONCURRENCY) as pool:
        return list(pool.map(summary, articles))
