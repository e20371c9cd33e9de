"""Summarization prompts for an engine: instruction + article (cut to fit) in the chat template or as text."""

from __future__ import annotations

from ..stack.lock import Accuracy
from .dataset import Article

_PLAIN = "{instruction}\n\n{article}\n\nSummary:"


def build_prompt(article: Article, settings: Accuracy, tokenizer, max_input_len: int) -> str:
    """The whole prompt text: instruction and article (cut to fit) in the chat template (prompt "chat") or plain."""
    instruction, text = _fitted(article, settings, tokenizer, max_input_len)
    return _render(instruction, text, settings, tokenizer)


def user_message(article: Article, settings: Accuracy, tokenizer, max_input_len: int) -> str:
    """The chat prompt's one user message, the article cut as build_prompt cuts it: what a /v1/chat/completions
    request sends (the server renders the template itself)."""
    return _message(*_fitted(article, settings, tokenizer, max_input_len))


def _message(instruction: str, text: str) -> str:
    return f"{instruction}\n\n{text}"


def _render(instruction: str, text: str, settings: Accuracy, tokenizer) -> str:
    if settings.prompt == "plain":
        return _PLAIN.format(instruction=instruction, article=text)
    messages = [{"role": "user", "content": _message(instruction, text)}]
    return tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)


def _fitted(article: Article, settings: Accuracy, tokenizer, max_input_len: int) -> tuple[str, str]:
    """(instruction, article text cut so that the rendered prompt fits max_input_len and max_article_tokens)."""
    instruction = article.instruction or settings.instruction
    overhead = len(tokenizer.encode(_render(instruction, "", settings, tokenizer), add_special_tokens=False))
    budget = min(settings.max_article_tokens, max_input_len - overhead - 8)  # 8: slack for re-tokenization at the seam
    ids = tokenizer.encode(article.text, add_special_tokens=False)
    return instruction, tokenizer.decode(ids[:budget]) if len(ids) > budget else article.text
