"""Gathered logits against the greedy answer they came with (return_context_logits, return_generation_logits).

TensorRT-LLM's generation logits are the model's raw logits of each step, so a greedy answer's token t is the likeliest
of row t; the context phase gives the first token, so the first row of generation_logits is the last row of
context_logits (tensorrtllm_backend's README shows them equal, from v0.8.0 to v0.19.0), and context_logits has a row
per prompt token."""

from __future__ import annotations

import numpy as np

TIE = 1e-4  # of the row's largest magnitude: a chosen token's logit this close to the row's maximum is a tie, not a miss
SAME_ROW = 1e-3  # of the row's largest magnitude: the context phase's last row and the first step's row are one row


def problems(tokens: list[int], prompt_tokens: int, context, generation, cut: bool) -> list[str]:
    """What is wrong with `context` [prompt, vocab] and `generation` [steps, vocab] for the greedy `tokens` of a prompt of
    `prompt_tokens` tokens ([] if nothing). An answer max_tokens `cut` has a row per token (the README's 20 for 20); one
    its end token ended may carry a row for that last step."""
    if context is None or generation is None:
        return [f"asked for both, got context_logits {_shape(context)} and generation_logits {_shape(generation)}"]
    context, generation = np.asarray(context, dtype=np.float64), np.asarray(generation, dtype=np.float64)
    found = []
    if context.ndim != 2 or context.shape[0] != prompt_tokens:
        found.append(f"context_logits {context.shape}: not a row per prompt token ({prompt_tokens})")
    if generation.ndim != 2 or generation.shape[0] < len(tokens) or (cut and generation.shape[0] != len(tokens)):
        rows = "fewer rows than" if generation.ndim != 2 or generation.shape[0] < len(tokens) else "not a row per token of"
        return [*found, f"generation_logits {generation.shape}: {rows} the {len(tokens)} generated tokens"]
    for step, token in enumerate(tokens):
        row = generation[step]
        if row[token] < row.max() - TIE * np.abs(row).max():
            found.append(
                f"step {step}: the greedy token {token} is not the likeliest of its row (logit {row[token]:.4f}, the "
                f"row's maximum {row.max():.4f} at {int(row.argmax())}): rows and tokens do not line up"
            )
            break
    if found or context.shape[1:] != generation.shape[1:]:
        return found or [f"context_logits {context.shape} and generation_logits {generation.shape}: vocabularies differ"]
    gap = np.abs(context[-1] - generation[0]).max()
    if gap > SAME_ROW * np.abs(context[-1]).max():
        found.append(f"the last row of context_logits and the first of generation_logits differ by up to {gap:.4f}")
    return found


def _shape(array) -> str:
    return "none" if array is None else str(np.asarray(array).shape)
