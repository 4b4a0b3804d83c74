"""Calls of assignment 01 (dot products and scores), run in the submission sandbox; see the package docstring."""

from __future__ import annotations

from ..inside.convert import to_numpy


def dot_product_np(target, inputs):
    """``dot_product_np(a, b)``; a 0-d result travels as a Python scalar."""
    result = to_numpy(target(inputs["a"].copy(), inputs["b"].copy()))
    return result.item() if result.ndim == 0 else result  # a number travels as a Python scalar


def scores_np(target, inputs):
    """``dot_scores_np(q, k)`` or ``scaled_dot_scores_np(q, k)``."""
    return to_numpy(target(inputs["q"].copy(), inputs["k"].copy()))
