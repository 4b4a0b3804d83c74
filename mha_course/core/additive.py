"""Additive (Bahdanau) scoring against dot-product scoring: why dot products won.

The first neural attention (Bahdanau, Cho and Bengio, 2015) scored a query against a key with a
small network:

    additive:     score(q, k) = w^T tanh(q W_q + k W_k + b)         W_q (D, A), W_k (D, A), b (A,), w (A,)
    dot product:  score(q, k) = (q W_q) . (k W_k) / sqrt(A)         W_q (D, A), W_k (D, A)

Both learn what "matches" means. The dot product scores all T x S pairs with ONE matrix product
(T, A) @ (A, S), which hardware runs at full speed; the additive score must build a (T, S, A)
tensor of sums, pass every entry through tanh and contract it with w: A times the memory of the
scores and no matrix product to lean on. :func:`lookup_batch` is a toy task both can learn, and
:func:`fit` trains either on it, so that cost and accuracy can be compared on equal terms.
"""

from __future__ import annotations

import functools
import math

import torch
from torch import nn

from ..validation import check_mask, require_positive_int, require_positive_ints, require_rank, require_tensor
from .masks import mask_to_bias
from .softmax import softmax


def additive_scores(
    q: torch.Tensor,
    k: torch.Tensor,
    w_q: torch.Tensor,
    w_k: torch.Tensor,
    w: torch.Tensor,
    b: torch.Tensor | None = None,
) -> torch.Tensor:
    """Bahdanau's scores w^T tanh(q W_q + k W_k + b) for every query-key pair, shape (..., T, S).

    Args:
        q: (..., T, D); k: (..., S, D); w_q, w_k: (D, A); w: (A,); b: (A,) or None (no bias).

    Builds the (..., T, S, A) tensor of sums: memory grows as T * S * A.

    Raises:
        TypeError: an input is not a tensor.
        ValueError: shapes that do not fit together.
    """
    for name, x in (("q", q), ("k", k), ("w_q", w_q), ("w_k", w_k), ("w", w)):
        require_tensor(x, name)
    require_rank(w_q, 2, "w_q", "(D, A)")
    require_rank(w_k, 2, "w_k", "(D, A)")
    require_rank(w, 1, "w", "(A,)")
    if q.shape[-1] != w_q.shape[0] or k.shape[-1] != w_k.shape[0] or not w_q.shape[1] == w_k.shape[1] == w.shape[0]:
        raise ValueError(
            f"need q (..., T, D), k (..., S, D), w_q and w_k (D, A), w (A,); got q {tuple(q.shape)}, "
            f"k {tuple(k.shape)}, w_q {tuple(w_q.shape)}, w_k {tuple(w_k.shape)}, w {tuple(w.shape)}"
        )
    if b is not None:
        require_tensor(b, "b")
        if tuple(b.shape) != (w.shape[0],):
            raise ValueError(f"b must have shape (A,) = ({w.shape[0]},), got {tuple(b.shape)}")
        q_part = q @ w_q + b  # (..., T, A): the bias rides along with the query
    else:
        q_part = q @ w_q
    hidden = torch.tanh(q_part.unsqueeze(-2) + (k @ w_k).unsqueeze(-3))  # (..., T, 1, A) + (..., 1, S, A)
    return hidden @ w  # (..., T, S, A) @ (A,) -> (..., T, S)


