"""The text, finish_reason and stop_reason of one llmapi request, unary or streamed: what the suites compare across
deliveries and deployments (a streamed request's are those of its last response that carries output, which holds the
text so far)."""

from __future__ import annotations

from .llmapi_contract import output_text

REASONS = {"return_finish_reason": True, "return_stop_reason": True}


def ended(client, prompt: str, max_tokens: int, streamed: bool = False, **options) -> tuple[str, str | None, str | None]:
    """(text, finish_reason, stop_reason) of `prompt` sent to the llmapi model of `client` (a TritonLLMClient)."""
    if streamed:
        result = client.stream(prompt, max_tokens, **REASONS, **options)
        text, outputs = result.text, result.content_events[-1].outputs
    else:
        answer = client.generate(prompt, max_tokens, **REASONS, **options)
        text, outputs = answer.text, answer.raw
    return text, output_text(outputs, "finish_reason"), output_text(outputs, "stop_reason")
