"""Assignment 01 (chapter 01): dot products and the score matrix, in NumPy.

Exercises: ``dot_product_np`` (two vectors -> a number), ``dot_scores_np`` (every query against
every key, (..., T, D) x (..., S, D) -> (..., T, S)) and ``scaled_dot_scores_np`` (the same
divided by sqrt(D), the scale chapter 01 motivates by experiment).
"""

from __future__ import annotations

import math

import numpy as np

from ..calls import a01_dot_products as calls
from ..engine import case_inputs
from ..learner import hints
from ..spec import Assignment, Case, Exercise

# --- dot_product_np -------------------------------------------------------------------------------


def _vectors(D: int, seed: int, orthogonal: bool = False):
    def make():
        rng = case_inputs.rng(seed)
        a = rng.standard_normal(D)
        b = rng.standard_normal(D)
        if orthogonal:
            b = b - (a @ b) / (a @ a) * a  # remove b's component along a
        return {"a": a, "b": b}

    return make


def _ref_dot(inputs):
    return float(np.sum(inputs["a"] * inputs["b"]))


def _diagnose_dot(got, expected, inputs):
    arr, hint = hints.as_array(got)
    if hint:
        return hint
    a, b = inputs["a"], inputs["b"]
    if arr.shape == a.shape and hints.close(arr, a * b):
        return "you returned the element-wise products a_i * b_i; the dot product is their sum (one number)"
    return hints.compare(
        arr,
        expected,
        "dot product",
        "(a single number)",
        alternatives=[
            (
                lambda: np.asarray(np.sum(a) * np.sum(b)),
                "you multiplied the sums; multiply element-wise first, then sum",
            ),
            (lambda: np.asarray(np.linalg.norm(a) * np.linalg.norm(b)), "that is |a| |b|, the product of the lengths"),
            (lambda: np.asarray(np.linalg.norm(a - b)), "that is the distance |a - b|, not the dot product"),
        ],
    )


def _dot_case(name, points, *, D, seed, orthogonal=False, hidden=False):
    """A dot_product_np case on two vectors of length D."""
    return Case(name, points, _vectors(D, seed, orthogonal), calls.dot_product_np, _ref_dot, _diagnose_dot, hidden)


DOT_PRODUCT = Exercise(
    key="dot_product_np",
    target="dot_product_np",
    title="Dot product of two vectors",
    cases=(
        _dot_case("a . b for two vectors of length 6", 2, D=6, seed=0),
        _dot_case("orthogonal vectors give 0", 1, D=5, seed=1, orthogonal=True),
        _dot_case("long vectors (D = 128)", 1, D=128, seed=2, hidden=True),
    ),
)

# --- dot_scores_np / scaled_dot_scores_np ---------------------------------------------------------


def _qk(lead: tuple[int, ...], T: int, S: int, D: int, seed: int, dtype=np.float64):
    def make():
        rng = case_inputs.rng(seed)
        q = rng.standard_normal((*lead, T, D)).astype(dtype)
        k = rng.standard_normal((*lead, S, D)).astype(dtype)
        return {"q": q, "k": k}

    return make


def _ref_scores(inputs):
    q, k = inputs["q"], inputs["k"]
    return np.einsum("...td,...sd->...ts", q, k)


def _ref_scaled(inputs):
    return (_ref_scores(inputs) / math.sqrt(inputs["q"].shape[-1])).astype(inputs["q"].dtype)


_SCORES_LEGEND = "[..., T, S]"


def _diagnose_scores(got, expected, inputs):
    q, k = inputs["q"], inputs["k"]
    return hints.compare(
        got,
        expected,
        "scores",
        _SCORES_LEGEND,
        alternatives=[
            (
                lambda: np.einsum("...sd,...td->...st", k, q),
                "you computed k q^T; scores[i, j] must be q_i . k_j (q k^T)",
            ),
        ],
    )