class Scorer(nn.Module):
    """Learned attention with either scoring rule; forward(q, k, v, mask=None) -> (out, weights).

    Args:
        dim: D, the size of queries and keys. hidden: A. kind: "additive" or "dot".

    Parameters: ``w_q``, ``w_k`` (D, A) for both; ``w`` and ``b`` (A,) for the additive one.
    q (..., T, D), k (..., S, D), v (..., S, Dv) -> out (..., T, Dv), weights (..., T, S).

    Raises:
        ValueError: unknown kind or non-positive sizes.
    """

    def __init__(self, dim: int, hidden: int, kind: str = "dot"):
        super().__init__()
        require_positive_int(dim, "dim")
        require_positive_int(hidden, "hidden")
        if kind not in ("additive", "dot"):
            raise ValueError(f"kind must be 'additive' or 'dot', got {kind!r}")
        self.kind = kind
        self.w_q = nn.Parameter(torch.randn(dim, hidden) / math.sqrt(dim))
        self.w_k = nn.Parameter(torch.randn(dim, hidden) / math.sqrt(dim))
        self.w = nn.Parameter(torch.randn(hidden) / math.sqrt(hidden)) if kind == "additive" else None
        self.b = nn.Parameter(torch.randn(hidden)) if kind == "additive" else None

    def scores(self, q: torch.Tensor, k: torch.Tensor) -> torch.Tensor:
        """(..., T, S) scores of q (..., T, D) against k (..., S, D)."""
        if self.kind == "additive":
            return additive_scores(q, k, self.w_q, self.w_k, self.w, self.b)
        return (q @ self.w_q) @ (k @ self.w_k).transpose(-2, -1) / math.sqrt(self.w_q.shape[1])  # (..., T, S)

    def forward(self, q, k, v, mask=None):
        scores = self.scores(q, k)  # (..., T, S)
        if mask is not None:
            check_mask(mask, scores.shape[-2], scores.shape[-1])
            scores = scores + mask_to_bias(mask, scores.dtype)
        weights = softmax(scores, dim=-1)  # (..., T, S)
        return weights @ v, weights  # (..., T, Dv), (..., T, S)


def lookup_batch(
    n: int,
    num_keys: int = 16,
    dim: int = 16,
    noise: float = 0.3,
    generator: torch.Generator | None = None,
    relation_seed: int = 0,
):
    """A toy lookup both scorers can learn: find, among S random keys, the one the query describes.

    The query is R k_t + noise for a hidden target t and a fixed random rotation R (the same in every
    batch: the "relation" between what a query asks and what a key offers, which the scorer must learn).

    Returns:
        q (n, 1, D), k (n, S, D), target (n,) long: the index of the right key.

    Raises:
        ValueError: non-positive sizes.
    """
    require_positive_ints(n=n, num_keys=num_keys, dim=dim)
    relation = _relation(dim, relation_seed)  # (D, D)
    keys = torch.randn(n, num_keys, dim, generator=generator)  # (n, S, D)
    target = torch.randint(num_keys, (n,), generator=generator)  # (n,)
    chosen = keys[torch.arange(n), target]  # (n, D)
    q = chosen @ relation.T + noise * torch.randn(n, dim, generator=generator)  # (n, D)
    return q[:, None, :], keys, target  # (n, 1, D), (n, S, D), (n,)


@functools.lru_cache(maxsize=8)
def _relation(dim: int, seed: int) -> torch.Tensor:
    """A fixed random rotation (D, D): the orthogonal factor of a seeded Gaussian matrix."""
    return torch.linalg.qr(torch.randn(dim, dim, generator=torch.Generator().manual_seed(seed)))[0]


def fit(scorer: Scorer, steps: int = 300, batch_size: int = 64, lr: float = 1e-2, seed: int = 0, **task) -> list[float]:
    """Train ``scorer`` to put its weight on the right key of :func:`lookup_batch` (cross-entropy
    of the scores); returns the held-out accuracy (argmax weight on the target) after each 25 steps.

    Raises:
        ValueError: non-positive steps or batch_size.
    """
    require_positive_int(steps, "steps")
    require_positive_int(batch_size, "batch_size")
    generator = torch.Generator().manual_seed(seed)
    held_q, held_k, held_t = lookup_batch(1000, generator=torch.Generator().manual_seed(seed + 1), **task)
    optimizer = torch.optim.Adam(scorer.parameters(), lr=lr)
    curve = []
    for step in range(1, steps + 1):
        q, k, target = lookup_batch(batch_size, generator=generator, **task)
        loss = nn.functional.cross_entropy(scorer.scores(q, k)[:, 0], target)  # scores (n, 1, S) -> (n, S)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        if step % 25 == 0 or step == steps:
            with torch.no_grad():
                curve.append(float((scorer.scores(held_q, held_k)[:, 0].argmax(-1) == held_t).float().mean()))
    return curve


__all__ = ["additive_scores", "Scorer", "lookup_batch", "fit"]
