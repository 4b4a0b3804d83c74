"""Grader-side helpers shared by several assignments: float64 attention and multi-head attention
with knobs for the classic mistakes, and the attention mistakes' hints.

Imported only inside ``reference``/``diagnose`` code paths of the exercise modules (it runs in the
grader, never in the submission's sandbox); the library's softmax is imported inside the functions.
"""

from __future__ import annotations

import math

import numpy as np

# Attention the learner writes must not hand the work to one of these
SDPA_SHORTCUTS = (
    "torch.nn.functional.scaled_dot_product_attention",
    "torch.nn.functional.multi_head_attention_forward",
    "mha_course.scaled_dot_product_attention",
    "mha_course.core.attention.scaled_dot_product_attention",
)

# A multi-head attention module the learner writes must not hand the work to one of these
MHA_SHORTCUTS = (
    "torch.nn.MultiheadAttention",
    "torch.nn.functional.multi_head_attention_forward",
    "mha_course.MultiHeadAttention",
    "mha_course.core.mha.MultiHeadAttention",
)


def np_attention(q, k, v, scale, mask=None, softmax_axis=-1, mask_mode="add", value=None):
    """Grader-side float64 attention with knobs for the classic mistakes; returns (out, weights).

    mask_mode: "add" (bool -> -inf, float added; the right way), "ignore", "invert",
    "after" (softmax first, then zero the blocked weights, no renormalisation),
    "multiply" (float mask multiplied into the scores).
    """
    from mha_course.core.softmax import softmax_np

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
            (
                w(scale=1.0 / math.sqrt(D)),
                f"the scale argument ({given}) is ignored: use it instead of 1/sqrt(D)"
                + (" (`scale or default` treats 0 as missing: test `scale is None`)" if given == 0 else ""),
            ),
            (w(scale=given / math.sqrt(D)), "you applied both scale and 1/sqrt(D); scale replaces the default"),
        ]
        if given:
            weights_alts.append(
                (w(scale=1.0 / given), f"you divided by scale={given}; the scores are MULTIPLIED by scale")
            )
    if T > 1:
        weights_alts.append(
            (
                w(softmax_axis=-2),
                "softmax over the queries (axis -2): each query's row over the "
                "keys must sum to 1, so use the last axis",
            )
        )
    if T == S:
        weights_alts.append(
            (
                lambda: np.swapaxes(np_attention(q, k, v, right, mask)[1], -1, -2),
                "the weights are transposed: weights[i, j] is how much query i attends to key j",
            )
        )
    weights_alts += (
        [
            (w(mask_mode="ignore"), "the mask is ignored"),
            (w(mask_mode="invert"), "the mask is inverted: True means MAY attend"),
            (
                w(mask_mode="after"),
                "the mask is applied after softmax: block the scores (with -inf) "
                "before softmax so each row still sums to 1",
            ),
            (w(mask_mode="multiply"), "the float mask is multiplied; a float mask is ADDED to the scores"),
        ]
        if mask is not None
        else []
    )
    out_alts = []
    if D == Dv:
        out_alts.append((o(value=k), "you used the keys as values: out = weights @ v"))
    return weights_alts, out_alts


def np_mha(inputs, scale=None, out_proj=True, swap_qk=False, value_from_key=False, split="ok", merge="ok"):
    """Grader-side float64 multi-head attention with knobs for the classic mistakes."""
    E, H = inputs["E"], inputs["H"]
    D = E // H

    def lin(name, x):
        return x.astype(np.float64) @ inputs[name + ".weight"].astype(np.float64).T + inputs[name + ".bias"]

    def split_(x):
        B, T, _ = x.shape
        if split == "no_transpose":
            return x.reshape(B, H, T, D)
        return x.reshape(B, T, H, D).transpose(0, 2, 1, 3)  # (B, H, T, D)

    qp, kp = ("k_proj", "q_proj") if swap_qk else ("q_proj", "k_proj")
    q = split_(lin(qp, inputs["query"]))
    k = split_(lin(kp, inputs["key"]))
    v = split_(lin("v_proj", inputs["key"] if value_from_key else inputs["value"]))
    mask = inputs["mask"]
    if mask is not None and mask.ndim == 3:
        mask = mask[:, None]
    heads, weights = np_attention(q, k, v, 1.0 / math.sqrt(D) if scale is None else scale, mask)
    B, _, T, _ = heads.shape
    merged = heads.reshape(B, T, E) if merge == "no_transpose" else heads.transpose(0, 2, 1, 3).reshape(B, T, E)
    out = lin("out_proj", merged) if out_proj else merged
    return out, weights


def projection_weights(rng, E: int, H: int, self_attention: bool, names, dtype) -> dict:
    """The four (E, E) projections and their biases, drawn from ``rng``, plus E, H and the flag.

    Weights ~ N(0, 1/E) (so that projected activations stay near unit size), biases ~ N(0, 0.25).
    """
    inputs = {"E": E, "H": H, "self_attention": self_attention}
    for name in names:
        inputs[name + ".weight"] = (rng.standard_normal((E, E)) / math.sqrt(E)).astype(dtype)
        inputs[name + ".bias"] = (rng.standard_normal(E) * 0.5).astype(dtype)
    return inputs
