"""Assignment 14 (chapter 14): the backward pass of attention by hand.

    softmax_jacobian(p) -> J (..., S, S),   J = diag(p) - p p^T
    attention_backward(q, k, v, grad_out) -> (dq, dk, dv)
        P = softmax(q k^T / sqrt(D)),  O = P v
        dv = P^T dO,  dP = dO v^T,  dS = P * (dP - rowsum(dO * O)),  dq = dS k / sqrt(D),  dk = dS^T q / sqrt(D)

Checked against autograd's gradients (computed in the grader); the learner's code may not use
autograd in any form (``forbidden`` holds ``torch.autograd`` and ``torch.func``: any tensor that
requires grad while a case runs counts). Diagnoses name the usual slips:
the softmax Jacobian's second term forgotten (dS = P * dP), the 1/sqrt(D) missing from dq and
dk, and a float32 input answered in float64.
"""

from __future__ import annotations

import math

import numpy as np

from ..calls import a14_attention_backward as calls
from ..engine import case_inputs
from ..learner import hints
from ..spec import Assignment, Case, Exercise

_NAMES = calls.NAMES  # one home: the call module
_LEGENDS = ("[..., T, D]", "[..., S, D]", "[..., S, Dv]")

# --- inputs ---------------------------------------------------------------------------------------


def _probs(lead=(), *, S, seed):
    def make():
        rng = case_inputs.rng(seed)
        x = rng.standard_normal((*lead, S)) * 2
        p = np.exp(x - x.max(axis=-1, keepdims=True))
        return {"p": p / p.sum(axis=-1, keepdims=True)}

    return make


def _qkv(lead=(), *, T, S, D, Dv, seed, dtype=np.float64):
    def make():
        rng = case_inputs.rng(seed)
        return {
            "q": rng.standard_normal((*lead, T, D)).astype(dtype),
            "k": rng.standard_normal((*lead, S, D)).astype(dtype),
            "v": rng.standard_normal((*lead, S, Dv)).astype(dtype),
            "grad_out": rng.standard_normal((*lead, T, Dv)).astype(dtype),
        }

    return make


# --- reference and diagnose (grader) ---------------------------------------------------------------


def _ref_jacobian(inputs):
    import torch

    from mha_course.core.softmax import softmax

    p = torch.from_numpy(inputs["p"])
    x = torch.log(p)  # softmax(log p) = p: differentiate softmax at that point with autograd
    flat = x.reshape(-1, x.shape[-1])
    jac = [torch.autograd.functional.jacobian(lambda t: softmax(t), row) for row in flat]
    return torch.stack(jac).reshape(*x.shape, x.shape[-1]).numpy()


def _ref_backward(inputs):
    import torch

    from mha_course.core.attention import scaled_dot_product_attention

    q, k, v = (torch.from_numpy(inputs[n]).clone().requires_grad_() for n in "qkv")
    out, _ = scaled_dot_product_attention(q, k, v)
    grads = torch.autograd.grad(out, (q, k, v), torch.from_numpy(inputs["grad_out"]))
    return tuple(g.numpy() for g in grads)


def _manual(inputs, forget_rowsum=False, scale_dq_dk=True):
    """float64 NumPy backward with knobs for the classic slips."""
    q, k, v, do = (inputs[n].astype(np.float64) for n in ("q", "k", "v", "grad_out"))
    scale = 1.0 / math.sqrt(q.shape[-1])
    s = q @ np.swapaxes(k, -1, -2) * scale
    p = np.exp(s - s.max(axis=-1, keepdims=True))
    p /= p.sum(axis=-1, keepdims=True)
    o = p @ v
    dv = np.swapaxes(p, -1, -2) @ do
    dp = do @ np.swapaxes(v, -1, -2)
    ds = p * dp if forget_rowsum else p * (dp - (do * o).sum(axis=-1, keepdims=True))
    f = scale if scale_dq_dk else 1.0
    dq = ds @ k * f
    dk = np.swapaxes(ds, -1, -2) @ q * f
    return dq, dk, dv


