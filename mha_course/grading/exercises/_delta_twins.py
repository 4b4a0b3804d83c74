"""Assignment 17's float64 twins of the gated delta rule, grader side: the usual wrong steps (the sign of the
read-back, the decay missing, by g instead of exp(g), before the read or after the write, beta missing, no
read-back at all), each with the hint that names it, and a runner that applies a step to every token in turn,
so that a wrong state can be named after one token or after many.

Imported only by ``a17_newest_attention``; it needs NumPy alone. State (B, H, Dk, Dv), k (B, H, Dk),
v (B, H, Dv), beta and g (B, H).
"""

from __future__ import annotations

import numpy as np


def _recalled(k, state):
    """k^T S: what the state (B, H, Dk, Dv) returns for key k (B, H, Dk), (B, H, Dv)."""
    return (k[..., :, None] * state).sum(axis=-2)


def _write(k, x):
    """The outer product k x^T, (B, H, Dk, Dv)."""
    return k[..., :, None] * x[..., None, :]


def _alpha(g):
    return np.exp(g)[..., None, None]


# (step, hint): a wrong step S' = step(S, k, v, beta, g), beta and g (B, H) broadcast here
WRONG_STEPS = [
    (
        lambda S, k, v, b, g: _alpha(g) * S + b[..., None, None] * _write(k, v + _recalled(k, _alpha(g) * S)),
        "you added what the state recalls for k: the delta rule subtracts it, and writes beta times the "
        "error, v minus what the decayed state recalls for k",
    ),
    (
        lambda S, k, v, b, g: S + b[..., None, None] * _write(k, v - _recalled(k, S)),
        "the state was never decayed: multiply it by the gate alpha = exp(g) before reading and writing",
    ),
    (
        lambda S, k, v, b, g: (
            g[..., None, None] * S + b[..., None, None] * _write(k, v - _recalled(k, g[..., None, None] * S))
        ),
        "g is the logarithm of the gate: decay the state by alpha = exp(g), not by g",
    ),
    (
        lambda S, k, v, b, g: _alpha(g) * S + b[..., None, None] * _write(k, v - _recalled(k, S)),
        "you read what k recalls from the state before its decay: decay first, then read and write",
    ),
    (
        lambda S, k, v, b, g: _alpha(g) * (S + b[..., None, None] * _write(k, v - _recalled(k, S))),
        "you decayed the state after the write: the gate decays the old state, and the new write is kept whole",
    ),
    (
        lambda S, k, v, b, g: _alpha(g) * S + _write(k, v - _recalled(k, _alpha(g) * S)),
        "the write is not scaled by beta: add beta times the error",
    ),
    (
        lambda S, k, v, b, g: _alpha(g) * S + b[..., None, None] * _write(k, v),
        "you wrote v without removing what k already recalls: that is gated linear attention; "
        "the delta rule writes the error, v minus the recalled value",
    ),
]


def run_steps(step, inputs):
    k, v, b, g = (inputs[n] for n in ("k", "v", "beta", "g"))
    B, H, T, Dk = k.shape
    S = np.zeros((B, H, Dk, v.shape[-1]))
    for t in range(T):
        S = step(S, k[:, :, t], v[:, :, t], b[:, :, t], g[:, :, t])
    return S
