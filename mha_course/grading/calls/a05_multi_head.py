"""Calls of assignment 05 (split/merge heads, MultiHeadAttention), run in the submission sandbox.

See the package docstring.
"""

from __future__ import annotations

import numpy as np

from ..inside.convert import build_module, linear_layer, to_numpy, to_numpy_pair

# The module's four projections, in the order the grader's inputs and the layout case use them.
PROJ = ("q_proj", "k_proj", "v_proj", "out_proj")
FORWARD = "MultiHeadAttention.forward"  # in the sentence for a wrong number of results


def split_heads(target, inputs):
    """``split_heads(x, num_heads)``."""
    import torch

    return to_numpy(target(torch.from_numpy(inputs["x"].copy()), inputs["num_heads"]))


def merge_heads(target, inputs):
    """``merge_heads(x)``."""
    import torch

    return to_numpy(target(torch.from_numpy(inputs["x"].copy())))


def mha_forward(target, inputs):
    """``MultiHeadAttention(E, H)`` with the grader's weights, then forward (self- or cross-attention) -> (out, weights)."""
    import torch

    module = build_module(target, inputs, PROJ, sample="query")
    query = torch.from_numpy(inputs["query"].copy())
    mask = None if inputs["mask"] is None else torch.from_numpy(inputs["mask"].copy())
    with torch.no_grad():
        if inputs["self_attention"]:
            result = module(query, mask=mask) if mask is not None else module(query)
        else:
            key, value = torch.from_numpy(inputs["key"].copy()), torch.from_numpy(inputs["value"].copy())
            result = module(query, key, value, mask=mask) if mask is not None else module(query, key, value)
    return to_numpy_pair(result, who=FORWARD)


def mha_forward_key_only(target, inputs):
    """``module(query, key)`` with ``value`` left out: it must default to ``key`` -> (out, weights)."""
    import torch

    module = build_module(target, inputs, PROJ, sample="query")
    with torch.no_grad():
        result = module(torch.from_numpy(inputs["query"].copy()), torch.from_numpy(inputs["key"].copy()))
    return to_numpy_pair(result, who=FORWARD)


def mha_layout(target, inputs):
    """(the four projections' [out, in, bias size] rows, the module's parameter count) of ``MultiHeadAttention(E, H)``."""
    module = target(inputs["E"], inputs["H"])
    rows = []
    for name in PROJ:
        layer = linear_layer(module, name, "the module needs an nn.Linear named {name}")
        bias = getattr(layer, "bias", None)
        rows.append([*layer.weight.shape, 0 if bias is None else bias.numel()])
    n_params = sum(p.numel() for p in module.parameters())
    return np.asarray(rows, dtype=np.int64), np.asarray(n_params, dtype=np.int64)
