"""Assignment 03 (chapter 03): scaled dot-product attention, first in NumPy, then in torch.

    Attention(Q, K, V) = softmax(Q K^T / sqrt(D)) V      returns (out, weights)

q (..., T, D), k (..., S, D), v (..., S, Dv) -> out (..., T, Dv), weights (..., T, S). The cases
use T, S, D and Dv all different so that a transposed or swapped result shows up as a wrong
shape, and compare against wrong-but-plausible variants (1/D, sqrt(S), softmax over queries,
keys used as values, ...) to say which mistake was made.
"""

from __future__ import annotations

import numpy as np

from ..calls import a03_attention as calls
from ..engine import case_inputs
from ..engine.spec import Assignment, Case, Exercise
from ..learner import hints
from ._common import attention_alternatives

_OUT, _W = "[..., T, Dv]", "[..., T, S]"

# --- inputs ---------------------------------------------------------------------------------------


def _qkv(lead, T, S, D, Dv, seed, dtype=np.float64, scale=None):
    def make():
        rng = case_inputs.rng(seed)
        q = rng.standard_normal((*lead, T, D)).astype(dtype)
        k = rng.standard_normal((*lead, S, D)).astype(dtype)
        v = rng.standard_normal((*lead, S, Dv)).astype(dtype)
        return {"q": q, "k": k, "v": v, "scale": scale}

    return make


def _large_scores(T, S, D, Dv, seed, offset=3000.0):
    """Scores q.k = offset + r.s with r, s ~ N(0, 1) in D - 1 dims: huge (a softmax without its max
    subtraction overflows) yet spread by about sqrt(D) after scaling, so that leaving out 1/sqrt(D), or
    dividing by it twice, changes the weights on every draw (random q and k of large norm give one-hot
    weights with or without the scale, and such bugs passed on most draws)."""

    def make():
        rng = case_inputs.rng(seed)
        lead = np.sqrt(offset)
        q = np.concatenate([np.full((T, 1), lead), rng.standard_normal((T, D - 1))], axis=-1)
        k = np.concatenate([np.full((S, 1), lead), rng.standard_normal((S, D - 1))], axis=-1)
        v = rng.standard_normal((S, Dv))
        return {"q": q, "k": k, "v": v, "scale": None}

    return make


# --- reference and diagnose (grader) ---------------------------------------------------------------


def _ref_np(inputs):
    from mha_course.core.attention import scaled_dot_product_attention_np

    return scaled_dot_product_attention_np(inputs["q"], inputs["k"], inputs["v"], scale=inputs["scale"])


def _ref_torch(inputs):
    import torch

    from mha_course.core.attention import scaled_dot_product_attention

    q, k, v = (torch.from_numpy(inputs[n]) for n in "qkv")
    out, weights = scaled_dot_product_attention(q, k, v, scale=inputs["scale"])
    return out.numpy(), weights.numpy()


def _diagnose(got, expected, inputs):
    return hints.compare_pair(got, expected, legends=(_OUT, _W), alternatives=attention_alternatives(inputs)[::-1])


def _diagnose_dtype(got, expected, inputs):
    return hints.compare_pair(
        got, expected, legends=(_OUT, _W), alternatives=attention_alternatives(inputs)[::-1], check_dtype=True
    )


_CHANGED = (
    "your function changed q, k or v in place (e.g. q *= scale or q /= ...): compute the scaled scores "
    "into a new array instead"
)


_heat = hints.pair_heatmaps(1)


