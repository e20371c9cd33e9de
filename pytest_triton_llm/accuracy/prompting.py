"""Summarization prompts for an engine: instruction + article (cut to fit) in the chat template or as text."""

from __future__ import annotations

from ..lock import Accuracy
from .dataset import Article

_PLAIN = "{instruction}\n\n{article}\n\nSummary:"


def build_prompt(article: Article, settings: Accuracy, tokenizer, max_input_len: int) -> str:
    instruction = article.instruction or settings.instruction

    def render(text: str) -> str:
        if settings.prompt == "plain":
            return _PLAIN.format(instruction=instruction, article=text)
        messages = [{"role": "user", "content": f"{instruction}\n\n{text}"}]
        return tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)

    overhead = len(tokenizer.encode(render(""), add_special_tokens=False))
    budget = min(settings.max_article_tokens, max_input_len - overhead - 8)  # 8: slack for re-tokenization at the seam
    ids = tokenizer.encode(article.text, add_special_tokens=False)
    return render(tokenizer.decode(ids[:budget]) if len(ids) > budget else article.text)
