"""Calls of assignment 08 (cross-attention, switching a head off), run in the submission sandbox; see the package docstring.

The learner is given the library's ``MultiHeadAttention`` (``mha_course.core.mha``, a building block this
assignment provides, so it is in the sandbox too), holding the grader's weights.
"""

from __future__ import annotations

import contextlib
import sys

import numpy as np

from ..inside.convert import build_module, tensor_to_numpy, to_numpy, to_numpy_pair, with_inputs_after

# The module's four projections, in the order the grader's inputs use them.
PROJ = ("q_proj", "k_proj", "v_proj", "out_proj")

# What without_head_unchanged watches besides query, key, value, in this order: every projection's
# weight and bias, then head_gate (the grader rebuilds the same list from the inputs).
WATCHED = tuple(f"{p}.{w}" for p in PROJ for w in ("weight", "bias"))


def cross_attention_mask(target, inputs):
    """``cross_attention_mask(lengths, T, S)``, lengths a tensor or a Python list: a torch bool tensor."""
    import torch

    lengths = inputs["lengths"].tolist() if inputs["as_list"] else torch.from_numpy(inputs["lengths"].copy())
    return tensor_to_numpy(target(lengths, int(inputs["T"]), int(inputs["S"])), "the mask")


def library_module(inputs):
    """mha_course's MultiHeadAttention holding the case's weights, in eval mode (either process)."""
    from mha_course.core.mha import MultiHeadAttention

    return build_module(MultiHeadAttention, inputs, PROJ, sample="query")


def _given_module(inputs):
    """Submission side: the provided MultiHeadAttention with the case's weights, and query, key, value.

    mha_course.core.mha is provided by this assignment, so it is importable in the submission process too.
    """
    import torch

    tensors = [torch.from_numpy(inputs[n].copy()) for n in ("query", "key", "value")]
    return library_module(inputs), tensors


def cross_attention(target, inputs):
    """``cross_attention(decoder_states, memory, lengths, mha)`` -> (out, weights)."""
    import torch

    module, (decoder_states, memory, _) = _given_module(inputs)
    lengths = torch.from_numpy(inputs["lengths"].copy())
    with torch.no_grad():
        return to_numpy_pair(target(decoder_states, memory, lengths, module), who="cross_attention")


REFUSED = (
    "without_head must compute the output from mha's q_proj, k_proj, v_proj and out_proj itself: "
    "calling a MultiHeadAttention (mha(...), its forward, or head_gate with it) is not allowed in this "
    "exercise (0 points for this case)"
)


@contextlib.contextmanager
def _forward_refused():
    """While a without_head case runs, calling any mha_course MultiHeadAttention raises (see the exercise)."""
    library = sys.modules.get("mha_course.core.mha")
    cls = getattr(library, "MultiHeadAttention", None)
    original = None if cls is None else cls.__dict__.get("forward")
    if cls is None or original is None:
        yield
        return

    def refused(self, *args, **kwargs):
        raise RuntimeError(REFUSED)

    cls.forward = refused
    try:
        yield
    finally:
        cls.forward = original


def without_head(target, inputs):
    """``without_head(mha, query, key, value, head)`` with MultiHeadAttention.forward refused."""
    import torch

    module, (query, key, value) = _given_module(inputs)
    with torch.no_grad(), _forward_refused():
        return to_numpy(target(module, query, key, value, int(inputs["head"])), "the output")


def without_every_head(target, inputs):
    """``without_head`` for h = 0 .. H-1, stacked: (H, B, T, E)."""
    import torch

    module, (query, key, value) = _given_module(inputs)
    with torch.no_grad(), _forward_refused():
        outs = [to_numpy(target(module, query, key, value, h), "the output") for h in range(inputs["H"])]
    shapes = {o.shape for o in outs}
    if len(shapes) != 1:
        raise ValueError(f"the outputs for different heads have different shapes: {sorted(shapes)}")
    return np.stack(outs)  # (H, B, T, E)


def without_head_unchanged(target, inputs):
    """``without_head(...)``, and the module's weights (:data:`WATCHED`), head_gate, query, key, value after the call."""
    import torch

    module, tensors = _given_module(inputs)
    watched = [getattr(getattr(module, p), w) for p, _, w in (n.partition(".") for n in WATCHED)]
    watched += [module.head_gate, *tensors]
    with torch.no_grad(), _forward_refused():
        result = to_numpy(target(module, *tensors, int(inputs["head"])), "the output")
    return with_inputs_after(result, watched)
