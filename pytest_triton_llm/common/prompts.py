"""The suites' prompts (fixtures/prompts.toml): completion prompts by name, and the chat question with its answer."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from .schema import load_toml


@dataclass(frozen=True)
class Prompts:
    """fixtures/prompts.toml: completion prompts by name, and the chat question with its expected answer."""

    completion: dict[str, str]
    chat_question: str
    chat_expected: str
    copying: dict[str, str] = field(default_factory=dict)  # answers that copy the prompt: prompt lookup drafts them
    chat_short: str = ""  # a chat question whose greedy answer ends by itself within a few dozen tokens

    def batch(self, count: int | None = None) -> list[str]:
        """The first `count` completion prompts (all by default), in the file's order."""
        return list(self.completion.values())[:count]


def load_prompts(path: Path) -> Prompts:
    data = load_toml(path)
    chat = data["chat"]
    return Prompts(
        data["completion"], chat["question"], chat["expected_substring"], data.get("copying", {}), chat.get("short", "")
    )
