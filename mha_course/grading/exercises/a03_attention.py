"""Assignment 03 (chapter 03): scaled dot-product attention, first in NumPy, then in torch.

    Attention(Q, K, V) = softmax(Q K^T / sqrt(D)) V      returns (out, weights)

q (..., T, D), k (..., S, D), v (..., S, Dv) -> out (..., T, Dv), weights (..., T, S). The cases
use T, S, D and Dv all different so that a transposed or swapped result shows up as a wrong
shape, and compare against wrong-but-plausible variants (1/D, sqrt(S), softmax over queries,
keys used as values, ...) to say which mistake was made.
"""

from __future__ import annotations

import math

import numpy as np

from .. import hints
from ..calls import a03_attention as calls
from ..spec import Assignment, Case, Exercise

_OUT, _W = "[..., T, Dv]", "[..., T, S]"

# --- inputs ---------------------------------------------------------------------------------------


def _qkv(lead, T, S, D, Dv, seed, dtype=np.float64, scale=None, magnitude=1.0):
    def make():
        rng = hints.rng(seed)
        q = (rng.standard_normal((*lead, T, D)) * magnitude).astype(dtype)
        k = (rng.standard_normal((*lead, S, D)) * magnitude).astype(dtype)
        v = rng.standard_normal((*lead, S, Dv)).astype(dtype)
        return {"q": q, "k": k, "v": v, "scale": scale}

    return make


# --- reference and diagnose (grader) ---------------------------------------------------------------


def _ref_np(inputs):
    from mha_course.attention import scaled_dot_product_attention_np

    return scaled_dot_product_attention_np(inputs["q"], inputs["k"], inputs["v"], scale=inputs["scale"])


def _ref_torch(inputs):
    import torch

    from mha_course.attention import scaled_dot_product_attention

    q, k, v = (torch.from_numpy(inputs[n]) for n in "qkv")
    out, weights = scaled_dot_product_attention(q, k, v, scale=inputs["scale"])
    return out.numpy(), weights.numpy()


def np_attention(q, k, v, scale, mask=None, softmax_axis=-1, mask_mode="add", value=None):
    """Grader-side float64 attention with knobs for the classic mistakes; returns (out, weights).

    mask_mode: "add" (bool -> -inf, float added; the right way), "ignore", "invert",
    "after" (softmax first, then zero the blocked weights, no renormalisation),
    "multiply" (float mask multiplied into the scores).
    """
    from mha_course.softmax import softmax_np

    q, k, v = (np.asarray(a, dtype=np.float64) for a in (q, k, v))
    scores = (q @ np.swapaxes(k, -1, -2)) * scale  # (..., T, S)
    if mask is not None and mask_mode != "ignore":
        mask = np.asarray(mask)
        if mask_mode == "invert":
            mask = ~mask
            mask_mode = "add"
        if mask_mode == "add":
            scores = np.where(mask, scores, -np.inf) if mask.dtype == np.bool_ else scores + mask
        elif mask_mode == "multiply":
            scores = scores * mask
    weights = softmax_np(scores, axis=softmax_axis)
    if mask is not None and mask_mode == "after":
        weights = np.where(mask, weights, 0.0) if mask.dtype == np.bool_ else weights + mask
    source = v if value is None else np.asarray(value, dtype=np.float64)
    return weights @ source, weights


def attention_alternatives(inputs, mask=None):
    """(weights alternatives, out alternatives) for diagnose: plausible mistakes and their hints."""
    q, k, v = inputs["q"], inputs["k"], inputs["v"]
    T, D, S, Dv = q.shape[-2], q.shape[-1], k.shape[-2], v.shape[-1]
    given = inputs.get("scale")
    right = 1.0 / math.sqrt(D) if given is None else given

    def w(**kw):
        return lambda: np_attention(q, k, v, kw.pop("scale", right), mask, **kw)[1]

    def o(**kw):
        return lambda: np_attention(q, k, v, kw.pop("scale", right), mask, **kw)[0]

    weights_alts = []
    if given is None:
        weights_alts += [
            (w(scale=1.0), "the scores are not scaled: multiply q k^T by 1/sqrt(D)"),
            (w(scale=1.0 / D), "wrong scale: you used 1/D, the default is 1/sqrt(D)"),
            (w(scale=math.sqrt(D)), "wrong scale: you multiplied by sqrt(D); divide by it"),
            (w(scale=1.0 / math.sqrt(T)), "wrong scale: 1/sqrt(T) uses the number of queries; D is q's last axis"),
            (w(scale=1.0 / math.sqrt(S)), "wrong scale: 1/sqrt(S) uses the number of keys; D is q's last axis"),
            (w(scale=1.0 / math.sqrt(Dv)), "wrong scale: 1/sqrt(Dv) uses the value dim; D is q's last axis"),
        ]
    else:
        weights_alts += [
            (w(scale=1.0 / math.sqrt(D)), f"the scale argument ({given}) is ignored: use it instead of 1/sqrt(D)"
             + (" (`scale or default` treats 0 as missing: test `scale is None`)" if given == 0 else "")),
            (w(scale=given / math.sqrt(D)), "you applied both scale and 1/sqrt(D); scale replaces the default"),
        ]
        if given:
            weights_alts.append((w(scale=1.0 / given), f"you divided by scale={given}; the scores are MULTIPLIED by "
                                                       "scale"))
    if T > 1:
        weights_alts.append((w(softmax_axis=-2), "softmax over the queries (axis -2): each query's row over the "
                             "keys must sum to 1, so use the last axis"))
    if T == S:
        weights_alts.append((lambda: np.swapaxes(np_attention(q, k, v, right, mask)[1], -1, -2),
                             "the weights are transposed: weights[i, j] is how much query i attends to key j"))
    weights_alts += [(w(mask_mode="ignore"), "the mask is ignored"),
                     (w(mask_mode="invert"), "the mask is inverted: True means MAY attend"),
                     (w(mask_mode="after"), "the mask is applied after softmax: block the scores (with -inf) "
                      "before softmax so each row still sums to 1"),
                     (w(mask_mode="multiply"), "the float mask is multiplied; a float mask is ADDED to the scores")] \
        if mask is not None else []
    out_alts = []
    if D == Dv:
        out_alts.append((o(value=k), "you used the keys as values: out = weights @ v"))
    return weights_alts, out_alts


