"""Assignment 13 (chapter 13): fill in two Triton kernels, graded under Triton's interpreter.

1. ``triton_softmax(x)``: a row-softmax kernel, one program per row of x (N, C).
2. ``triton_single_head_attention(q, k, v)``: the online-softmax loop of a FlashAttention forward
   kernel for one head, q (T, D), k (S, D), v (S, D) -> out (T, D).

Without a GPU the learner's kernels run in Triton's interpreter, so the cases are small. Each
case compares with the grader's NumPy reference; the diagnoses recognise the usual slips (no max
subtraction, a missing 1/sqrt(D), forgetting to rescale the accumulator, dividing too early).
What is graded is the learner's *kernel* (``softmax_kernel``, ``attention_kernel``, found in the
namespace of the function passed to ``check``), launched by the grader's own copy of the notebook's
wrapper: a wrapper that computes the answer with torch or NumPy instead of launching the kernel
gains nothing. torch's softmax, matmul and SDPA are also forbidden while a case runs.
"""

from __future__ import annotations

import math

import numpy as np

from ..calls import a13_triton_kernel as calls
from ..engine import case_inputs
from ..learner import hints
from ..spec import Assignment, Case, Exercise

# --- inputs ---------------------------------------------------------------------------------------


def _rows(*, N, C, seed, magnitude=1.0, neg_inf_fraction=0.0):
    def make():
        rng = case_inputs.rng(seed)
        x = (rng.standard_normal((N, C)) * magnitude).astype(np.float32)
        if neg_inf_fraction:
            blocked = rng.random((N, C)) < neg_inf_fraction
            blocked[:, 0] = False  # every row keeps a finite entry
            x[blocked] = -np.inf
        return {"x": x}

    return make


def _qkv(*, T, S, D, seed, magnitude=1.0):
    def make():
        rng = case_inputs.rng(seed)
        q = (rng.standard_normal((T, D)) * magnitude).astype(np.float32)
        k = (rng.standard_normal((S, D)) * magnitude).astype(np.float32)
        v = rng.standard_normal((S, D)).astype(np.float32)
        return {"q": q, "k": k, "v": v}

    return make


# --- reference and diagnose (grader) ---------------------------------------------------------------


def _softmax_reference(inputs):
    from mha_course.core.softmax import softmax_np

    return softmax_np(inputs["x"].astype(np.float64)).astype(np.float32)


def _attention_reference(inputs, scale=None):
    from mha_course.core.attention import scaled_dot_product_attention_np

    q, k, v = (inputs[n].astype(np.float64) for n in "qkv")
    out, _ = scaled_dot_product_attention_np(q, k, v, scale=scale)
    return out.astype(np.float32)


def _diagnose_softmax(got, expected, inputs):
    x = inputs["x"].astype(np.float64)
    alternatives = [
        (lambda: np.exp(x) / np.exp(x).sum(axis=-1, keepdims=True), "matches softmax without the max subtraction"),
        (lambda: np.exp(x - x.max(axis=-1, keepdims=True)), "exp(x - max) without dividing by the row sum"),
        (
            lambda: np.exp(x - x.max(axis=-1, keepdims=True)) / np.exp(x - x.max(axis=-1, keepdims=True)).sum(),
            "divided by the sum of the whole matrix: each program must sum its own row only",
        ),
    ]
    hint = hints.compare(got, expected, "softmax", "[N, C]", alternatives=alternatives)
    if hint and "NaN" in hint:
        hint += "; in the kernel, look at what the padding columns are loaded as and at the axis of the row's max"
    return hint


def _float32_error_bound(inputs) -> float:
    """How far a correct float32 kernel may land from the float64 reference on these inputs.

    The kernel exponentiates scores of size up to max|s| (times log2(e)): each carries a relative rounding
    error of a few float32 epsilons of that size, so each weight, and the output built from values of size
    up to max|v|, moves by about eps32 * max|s| * max|v|. With large scores this exceeds float32's usual
    tolerance on outputs near zero, and a correct kernel would fail on some draws of the inputs.
    """
    from mha_course.core.softmax import LOG2E

    q, k, v = (inputs[n].astype(np.float64) for n in "qkv")
    largest_score = float(np.abs(q @ k.T).max()) * LOG2E / math.sqrt(q.shape[-1])
    return 8 * float(np.finfo(np.float32).eps) * max(1.0, largest_score) * max(1.0, float(np.abs(v).max()))


def _diagnose_attention(got, expected, inputs):
    from mha_course.core.softmax import LOG2E

    q, k, v = (inputs[n].astype(np.float64) for n in "qkv")
    D = q.shape[-1]
    alternatives = [
        (lambda: _attention_reference(inputs, scale=1.0), "no 1/sqrt(D) scale: multiply the scores by qk_scale_log2"),
        (lambda: _attention_reference(inputs, scale=1.0 / D), "scaled by 1/D instead of 1/sqrt(D)"),
        (
            lambda: _attention_reference(inputs, scale=LOG2E / math.sqrt(D)),
            "the scores are scaled by log2(e)/sqrt(D) but exponentiated with exp: the base of the exponential and the scale must agree",
        ),
        (
            lambda: _no_rescale(q, k, v),
            "the accumulator is not rescaled: when the running max grows, multiply "
            "l_i and acc by exp2(m_old - m_new) before adding the new block",
        ),
        (
            lambda: _no_rescale(q, k, v, rescale_l=True),
            "l_i is rescaled but acc is not: when the running max grows, "
            "acc must be multiplied by the same alpha = exp2(m_old - m_new) before adding p @ v",
        ),
        (
            lambda: _no_rescale(q, k, v, rescale_acc=True),
            "acc is rescaled but l_i is not: when the running max "
            "grows, l_i must be multiplied by the same alpha = exp2(m_old - m_new) before adding the new row sums",
        ),
    ]
    bound = _float32_error_bound(inputs)  # a correct float32 kernel lands this far off on large scores
    return hints.compare(got, expected, "output", "[T, D]", alternatives=alternatives, atol=bound)


