"""Calls of assignment 03 (scaled dot-product attention), run in the submission sandbox; see the package docstring."""

from __future__ import annotations

from ..inside.convert import to_numpy_pair, with_inputs_after

SDPA = "scaled_dot_product_attention"  # the target's name, in the sentence for a wrong number of results


def attention_np(target, inputs):
    """``attention_np(q, k, v)`` -> (out, weights)."""
    return to_numpy_pair(target(inputs["q"].copy(), inputs["k"].copy(), inputs["v"].copy()), who="attention_np")


def attention_np_unchanged(target, inputs):
    """``attention_np(q, k, v)``, and q, k, v as they are after the call."""
    q, k, v = (inputs[n].copy() for n in "qkv")
    return with_inputs_after(to_numpy_pair(target(q, k, v), who="attention_np"), [q, k, v])


def _tensors(inputs):
    import torch

    return [torch.from_numpy(inputs[n].copy()) for n in "qkv"]


def sdpa(target, inputs):
    """torch ``scaled_dot_product_attention(q, k, v[, scale=...])`` -> (out, weights)."""
    q, k, v = _tensors(inputs)
    if inputs["scale"] is None:
        return to_numpy_pair(target(q, k, v), who=SDPA)
    return to_numpy_pair(target(q, k, v, scale=inputs["scale"]), who=SDPA)


def sdpa_unchanged(target, inputs):
    """torch ``scaled_dot_product_attention(q, k, v)``, and q, k, v as they are after the call."""
    tensors = _tensors(inputs)
    return with_inputs_after(to_numpy_pair(target(*tensors), who=SDPA), tensors)
