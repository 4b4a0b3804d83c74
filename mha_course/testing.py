"""Comparison helpers that raise, and the one tolerance table keyed by dtype.

``assert_close`` never returns a bool: a comparison that only returns True/False can be ignored
and then a test can never fail.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch

# (atol, rtol) per dtype for comparing two implementations of the same attention computation.
TOLERANCES: dict[torch.dtype, tuple[float, float]] = {
    torch.float64: (1e-10, 1e-8),
    torch.float32: (1e-5, 1e-4),
    torch.float16: (2e-3, 2e-3),
    torch.bfloat16: (1.6e-2, 1.6e-2),
}


def tolerance(dtype: torch.dtype | np.dtype) -> tuple[float, float]:
    """(atol, rtol) for ``dtype``; NumPy dtypes map to their torch twins; bool and integers are exact.

    Raises:
        ValueError: a floating or complex dtype missing from :data:`TOLERANCES`.
    """
    if not isinstance(dtype, torch.dtype):
        dtype = getattr(torch, np.dtype(dtype).name)
    if dtype == torch.bool or not (dtype.is_floating_point or dtype.is_complex):
        return (0.0, 0.0)
    if dtype not in TOLERANCES:
        raise ValueError(f"no tolerance for dtype {dtype}; known: {list(TOLERANCES)}")
    return TOLERANCES[dtype]


def assert_close(actual, expected, *, dtype=None, what: str = "values") -> None:
    """Raise AssertionError unless ``actual`` matches ``expected`` in shape, and in value within the
    tolerance of ``dtype`` (default: the dtype of ``actual``). NaNs must sit in the same places.

    Accepts torch tensors or NumPy arrays; the message names the worst element.
    """
    a = torch.as_tensor(np.asarray(actual) if not isinstance(actual, torch.Tensor) else actual)
    e = torch.as_tensor(np.asarray(expected) if not isinstance(expected, torch.Tensor) else expected)
    if tuple(a.shape) != tuple(e.shape):
        raise AssertionError(f"{what}: shape {tuple(a.shape)} != expected {tuple(e.shape)}")
    atol, rtol = tolerance(dtype if dtype is not None else a.dtype)
    a64, e64 = a.detach().cpu().to(torch.float64), e.detach().cpu().to(torch.float64)
    if not torch.equal(torch.isnan(a64), torch.isnan(e64)):
        raise AssertionError(
            f"{what}: NaN in {int(torch.isnan(a64).sum())} places, expected {int(torch.isnan(e64).sum())}"
        )
    finite = ~torch.isnan(e64)
    excess = (a64 - e64).abs() - (atol + rtol * e64.abs())
    excess = torch.where(finite & (a64 != e64), excess, torch.full_like(excess, -1.0))  # equal infs match
    excess = torch.where(torch.isnan(excess), torch.full_like(excess, float("inf")), excess)  # inf vs -inf
    if a64.numel() and float(excess.max()) > 0:
        worst = np.unravel_index(int(excess.argmax()), tuple(a64.shape))
        raise AssertionError(
            f"{what}: mismatch at {tuple(int(i) for i in worst)}: got {float(a64[worst]):.6g}, "
            f"expected {float(e64[worst]):.6g} (atol={atol}, rtol={rtol}); "
            f"max abs diff {float((a64 - e64)[finite].abs().max()):.3g}"
        )


def prediction(value: Any, course_answer: Any, name: str = "your prediction") -> Any:
    """A learner's prediction in a "Check yourself" cell, or the course's answer while it is still ``...``.

    The notebooks ship with ``...`` in place of each prediction, so that a learner predicts before
    seeing an answer, while the notebook still runs top to bottom (the course's answers sit in a
    collapsed cell above the check). Returns ``value`` unless it is ``...``.
    """
    if value is ...:
        print(f"{name}: no prediction yet (still ...): checking the course's answer instead; write yours and rerun")
        return course_answer
    return value
