"""Hand-made toy word vectors, small enough to read and to draw (no downloads).

Each word gets 4 features with a meaning you can read off the table:

    finance  nature  action  time

Real embeddings have hundreds of unnamed features; these four are named so that a dot product
can be checked by eye. "bank" is deliberately ambiguous: it scores on both finance (a bank that
lends money) and nature (a river bank), which chapter 01 uses to show what one query "asks".
The first two features alone give the 2-D vectors drawn as arrows.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from ..validation import require_int

FEATURES: tuple[str, ...] = ("finance", "nature", "action", "time")

#                  finance nature action time
_TABLE: dict[str, tuple[float, float, float, float]] = {
    "bank": (0.75, 0.55, 0.05, 0.00),
    "money": (0.95, 0.05, 0.00, 0.00),
    "loan": (0.90, 0.10, 0.10, 0.05),
    "cash": (0.85, 0.00, 0.00, 0.00),
    "river": (0.05, 0.95, 0.10, 0.00),
    "water": (0.00, 0.90, 0.05, 0.00),
    "shore": (0.15, 0.80, 0.00, 0.00),
    "approved": (0.30, 0.00, 0.90, 0.20),
    "paid": (0.50, 0.00, 0.80, 0.10),
    "flows": (0.05, 0.50, 0.80, 0.00),
    "yesterday": (0.00, 0.00, 0.20, 0.95),
    "today": (0.00, 0.00, 0.10, 0.90),
    "the": (0.05, 0.05, 0.05, 0.05),  # a function word: short, points nowhere in particular
}

# The example sentence used across the course (punctuation left out: it has no toy vector).
TOY_SENTENCE: tuple[str, ...] = ("The", "bank", "approved", "the", "loan", "yesterday")


def vocabulary() -> list[str]:
    """The words that have a toy vector, in table order."""
    return list(_TABLE)


def word_vectors(words: Sequence[str] | None = None, dims: int = 4) -> tuple[list[str], np.ndarray]:
    """Look up toy vectors.

    Args:
        words: the words to look up (case-insensitive: "The" finds "the"); None = whole vocabulary.
        dims: how many features to keep, 1..4, in the order of :data:`FEATURES`
            (dims=2 keeps finance and nature, for 2-D pictures).

    Returns:
        (words, vectors): the words as given (lower-cased) and a float32 array of shape (N, dims),
        a fresh copy (changing it does not change the table).

    Raises:
        TypeError: ``words`` is a single string instead of a list, or ``dims`` is not an int.
        ValueError: ``dims`` is outside 1..4.
        KeyError: a word has no toy vector (the message lists the vocabulary).
    """
    if isinstance(words, str):
        raise TypeError(f"words must be a list of words, got the string {words!r}; try [{words!r}]")
    require_int(dims, "dims")
    if not 1 <= dims <= len(FEATURES):
        raise ValueError(f"dims must be in 1..{len(FEATURES)}, got {dims}")
    words = vocabulary() if words is None else [str(w).lower() for w in words]
    unknown = [w for w in words if w not in _TABLE]
    if unknown:
        raise KeyError(f"no toy vector for {unknown}; known words: {vocabulary()}")
    vectors = np.array([_TABLE[w][:dims] for w in words], dtype=np.float32).reshape(len(words), dims)  # (N, dims)
    return words, vectors
