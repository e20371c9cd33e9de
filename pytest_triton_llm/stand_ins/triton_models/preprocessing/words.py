"""Stop/bad word lists in TensorRT-LLM's format: per batch row a [2, N] int32 array,
row 0 the token ids of all words concatenated, row 1 the cumulative end offset of each
word, both padded (ids with 0, offsets with -1). Words that tokenize to nothing are dropped.
"""

from __future__ import annotations

from typing import Callable, Iterable

import numpy as np
from tensor_contract import pack_word_ids


def to_word_list_format(word_lists, batch: int, encode: Callable[[object], list[int]]) -> np.ndarray:
    """`word_lists[row]` holds the words of batch row `row`; returns [batch, 2, N] int32."""
    if word_lists is None:
        return np.empty((batch, 2, 0), dtype=np.int32)
    return pack_word_ids([[encode(word) for word in _words(words)] for words in word_lists])


def _words(words) -> Iterable:
    """Empty strings (how a client sends 'no words' over HTTP generate) are skipped."""
    for word in np.asarray(words, dtype=object).reshape(-1):
        if word not in (b"", ""):
            yield word