def _diagnose(got, expected, inputs):
    return hints.compare_pair(got, expected, legends=(_OUT, _W), alternatives=attention_alternatives(inputs)[::-1])


def _diagnose_dtype(got, expected, inputs):
    return hints.compare_pair(got, expected, legends=(_OUT, _W), alternatives=attention_alternatives(inputs)[::-1],
                              check_dtype=True)


_CHANGED = ("your function changed q, k or v in place (e.g. q *= scale or q /= ...): compute the scaled scores "
            "into a new array instead")


_heat = hints.pair_heatmaps(1)


def _cases(call, call_unchanged, reference, torch_version):
    c = [
        Case("shapes: out (T=3, Dv=6), weights (T=3, S=5)", 2, _qkv((), 3, 5, 4, 6, 0), call, reference, _diagnose,
             visualize=_heat),
        Case("weights = softmax(q k^T / sqrt(D)) (D = 16)", 2, _qkv((), 4, 6, 16, 3, 1), call, reference, _diagnose,
             visualize=_heat),
        Case("out = weights @ v (Dv = D, k != v)", 2, _qkv((), 4, 5, 8, 8, 2), call, reference, _diagnose),
        Case("leading batch dim (B, T, D)", 1, _qkv((2,), 3, 5, 4, 6, 3), call, reference, _diagnose),
        Case("does not change q, k, v", 1, _qkv((2,), 3, 5, 4, 6, 4), call_unchanged,
             *hints.unchanged_case(reference, _diagnose, _CHANGED, ("q", "k", "v"))),
    ]
    if torch_version:
        c += [
            Case("scale argument is used (scale = 0.3)", 1, _qkv((2,), 3, 5, 4, 6, 5, scale=0.3), call, reference,
                 _diagnose, visualize=_heat),
            Case("(B, H, T, D) inputs", 1, _qkv((2, 3), 4, 5, 8, 6, 6), call, reference, _diagnose),
            Case("float32 in, float32 out", 1, _qkv((2,), 3, 5, 4, 6, 7, np.float32), call,
                 reference, _diagnose_dtype),
        ]
    else:
        c.append(Case("float32 in, float32 out", 1, _qkv((), 3, 5, 16, 6, 7, np.float32), call, reference,
                      _diagnose_dtype))
    c += [
        Case("square case T = S (weights not transposed)", 1, _qkv((), 5, 5, 4, 6, 8), call, reference, _diagnose,
             hidden=True),
        Case("large scores (|q.k| ~ 1000): no NaN", 1, _qkv((), 3, 5, 4, 6, 9, magnitude=20.0), call, reference,
             _diagnose, hidden=True),
        Case("a single query (T = 1) and D = 9", 1, _qkv((), 1, 7, 9, 2, 10), call, reference, _diagnose,
             hidden=True),
        Case("(B, H, T, D) with other sizes", 1, _qkv((3, 2), 6, 2, 5, 7, 11), call, reference, _diagnose,
             hidden=True),
    ]
    if torch_version:
        c.append(Case("float64 in, float64 out", 1, _qkv((2,), 3, 5, 4, 6, 12), call, reference, _diagnose_dtype,
                      hidden=True))
        c.append(Case("scale = 0: every key gets the same weight", 1, _qkv((2,), 3, 5, 4, 6, 13, scale=0.0), call,
                      reference, _diagnose, hidden=True))
    return tuple(c)


ATTENTION_NP = Exercise(
    key="attention_np",
    target="attention_np",
    title="Scaled dot-product attention in NumPy",
    cases=_cases(calls.attention_np, calls.attention_np_unchanged, _ref_np, torch_version=False),
    forbidden=("mha_course.scaled_dot_product_attention_np", "mha_course.attention.scaled_dot_product_attention_np",
               "mha_course.scaled_dot_product_attention", "mha_course.attention.scaled_dot_product_attention"),
)

SDPA = Exercise(
    key="sdpa",
    target="scaled_dot_product_attention",
    title="Scaled dot-product attention in torch",
    cases=_cases(calls.sdpa, calls.sdpa_unchanged, _ref_torch, torch_version=True),
    forbidden=("torch.nn.functional.scaled_dot_product_attention", "torch.nn.functional.multi_head_attention_forward",
               "mha_course.scaled_dot_product_attention", "mha_course.attention.scaled_dot_product_attention"),
)

ASSIGNMENT = Assignment(
    key="a03_attention",
    version=1,
    title="Assignment 03: scaled dot-product attention",
    notebook="a03_attention.ipynb",
    exercises=(ATTENTION_NP, SDPA),
    provided=("mha_course.softmax",),  # the stable softmax from assignment 02
)