def _scale_alternatives(inputs):
    q, k = inputs["q"], inputs["k"]
    T, D, S = q.shape[-2], q.shape[-1], k.shape[-2]
    raw = _ref_scores(inputs)
    return [
        (lambda: raw, "the scores are not scaled: divide by sqrt(D)"),
        (lambda: raw / D, "you divided by D; divide by sqrt(D)"),
        (lambda: raw * math.sqrt(D), "you multiplied by sqrt(D); divide by it"),
        (lambda: raw / math.sqrt(T), "you divided by sqrt(T) (the number of queries); D is the last axis of q and k"),
        (lambda: raw / math.sqrt(S), "you divided by sqrt(S) (the number of keys); D is the last axis of q and k"),
        (lambda: np.einsum("...sd,...td->...st", k, q) / math.sqrt(D), "transposed: scores[i, j] must be q_i . k_j"),
    ]


def _diagnose_scaled(got, expected, inputs):
    return hints.compare(got, expected, "scaled scores", _SCORES_LEGEND, alternatives=_scale_alternatives(inputs))


def _diagnose_scaled_dtype(got, expected, inputs):
    return hints.compare(
        got, expected, "scaled scores", _SCORES_LEGEND, alternatives=_scale_alternatives(inputs), check_dtype=True
    )


_heat = hints.single_heatmaps("scores", value_name="score")


def _scores_case(name, points, *, lead=(), T, S, D, seed, hidden=False, heatmap=False):
    """A dot_scores_np case: q (*lead, T, D) against k (*lead, S, D), unscaled."""
    visualize = _heat if heatmap else None
    return Case(
        name, points, _qk(lead, T, S, D, seed), calls.scores_np, _ref_scores, _diagnose_scores, hidden, visualize
    )


def _scaled_case(name, points, *, lead=(), T, S, D, seed, dtype=np.float64, hidden=False, heatmap=False):
    """A scaled_dot_scores_np case; a dtype other than float64 is the case's point, so the dtype is judged too."""
    judge = _diagnose_scaled if dtype == np.float64 else _diagnose_scaled_dtype
    visualize = _heat if heatmap else None
    return Case(name, points, _qk(lead, T, S, D, seed, dtype), calls.scores_np, _ref_scaled, judge, hidden, visualize)


DOT_SCORES = Exercise(
    key="dot_scores_np",
    target="dot_scores_np",
    title="All query-key dot products at once",
    cases=(
        _scores_case("q (T=3, D=4), k (S=5, D=4) -> scores (3, 5)", 2, T=3, S=5, D=4, seed=10, heatmap=True),
        _scores_case("scores[i, j] = q_i . k_j (T = S = 4)", 1, T=4, S=4, D=3, seed=11, heatmap=True),
        _scores_case("leading batch dim: (B, T, D) x (B, S, D) -> (B, T, S)", 2, lead=(2,), T=3, S=5, D=4, seed=12),
        _scores_case("two leading dims (B, H, T, D)", 1, lead=(2, 3), T=4, S=6, D=5, seed=13, hidden=True),
        _scores_case("a single query (T = 1)", 1, T=1, S=7, D=8, seed=14, hidden=True),
    ),
)

SCALED_SCORES = Exercise(
    key="scaled_dot_scores_np",
    target="scaled_dot_scores_np",
    title="Scaled scores: q k^T / sqrt(D)",
    cases=(
        _scaled_case("scaled by 1/sqrt(D) (T=3, S=5, D=16)", 2, T=3, S=5, D=16, seed=20, heatmap=True),
        _scaled_case("leading batch dim (B, T, D)", 1, lead=(2,), T=4, S=6, D=9, seed=21),
        _scaled_case("float32 in, float32 out", 1, T=3, S=5, D=16, seed=22, dtype=np.float32),
        _scaled_case("another D (D = 9, T = S = 7)", 1, T=7, S=7, D=9, seed=23, hidden=True),
        _scaled_case("(B, H, T, D) with D = 25", 1, lead=(2, 2), T=3, S=4, D=25, seed=24, hidden=True),
    ),
)

ASSIGNMENT = Assignment(
    key="a01_dot_products",
    version=1,
    title="Assignment 01: dot products and attention scores",
    notebook="a01_dot_products.ipynb",
    exercises=(DOT_PRODUCT, DOT_SCORES, SCALED_SCORES),
)