def _cases(call, call_unchanged, reference, torch_version):
    c = [
        Case(
            "shapes: out (T=3, Dv=6), weights (T=3, S=5)",
            2,
            _qkv((), 3, 5, 4, 6, 0),
            call,
            reference,
            _diagnose,
            visualize=_heat,
        ),
        Case(
            "weights = softmax(q k^T / sqrt(D)) (D = 16)",
            2,
            _qkv((), 4, 6, 16, 3, 1),
            call,
            reference,
            _diagnose,
            visualize=_heat,
        ),
        Case("out = weights @ v (Dv = D, k != v)", 2, _qkv((), 4, 5, 8, 8, 2), call, reference, _diagnose),
        Case("leading batch dim (B, T, D)", 1, _qkv((2,), 3, 5, 4, 6, 3), call, reference, _diagnose),
        Case(
            "does not change q, k, v",
            1,
            _qkv((2,), 3, 5, 4, 6, 4),
            call_unchanged,
            *case_inputs.unchanged_case(reference, _diagnose, _CHANGED, ("q", "k", "v")),
        ),
    ]
    if torch_version:
        c += [
            Case(
                "scale argument is used (scale = 0.3)",
                1,
                _qkv((2,), 3, 5, 4, 6, 5, scale=0.3),
                call,
                reference,
                _diagnose,
                visualize=_heat,
            ),
            Case("(B, H, T, D) inputs", 1, _qkv((2, 3), 4, 5, 8, 6, 6), call, reference, _diagnose),
            Case("float32 in, float32 out", 1, _qkv((2,), 3, 5, 4, 6, 7, np.float32), call, reference, _diagnose_dtype),
        ]
    else:
        c.append(
            Case("float32 in, float32 out", 1, _qkv((), 3, 5, 16, 6, 7, np.float32), call, reference, _diagnose_dtype)
        )
    c += [
        Case(
            "square case T = S (weights not transposed)",
            1,
            _qkv((), 5, 5, 4, 6, 8),
            call,
            reference,
            _diagnose,
            hidden=True,
        ),
        Case(
            "large scores (q.k ~ 3000): no NaN",
            1,
            _large_scores(3, 5, 4, 6, 9),
            call,
            reference,
            _diagnose,
            hidden=True,
        ),
        Case("a single query (T = 1) and D = 9", 1, _qkv((), 1, 7, 9, 2, 10), call, reference, _diagnose, hidden=True),
        Case("(B, H, T, D) with other sizes", 1, _qkv((3, 2), 6, 2, 5, 7, 11), call, reference, _diagnose, hidden=True),
    ]
    if torch_version:
        c.append(
            Case(
                "float64 in, float64 out", 1, _qkv((2,), 3, 5, 4, 6, 12), call, reference, _diagnose_dtype, hidden=True
            )
        )
        c.append(
            Case(
                "scale = 0: every key gets the same weight",
                1,
                _qkv((2,), 3, 5, 4, 6, 13, scale=0.0),
                call,
                reference,
                _diagnose,
                hidden=True,
            )
        )
    return tuple(c)


ATTENTION_NP = Exercise(
    key="attention_np",
    target="attention_np",
    title="Scaled dot-product attention in NumPy",
    cases=_cases(calls.attention_np, calls.attention_np_unchanged, _ref_np, torch_version=False),
    forbidden=(
        "mha_course.scaled_dot_product_attention_np",
        "mha_course.core.attention.scaled_dot_product_attention_np",
        "mha_course.scaled_dot_product_attention",
        "mha_course.core.attention.scaled_dot_product_attention",
    ),
)

SDPA = Exercise(
    key="sdpa",
    target="scaled_dot_product_attention",
    title="Scaled dot-product attention in torch",
    cases=_cases(calls.sdpa, calls.sdpa_unchanged, _ref_torch, torch_version=True),
    forbidden=(
        "torch.nn.functional.scaled_dot_product_attention",
        "torch.nn.functional.multi_head_attention_forward",
        "mha_course.scaled_dot_product_attention",
        "mha_course.core.attention.scaled_dot_product_attention",
    ),
)

ASSIGNMENT = Assignment(
    key="a03_attention",
    version=1,
    title="Assignment 03: scaled dot-product attention",
    notebook="a03_attention.ipynb",
    exercises=(ATTENTION_NP, SDPA),
    provided=("mha_course.core.softmax",),  # the stable softmax from assignment 02
)
