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
from ..learner import hints
from ..spec import Assignment, Case, Exercise
from ._common import SDPA_SHORTCUTS, attention_alternatives

_OUT, _W = "[..., T, Dv]", "[..., T, S]"

# --- inputs ---------------------------------------------------------------------------------------


def _qkv(lead=(), *, T, S, D, Dv, seed, dtype=np.float64, scale=None):
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
    def attention(name, points, inputs, *, hidden=False, heatmap=False, judge_dtype=False):
        # judge_dtype: the case is about the output keeping the inputs' dtype
        judge = _diagnose_dtype if judge_dtype else _diagnose
        return Case(name, points, inputs, call, reference, judge, hidden, _heat if heatmap else None)

    c = [
        attention("shapes: out (T=3, Dv=6), weights (T=3, S=5)", 2, _qkv(T=3, S=5, D=4, Dv=6, seed=0), heatmap=True),
        attention("weights = softmax(q k^T / sqrt(D)) (D = 16)", 2, _qkv(T=4, S=6, D=16, Dv=3, seed=1), heatmap=True),
        attention("out = weights @ v (Dv = D, k != v)", 2, _qkv(T=4, S=5, D=8, Dv=8, seed=2)),
        attention("leading batch dim (B, T, D)", 1, _qkv((2,), T=3, S=5, D=4, Dv=6, seed=3)),
        Case(
            "does not change q, k, v",
            1,
            _qkv((2,), T=3, S=5, D=4, Dv=6, seed=4),
            call_unchanged,
            *case_inputs.unchanged_case(reference, _diagnose, _CHANGED, ("q", "k", "v")),
        ),
    ]
    if torch_version:
        c += [
            attention(
                "scale argument is used (scale = 0.3)",
                1,
                _qkv((2,), T=3, S=5, D=4, Dv=6, seed=5, scale=0.3),
                heatmap=True,
            ),
            attention("(B, H, T, D) inputs", 1, _qkv((2, 3), T=4, S=5, D=8, Dv=6, seed=6)),
            attention(
                "float32 in, float32 out",
                1,
                _qkv((2,), T=3, S=5, D=4, Dv=6, seed=7, dtype=np.float32),
                judge_dtype=True,
            ),
        ]
    else:
        c.append(
            attention(
                "float32 in, float32 out", 1, _qkv(T=3, S=5, D=16, Dv=6, seed=7, dtype=np.float32), judge_dtype=True
            )
        )
    c += [
        attention("square case T = S (weights not transposed)", 1, _qkv(T=5, S=5, D=4, Dv=6, seed=8), hidden=True),
        attention("large scores (q.k ~ 3000): no NaN", 1, _large_scores(T=3, S=5, D=4, Dv=6, seed=9), hidden=True),
        attention("a single query (T = 1) and D = 9", 1, _qkv(T=1, S=7, D=9, Dv=2, seed=10), hidden=True),
        attention("(B, H, T, D) with other sizes", 1, _qkv((3, 2), T=6, S=2, D=5, Dv=7, seed=11), hidden=True),
    ]
    if torch_version:
        c += [
            attention(
                "float64 in, float64 out", 1, _qkv((2,), T=3, S=5, D=4, Dv=6, seed=12), hidden=True, judge_dtype=True
            ),
            attention(
                "scale = 0: every key gets the same weight",
                1,
                _qkv((2,), T=3, S=5, D=4, Dv=6, seed=13, scale=0.0),
                hidden=True,
            ),
        ]
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
    forbidden=SDPA_SHORTCUTS,
)

ASSIGNMENT = Assignment(
    key="a03_attention",
    version=1,
    title="Assignment 03: scaled dot-product attention",
    notebook="a03_attention.ipynb",
    exercises=(ATTENTION_NP, SDPA),
    provided=("mha_course.core.softmax",),  # the stable softmax from assignment 02
)
