"""Assignment 15's float64 twins, grader side: attention of a query block over one K/V block with its
log-sum-exp, the exact merge of partial results, one ring step and a whole ring, each with a
``mode`` that reproduces a classic slip (averaging the blocks, lse as the maximum, the causal mask
in local positions, ...), so that a wrong answer can be named.

Imported only by ``a15_ring_attention``; it needs NumPy alone.
"""

from __future__ import annotations

import math

import numpy as np


def np_attend(q, k, v, visible, scale=None):
    """(out, lse) of q over one block; visible (T, S) bool or None; rows with nothing visible: 0 and -inf."""
    scale = 1.0 / math.sqrt(q.shape[-1]) if scale is None else scale
    s = (q.astype(np.float64) @ np.swapaxes(k, -1, -2).astype(np.float64)) * scale
    if visible is not None:
        s = np.where(visible, s, -np.inf)
    top = s.max(axis=-1, initial=-np.inf)
    shift = np.where(np.isneginf(top), 0.0, top)
    e = np.exp(s - shift[..., None])
    total = e.sum(axis=-1)
    with np.errstate(divide="ignore"):
        lse = np.where(total > 0, np.log(np.where(total > 0, total, 1.0)) + shift, -np.inf)
    return (e / np.where(total > 0, total, 1.0)[..., None]) @ v.astype(np.float64), lse


def np_merge(outs, lses, mode="ok"):
    """The merge in float64; mode names a classic slip."""
    outs, lses = np.asarray(outs, dtype=np.float64), np.asarray(lses, dtype=np.float64)
    top = lses.max(axis=0)
    shift = np.where(np.isneginf(top), 0.0, top)
    w = np.exp(lses - shift)  # (n, ..., T): exp(lse_b - max)
    total = w.sum(axis=0)
    with np.errstate(divide="ignore"):
        lse = np.where(total > 0, np.log(np.where(total > 0, total, 1.0)) + shift, -np.inf)
    merged = (w / np.where(total > 0, total, 1.0))[..., None] * outs  # (n, ..., T, Dv)
    if mode == "average":
        return outs.mean(axis=0), lse
    if mode == "unnormalised":  # the shift by the maximum, but no division by the sum
        return (w[..., None] * outs).sum(axis=0), lse
    if mode == "lse_max":
        return merged.sum(axis=0), top
    if mode == "lse_sum":
        return merged.sum(axis=0), lses.sum(axis=0)
    return merged.sum(axis=0), lse


def np_step(inputs, mode="ok"):
    """One ring step in float64; mode names a classic slip."""
    q, k, v, out, lse = (inputs[n] for n in ("q", "k", "v", "out", "lse"))
    T, S = q.shape[-2], k.shape[-2]
    qo, ko = inputs["q_offset"], inputs["k_offset"]
    visible = None
    if inputs["causal"] and mode != "no_mask":
        rows = np.arange(T)[:, None] + (0 if mode == "local" else qo)
        cols = np.arange(S)[None, :] + (0 if mode == "local" else ko)
        visible = cols < rows if mode == "strict" else cols <= rows
    out_b, lse_b = np_attend(q, k, v, visible, 1.0 if mode == "no_scale" else None)
    if mode == "no_merge":
        return out_b, lse_b
    merged = np_merge([out, out_b], [lse, lse_b])
    return (merged[0], lse) if mode == "old_lse" else merged


def np_ring(inputs, mode="ok"):
    """A whole ring in float64, with ``mode``'s slip in every step; returns the full (out, lse)."""
    q, k, v, W = inputs["q"], inputs["k"], inputs["v"], inputs["world_size"]
    bounds = np.cumsum([0] + [len(c) for c in np.array_split(np.arange(q.shape[-2]), W)])
    outs, lses = [], []
    for r in range(W):
        qa, qb = bounds[r], bounds[r + 1]
        state = {
            "out": np.zeros((*q.shape[:-2], qb - qa, v.shape[-1])),
            "lse": np.full((*q.shape[:-2], qb - qa), -np.inf),
        }
        for step in range(W):
            o = (r - step) % W
            ka, kb = bounds[o], bounds[o + 1]
            step_inputs = {
                "q": q[..., qa:qb, :],
                "k": k[..., ka:kb, :],
                "v": v[..., ka:kb, :],
                "q_offset": int(qa),
                "k_offset": int(ka),
                "causal": inputs["causal"],
                **state,
            }
            state["out"], state["lse"] = np_step(step_inputs, mode)
        outs.append(state["out"])
        lses.append(state["lse"])
    return np.concatenate(outs, axis=-2), np.concatenate(lses, axis=-1)
