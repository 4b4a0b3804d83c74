"""Calls of assignment 04 (causal and padding masks), run in the submission sandbox; see the package docstring."""

from __future__ import annotations

from ..inside.convert import tensor_to_numpy, to_numpy_pair, with_inputs_after

SDPA = "scaled_dot_product_attention"  # the target's name, in the sentence for a wrong number of results


def causal_mask(target, inputs):
    """``causal_mask(T)`` or ``causal_mask(T, S)``: a torch bool tensor."""
    if inputs["S"] is None:
        return tensor_to_numpy(target(inputs["T"]), "the mask")
    return tensor_to_numpy(target(inputs["T"], inputs["S"]), "the mask")


def padding_mask(target, inputs):
    """``padding_mask(lengths, S)``, lengths a tensor or a Python list."""
    import torch

    lengths = inputs["lengths"].tolist() if inputs["as_list"] else torch.from_numpy(inputs["lengths"].copy())
    return tensor_to_numpy(target(lengths, inputs["S"]), "the mask")


def masked_sdpa(target, inputs):
    """``scaled_dot_product_attention(q, k, v, mask=...[, scale=...])`` -> (out, weights)."""
    import torch

    q, k, v = (torch.from_numpy(inputs[n].copy()) for n in "qkv")
    mask = None if inputs["mask"] is None else torch.from_numpy(inputs["mask"].copy())
    if inputs.get("scale") is not None:
        return to_numpy_pair(target(q, k, v, mask=mask, scale=inputs["scale"]), who=SDPA)
    return to_numpy_pair(target(q, k, v, mask=mask), who=SDPA)


def masked_sdpa_unchanged(target, inputs):
    """``scaled_dot_product_attention(q, k, v, mask=mask)``, and q, k, v, mask as they are after the call."""
    import torch

    tensors = [torch.from_numpy(inputs[n].copy()) for n in "qkv"] + [torch.from_numpy(inputs["mask"].copy())]
    result = to_numpy_pair(target(*tensors[:3], mask=tensors[3]), who=SDPA)
    return with_inputs_after(result, tensors)