def _no_rescale(q, k, v, block_n=16, rescale_l=False, rescale_acc=False):
    """What the kernel returns when l and/or acc are not rescaled by alpha = exp(m_old - m_new)."""
    scores = q @ k.T / math.sqrt(q.shape[-1])  # (T, S)
    m = np.full(q.shape[0], -np.inf)
    acc, l_sum = np.zeros((q.shape[0], v.shape[1])), np.zeros(q.shape[0])
    for start in range(0, k.shape[0], block_n):
        block = scores[:, start : start + block_n]
        m_new = np.maximum(m, block.max(axis=1))
        alpha = np.exp(m - m_new)  # (T,): 0 for the first block (m = -inf)
        p = np.exp(block - m_new[:, None])
        l_sum = (l_sum * alpha if rescale_l else l_sum) + p.sum(axis=1)
        acc = (acc * alpha[:, None] if rescale_acc else acc) + p @ v[start : start + block_n]
        m = m_new
    return (acc / l_sum[:, None]).astype(np.float32)


# --- cases ----------------------------------------------------------------------------------------

_SHORTCUTS = (
    "torch.softmax",
    "torch.nn.functional.softmax",
    "torch.Tensor.softmax",
    "torch.special.softmax",
    "torch.nn.functional.scaled_dot_product_attention",
    "torch.matmul",
    "torch.bmm",
    "torch.einsum",
    "torch.Tensor.__matmul__",
    "torch.Tensor.matmul",
    "torch.exp",
    "torch.Tensor.exp",
    "mha_course.core.softmax",
    "mha_course.triton_attention",
    "mha_course.kernels.triton_attention",
    "mha_course.kernels.function.triton_attention",
)

_softmax_heat = hints.single_heatmaps("softmax", value_name="probability", axis_names=("row", "column"))


def _softmax_case(name, points, *, hidden=False, heatmap=False, **rows):
    """A softmax-kernel case; rows: _rows' keywords (N rows of C columns, seed, magnitude, neg_inf_fraction)."""
    visualize = _softmax_heat if heatmap else None
    return Case(
        name, points, _rows(**rows), calls.softmax_kernel, _softmax_reference, _diagnose_softmax, hidden, visualize
    )


def _attention_case(name, points, *, hidden=False, **sizes):
    """An attention-kernel case; sizes: _qkv's keywords (q (T, D), k and v (S, D), seed, magnitude)."""
    return Case(name, points, _qkv(**sizes), calls.attention_kernel, _attention_reference, _diagnose_attention, hidden)


SOFTMAX = Exercise(
    key="triton_softmax",
    target="triton_softmax",
    title="a row-softmax kernel",
    cases=(
        _softmax_case("rows of a (4, 10) matrix", 2, N=4, C=10, seed=0, heatmap=True),
        _softmax_case("a width that is not a power of two (3, 33)", 2, N=3, C=33, seed=1),
        _softmax_case("large logits (about 1000) give no NaN", 2, N=2, C=16, seed=2, magnitude=1000.0),
        _softmax_case("-inf entries get zero weight", 1, N=5, C=12, seed=3, neg_inf_fraction=0.4, hidden=True),
        _softmax_case("a single wide row (1, 100)", 1, N=1, C=100, seed=4, magnitude=5.0, hidden=True),
    ),
    forbidden=_SHORTCUTS,
)

ATTENTION = Exercise(
    key="triton_single_head_attention",
    target="triton_single_head_attention",
    title="the online-softmax loop of a FlashAttention kernel",
    cases=(
        _attention_case("T = S = 16, D = 16 (one block)", 2, T=16, S=16, D=16, seed=10),
        _attention_case("several key blocks: T = 20, S = 50, D = 32", 3, T=20, S=50, D=32, seed=11),
        _attention_case("a single query (T = 1, S = 33)", 1, T=1, S=33, D=16, seed=12),
        _attention_case("large scores: the running max must be tracked", 2, T=16, S=48, D=16, seed=13, magnitude=6.0),
        _attention_case("T = 40, S = 70, D = 64", 2, T=40, S=70, D=64, seed=14, hidden=True),
        _attention_case("large scores, many key blocks", 2, T=17, S=90, D=32, seed=15, magnitude=5.0, hidden=True),
    ),
    forbidden=_SHORTCUTS,
)

ASSIGNMENT = Assignment(
    key="a13_triton_kernel",
    version=1,
    title="Assignment 13 — Triton kernels: softmax and FlashAttention's inner loop",
    notebook="a13_triton_kernel.ipynb",
    exercises=(SOFTMAX, ATTENTION),
)
