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
from ..engine.spec import Assignment, Case, Exercise
from ..learner import hints

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


DOT_PRODUCT = Exercise(
    key="dot_product_np",
    target="dot_product_np",
    title="Dot product of two vectors",
    cases=(
        Case("a . b for two vectors of length 6", 2, _vectors(6, 0), calls.dot_product_np, _ref_dot, _diagnose_dot),
        Case(
            "orthogonal vectors give 0",
            1,
            _vectors(5, 1, orthogonal=True),
            calls.dot_product_np,
            _ref_dot,
            _diagnose_dot,
        ),
        Case("long vectors (D = 128)", 1, _vectors(128, 2), calls.dot_product_np, _ref_dot, _diagnose_dot, hidden=True),
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

DOT_SCORES = Exercise(
    key="dot_scores_np",
    target="dot_scores_np",
    title="All query-key dot products at once",
    cases=(
        Case(
            "q (T=3, D=4), k (S=5, D=4) -> scores (3, 5)",
            2,
            _qk((), 3, 5, 4, 10),
            calls.scores_np,
            _ref_scores,
            _diagnose_scores,
            visualize=_heat,
        ),
        Case(
            "scores[i, j] = q_i . k_j (T = S = 4)",
            1,
            _qk((), 4, 4, 3, 11),
            calls.scores_np,
            _ref_scores,
            _diagnose_scores,
            visualize=_heat,
        ),
        Case(
            "leading batch dim: (B, T, D) x (B, S, D) -> (B, T, S)",
            2,
            _qk((2,), 3, 5, 4, 12),
            calls.scores_np,
            _ref_scores,
            _diagnose_scores,
        ),
        Case(
            "two leading dims (B, H, T, D)",
            1,
            _qk((2, 3), 4, 6, 5, 13),
            calls.scores_np,
            _ref_scores,
            _diagnose_scores,
            hidden=True,
        ),
        Case(
            "a single query (T = 1)",
            1,
            _qk((), 1, 7, 8, 14),
            calls.scores_np,
            _ref_scores,
            _diagnose_scores,
            hidden=True,
        ),
    ),
)

SCALED_SCORES = Exercise(
    key="scaled_dot_scores_np",
    target="scaled_dot_scores_np",
    title="Scaled scores: q k^T / sqrt(D)",
    cases=(
        Case(
            "scaled by 1/sqrt(D) (T=3, S=5, D=16)",
            2,
            _qk((), 3, 5, 16, 20),
            calls.scores_np,
            _ref_scaled,
            _diagnose_scaled,
            visualize=_heat,
        ),
        Case("leading batch dim (B, T, D)", 1, _qk((2,), 4, 6, 9, 21), calls.scores_np, _ref_scaled, _diagnose_scaled),
        Case(
            "float32 in, float32 out",
            1,
            _qk((), 3, 5, 16, 22, np.float32),
            calls.scores_np,
            _ref_scaled,
            _diagnose_scaled_dtype,
        ),
        Case(
            "another D (D = 9, T = S = 7)",
            1,
            _qk((), 7, 7, 9, 23),
            calls.scores_np,
            _ref_scaled,
            _diagnose_scaled,
            hidden=True,
        ),
        Case(
            "(B, H, T, D) with D = 25",
            1,
            _qk((2, 2), 3, 4, 25, 24),
            calls.scores_np,
            _ref_scaled,
            _diagnose_scaled,
            hidden=True,
        ),
    ),
)

ASSIGNMENT = Assignment(
    key="a01_dot_products",
    version=1,
    title="Assignment 01: dot products and attention scores",
    notebook="a01_dot_products.ipynb",
    exercises=(DOT_PRODUCT, DOT_SCORES, SCALED_SCORES),
)