def _diagnose_jacobian(got, expected, inputs):
    p = inputs["p"]
    alternatives = [
        (lambda: p[..., :, None] * np.eye(p.shape[-1]), "only diag(p): subtract the outer product p p^T"),
        (lambda: -p[..., :, None] * p[..., None, :], "only -p p^T: add diag(p)"),
        (
            lambda: np.eye(p.shape[-1]) - p[..., :, None] * p[..., None, :],
            "diag(1) - p p^T: the diagonal is p_i (1 - p_i), i.e. diag(p), not the identity",
        ),
        (
            lambda: p[..., :, None] * np.eye(p.shape[-1]) + p[..., :, None] * p[..., None, :],
            "diag(p) + p p^T: the outer product enters with a minus sign, J = diag(p) - p p^T",
        ),
        (
            lambda: (p * (1 - p))[..., :, None] * np.eye(p.shape[-1]),
            "only the diagonal p_i (1 - p_i): the off-diagonal entries are -p_i p_j (J = diag(p) - p p^T)",
        ),
        (
            lambda: np.eye(p.shape[-1]) - np.ones_like(p)[..., :, None] * p[..., None, :],
            "I - 1 p^T is the Jacobian of log-softmax; softmax's is diag(p) - p p^T",
        ),
    ]
    return hints.compare(got, expected, "J", "[..., S, S]", alternatives=alternatives)


def _diagnose_backward(got, expected, inputs):
    arrays, hint = hints.unpack(got, _NAMES)
    if hint:
        return hint
    no_rowsum = _manual(inputs, forget_rowsum=True)
    no_scale = _manual(inputs, scale_dq_dk=False)
    for i in (2, 0, 1):  # dv first: it needs no softmax Jacobian, so its hint is the simplest
        name, legend = _NAMES[i], _LEGENDS[i]
        alternatives = []
        if name != "dv":
            alternatives = [
                (
                    lambda i=i: no_rowsum[i],
                    "dS = P * dP forgets the softmax Jacobian's second term: dS = P * (dP - rowsum(dO * O))",
                ),
                (
                    lambda i=i: no_scale[i],
                    f"{name} misses the factor 1/sqrt(D): the scores were "
                    "scaled in the forward pass, so their gradient is too",
                ),
            ]
        dtype = np.float32 if inputs["q"].dtype == np.float32 else None
        hint = hints.compare(
            arrays[i], expected[i], name, legend, alternatives=alternatives, dtype=dtype, check_dtype=True
        )
        if hint:
            return hint
    return None


def _jacobian_cases():
    def jacobian(name, points, inputs, hidden=False):
        return Case(name, points, inputs, calls.softmax_jacobian, _ref_jacobian, _diagnose_jacobian, hidden)

    return (
        jacobian("J = diag(p) - p p^T for one row (S = 5)", 2, _probs(S=5, seed=0)),
        jacobian("a batch of rows (3, S = 4)", 1, _probs((3,), S=4, seed=1)),
        jacobian("S = 1", 1, _probs((2,), S=1, seed=2), hidden=True),
    )


def _backward_cases():
    def backward(name, points, inputs, hidden=False):
        # the gradients' dtype is always judged (float32 in, float32 out)
        return Case(name, points, inputs, calls.attention_backward, _ref_backward, _diagnose_backward, hidden)

    return (
        backward(
            "shapes: dq (T, D), dk (S, D), dv (S, Dv) with T, S, D, Dv all different",
            2,
            _qkv(T=3, S=5, D=4, Dv=2, seed=0),
        ),
        backward("dv = P^T dO", 1, _qkv(T=4, S=4, D=8, Dv=8, seed=1)),
        backward("dq and dk through the softmax Jacobian", 2, _qkv(T=6, S=7, D=8, Dv=5, seed=2)),
        backward("(B, H, T, D) inputs", 1, _qkv((2, 3), T=4, S=5, D=4, Dv=4, seed=3)),
        backward("a single query (T = 1)", 1, _qkv((2,), T=1, S=6, D=4, Dv=3, seed=4), hidden=True),
        backward("float32 in, float32 out", 1, _qkv((2,), T=5, S=5, D=8, Dv=8, seed=5, dtype=np.float32), hidden=True),
    )


SOFTMAX_JACOBIAN = Exercise(
    key="softmax_jacobian",
    target="softmax_jacobian",
    title="The softmax Jacobian",
    cases=_jacobian_cases(),
    forbidden=(
        "torch.autograd",
        "torch.func",
        "mha_course.efficient.gradients.softmax_jacobian",
    ),  # autograd in any form
)

ATTENTION_BACKWARD = Exercise(
    key="attention_backward",
    target="attention_backward",
    title="Gradients of attention by hand",
    cases=_backward_cases(),
    forbidden=(
        "torch.autograd",
        "torch.func",
        "torch.Tensor.backward",  # autograd in any form
        "mha_course.attention_backward",
        "mha_course.efficient.gradients.attention_backward",
    ),
)

ASSIGNMENT = Assignment(
    key="a14_attention_backward",
    version=1,
    title="Assignment 14: the backward pass by hand",
    notebook="a14_attention_backward.ipynb",
    exercises=(SOFTMAX_JACOBIAN, ATTENTION_BACKWARD),
)
