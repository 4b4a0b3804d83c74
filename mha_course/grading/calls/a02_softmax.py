"""Calls of assignment 02 (stable softmax), run in the submission sandbox; see the package docstring."""

from __future__ import annotations

from ..inside.convert import to_numpy, with_inputs_after


def softmax_np(target, inputs):
    """``softmax_np(x)`` (the default axis must be the last one) or ``softmax_np(x, axis=...)``."""
    x = inputs["x"].copy()
    if inputs["axis"] == -1:
        return to_numpy(target(x))  # the default axis must be the last one
    return to_numpy(target(x, axis=inputs["axis"]))


def softmax_np_unchanged(target, inputs):
    """``softmax_np(x)``, and x as it is after the call."""
    x = inputs["x"].copy()
    return with_inputs_after(to_numpy(target(x)), [x])


def _to_tensor(x):
    import torch

    return torch.from_numpy(x.copy())


def softmax(target, inputs):
    """torch ``softmax(x)`` or ``softmax(x, dim=...)``."""
    x = _to_tensor(inputs["x"])
    if inputs["axis"] == -1:
        return to_numpy(target(x))
    return to_numpy(target(x, dim=inputs["axis"]))


def softmax_unchanged(target, inputs):
    """torch ``softmax(x)``, and x as it is after the call."""
    x = _to_tensor(inputs["x"])
    return with_inputs_after(to_numpy(target(x)), [x])
