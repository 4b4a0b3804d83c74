"""Nadaraya-Watson kernel regression (1964): attention before it had the name.

To predict y at a new x, average the training targets y_i, each weighted by how close its x_i is:

    f(x) = sum_i K(x - x_i) y_i / sum_j K(x - x_j),     K(u) = exp(-u^2 / (2 h^2))   (Gaussian kernel)

The weights K(x - x_i) / sum_j K(x - x_j) are a softmax of the scores -(x - x_i)^2 / (2 h^2): the
query is x, the keys are the x_i, the values are the y_i. The bandwidth h plays the temperature:
small h puts all the weight on the nearest points (a jagged fit), large h spreads it (a flat one).
Expanding the square, -(x - x_i)^2 / (2 h^2) = (x / h)(x_i / h) - x_i^2 / (2 h^2) - x^2 / (2 h^2), and
the last term is the same for every key, so the softmax ignores it: this is dot-product attention
with q = x / h, k_i = x_i / h and a float mask -x_i^2 / (2 h^2) (see :func:`as_attention`).
"""

from __future__ import annotations

import torch

from ..validation import require_floating, require_positive_number, require_rank, require_tensor
from .softmax import softmax


def _check(x_query, x_train, bandwidth, y_train=None):
    for name, x in (("x_query", x_query), ("x_train", x_train)):
        require_tensor(x, name)
        require_floating(x, name)
        require_rank(x, 1, name, "(T,)" if name == "x_query" else "(S,)")
    if y_train is not None:
        require_tensor(y_train, "y_train")
        require_floating(y_train, "y_train")
        if y_train.shape[:1] != x_train.shape:
            raise ValueError(
                f"y_train must have one target per training point, shape (S={x_train.shape[0]}, ...), "
                f"got {tuple(y_train.shape)}"
            )
    require_positive_number(bandwidth, "bandwidth")


def nadaraya_watson(
    x_query: torch.Tensor, x_train: torch.Tensor, y_train: torch.Tensor, bandwidth: float
) -> tuple[torch.Tensor, torch.Tensor]:
    """Gaussian-kernel regression: weights = softmax(-(x - x_i)^2 / (2 h^2)), prediction = weights @ y.

    Args:
        x_query: (T,) points to predict at (the queries).
        x_train: (S,) training inputs (the keys).
        y_train: (S,) or (S, Dv) training targets (the values).
        bandwidth: h > 0, the kernel's width (the temperature: tau = 2 h^2).

    Returns:
        predictions (T,) or (T, Dv), and weights (T, S) whose rows sum to 1.

    Raises:
        TypeError: inputs are not floating tensors, or bandwidth is not a number.
        ValueError: wrong ranks, y_train's length differs from x_train's, or bandwidth <= 0.
    """
    _check(x_query, x_train, bandwidth, y_train)
    scores = -((x_query[:, None] - x_train[None, :]) ** 2) / (2 * bandwidth**2)  # (T, S)
    weights = softmax(scores, dim=-1)  # (T, S)
    return weights @ y_train.to(weights.dtype), weights


def as_attention(
    x_query: torch.Tensor, x_train: torch.Tensor, bandwidth: float
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """The same regression as dot-product attention: (q (T, 1), k (S, 1), float mask (1, S)).

    ``scaled_dot_product_attention(q, k, y_train[:, None], mask=bias, scale=1.0)`` then gives the
    Nadaraya-Watson prediction: q = x / h, k = x_i / h, bias_i = -x_i^2 / (2 h^2).

    Raises:
        TypeError / ValueError: as :func:`nadaraya_watson`.
    """
    _check(x_query, x_train, bandwidth)
    q = (x_query / bandwidth)[:, None]  # (T, 1)
    k = (x_train / bandwidth)[:, None]  # (S, 1)
    bias = (-(x_train**2) / (2 * bandwidth**2))[None, :]  # (1, S): added to every query's scores
    return q, k, bias


__all__ = ["nadaraya_watson", "as_attention"]
