"""Assignment 12 (chapter 12): the online softmax, then tiled (FlashAttention-style) attention.

    online_softmax_update(m, l, x_block) -> (m_new, l_new, correction)
        m_new = max(m, max_j x_block_j);  l_new = l * exp(m - m_new) + sum_j exp(x_block_j - m_new)
        correction = exp(m - m_new): what rescales the old sum (and, in tiled attention, the accumulator)
    tiled_attention(q, k, v, block_size, causal=False) -> out (..., T, Dv)
        softmax(q k^T / sqrt(D)) v, one (block_size x block_size) tile of scores at a time

The cases use T that is not a multiple of the block, T != S, block size 1 and the causal mask
(top-left: query i sees keys j <= i). Diagnoses recognise the classic slips: forgetting to rescale
the accumulator when the maximum grows, no 1/sqrt(D), the causal mask ignored or shifted.
"""

from __future__ import annotations

import math

import numpy as np

from ..calls import a12_tiled_attention as calls
from ..engine import case_inputs
from ..learner import hints
from ..spec import Assignment, Case, Exercise

# --- inputs ---------------------------------------------------------------------------------------


def _rows(*, R, S, block, seed, magnitude=1.0, masked=False):
    def make():
        rng = case_inputs.rng(seed)
        x = rng.standard_normal((R, S)) * magnitude
        if masked:
            x[0, : S // 2] = -np.inf  # the first row starts with masked scores
        return {"x": x, "block": block}

    return make


def _qkv(lead=(), *, T, S, D, Dv, block, causal=False, seed, dtype=np.float64, magnitude=1.0):
    def make():
        rng = case_inputs.rng(seed)
        return {
            "q": (rng.standard_normal((*lead, T, D)) * magnitude).astype(dtype),
            "k": rng.standard_normal((*lead, S, D)).astype(dtype),
            "v": rng.standard_normal((*lead, S, Dv)).astype(dtype),
            "block": block,
            "causal": causal,
        }

    return make


# --- reference and diagnose (grader) ---------------------------------------------------------------


def _running_max(inputs):
    """(blocks, R): each row's maximum after each block (-inf while a row has seen only -inf)."""
    x, block = inputs["x"], inputs["block"]
    return np.maximum.accumulate(np.stack([x[:, j0 : j0 + block].max(axis=-1) for j0 in range(0, x.shape[-1], block)]))


def _ref_update(inputs):
    """(m, l, corrections (blocks, R)); a row that has seen only -inf gets correction 1 (any finite one will do)."""
    x = inputs["x"]
    m = x.max(axis=-1)
    safe = np.where(np.isneginf(m), 0.0, m)
    m_after = _running_max(inputs)  # (blocks, R)
    m_before = np.concatenate([np.full((1, x.shape[0]), -np.inf), m_after[:-1]])
    with np.errstate(invalid="ignore"):
        corrections = np.where(
            np.isneginf(m_after), 1.0, np.exp(m_before - np.where(np.isneginf(m_after), 0.0, m_after))
        )
    return m, np.exp(x - safe[..., None]).sum(axis=-1), corrections


def _ref_tiled(inputs):
    import torch

    from mha_course.efficient.tiled.forward import tiled_attention

    q, k, v = (torch.from_numpy(inputs[n]) for n in "qkv")
    return tiled_attention(q, k, v, inputs["block"], causal=inputs["causal"]).numpy()


def _attend(q, k, v, scale, allowed=None):
    """float64 attention; allowed (T, S) bool or None."""
    scores = (q.astype(np.float64) @ np.swapaxes(k, -1, -2).astype(np.float64)) * scale
    if allowed is not None:
        scores = np.where(allowed, scores, -np.inf)
    top = scores.max(axis=-1, keepdims=True)
    w = np.exp(scores - np.where(np.isfinite(top), top, 0.0))
    total = w.sum(axis=-1, keepdims=True)
    return (w / np.where(total > 0, total, 1.0)) @ v.astype(np.float64)


def _tiled_no_rescale(q, k, v, block, causal):
    """The classic slip: the accumulator is never multiplied by exp(m_old - m_new)."""
    T, S, D = q.shape[-2], k.shape[-2], q.shape[-1]
    out = np.zeros((*q.shape[:-1], v.shape[-1]))
    for i0 in range(0, T, block):
        qb = q[..., i0 : i0 + block, :].astype(np.float64)
        rows = np.arange(i0, i0 + qb.shape[-2])
        m = np.full(qb.shape[:-1], -np.inf)
        l = np.zeros(qb.shape[:-1])
        acc = np.zeros((*qb.shape[:-1], v.shape[-1]))
        for j0 in range(0, S, block):
            s = qb @ np.swapaxes(k[..., j0 : j0 + block, :], -1, -2) / math.sqrt(D)
            if causal:
                s = np.where(np.arange(j0, j0 + s.shape[-1])[None, :] <= rows[:, None], s, -np.inf)
            m_new = np.maximum(m, s.max(axis=-1))
            safe = np.where(np.isneginf(m_new), 0.0, m_new)
            corr = np.where(np.isneginf(m), 0.0, np.exp(m - safe))
            p = np.exp(s - safe[..., None])
            l = l * corr + p.sum(axis=-1)
            acc = acc + p @ v[..., j0 : j0 + block, :]  # missing: acc * corr
            m = m_new
        out[..., i0 : i0 + block, :] = acc / np.where(l > 0, l, 1.0)[..., None]
    return out


def _diagnose_update(got, expected, inputs):
    arrays, hint = hints.unpack(got, calls.NAMES)
    if hint:
        return hint
    m, l, corrections = arrays
    hint = hints.compare(m, expected[0], "m (running max)", "[rows]")
    if hint:
        return hint
    hint = _diagnose_l(l, expected[1], inputs)
    return hint or _diagnose_corrections(corrections, expected[2], inputs)


def _diagnose_l(l, expected, inputs):
    x = inputs["x"]
    no_rescale = np.zeros(x.shape[0])
    m_run = np.full(x.shape[0], -np.inf)
    for j0 in range(0, x.shape[-1], inputs["block"]):
        blk = x[:, j0 : j0 + inputs["block"]]
        m_run = np.maximum(m_run, blk.max(axis=-1))
        no_rescale = no_rescale + np.exp(blk - np.where(np.isneginf(m_run), 0.0, m_run)[:, None]).sum(-1)
    alternatives = [
        (lambda: no_rescale, "the old sum l is not rescaled: multiply it by exp(m - m_new) when the maximum grows"),
        (
            lambda: np.exp(x).sum(axis=-1),
            "l is sum(exp(x)) without subtracting the maximum: each term must be shifted by the running maximum",
        ),
    ]
    return hints.compare(l, expected, "l (running sum)", "[rows]", alternatives=alternatives)


def _diagnose_corrections(corrections, expected, inputs):
    """The corrections of every block, (blocks, R); where a row has seen only -inf any finite value is right."""
    what = "correction"
    if corrections.shape != expected.shape:
        return hints.shape_hint(corrections, expected, what, "[block, row]: one (R,) correction per block")
    seen_nothing = np.isneginf(_running_max(inputs))
    if np.isnan(corrections[seen_nothing]).any():
        return (
            "correction: NaN for a row that has seen only -inf (exp(-inf - (-inf))): shift by 0 there, as for l "
            "(any finite value works: nothing has been summed yet)"
        )
    corrections = np.where(seen_nothing & np.isfinite(corrections), expected, corrections)
    m_after = _running_max(inputs)
    m_before = np.concatenate([np.full((1, m_after.shape[1]), -np.inf), m_after[:-1]])
    with np.errstate(over="ignore", invalid="ignore"):
        upside_down = np.exp(m_after - m_before)  # inf after the first block
    alternatives = [  # compared where a row has seen a score: elsewhere any value of the learner's matches
        (
            np.where(seen_nothing, corrections, upside_down),
            "upside down: exp(m - m_new), old maximum minus new, is at most 1",
        ),
        (
            np.where(seen_nothing, corrections, 1.0),
            "always 1: it must be exp(m - m_new), below 1 when the maximum grows",
        ),
    ]
    return hints.compare(corrections, expected, what, "[block, row]", alternatives=alternatives)


def _diagnose_tiled(got, expected, inputs):
    q, k, v, block, causal = (inputs[n] for n in ("q", "k", "v", "block", "causal"))
    T, S, D = q.shape[-2], k.shape[-2], q.shape[-1]
    scale = 1.0 / math.sqrt(D)
    tril = np.arange(S)[None, :] <= np.arange(T)[:, None]
    alternatives = [
        (
            lambda: _tiled_no_rescale(q, k, v, block, causal),
            "the accumulator is not rescaled: when the running max grows, multiply acc (and l) by "
            "exp(m_old - m_new) before adding the new block",
        ),
        (
            lambda: _attend(q, k, v, 1.0, tril if causal else None),
            "the scores are not scaled: multiply q k^T by 1/sqrt(D)",
        ),
    ]
    if causal:
        alternatives += [
            (
                lambda: _attend(q, k, v, scale),
                "the causal mask is ignored: key j is hidden from query i when j > i (also inside the diagonal tiles)",
            ),
            (
                lambda: _attend(q, k, v, scale, np.arange(S)[None, :] < np.arange(T)[:, None]),
                "the causal mask hides the diagonal: query i may attend key i (j <= i)",
            ),
        ]
    else:
        alternatives.append(
            (lambda: _attend(q, k, v, scale, tril), "you applied a causal mask although causal is False")
        )
    dtype = np.float32 if q.dtype == np.float32 else None
    return hints.compare(got, expected, "out", "[..., T, Dv]", alternatives=alternatives, check_dtype=True, dtype=dtype)


def _update_cases():
    def update(name, points, hidden=False, **rows):
        # rows: _rows' keywords: R rows of S scores, read ``block`` at a time
        return Case(name, points, _rows(**rows), calls.online_softmax_update, _ref_update, _diagnose_update, hidden)

    return (
        update("one block: m = max, l = sum exp(x - m)", 1, R=3, S=8, block=8, seed=0),
        update("several blocks (S = 20, block 6)", 2, R=4, S=20, block=6, seed=1, magnitude=3.0),
        update("block size 1", 1, R=2, S=9, block=1, seed=2),
        update("a row that starts masked (-inf)", 1, R=3, S=12, block=4, seed=3, masked=True),
        update("large scores (|x| ~ 500): no overflow", 1, R=2, S=16, block=5, seed=4, magnitude=300.0, hidden=True),
    )


def _tiled_cases():
    def tiled(name, points, inputs, hidden=False):
        # the output's dtype is always judged (float32 in, float32 out)
        return Case(name, points, inputs, calls.tiled_attention, _ref_tiled, _diagnose_tiled, hidden)

    return (
        tiled("T = S = 8, block 4 (T a multiple of the block)", 2, _qkv(T=8, S=8, D=4, Dv=4, block=4, seed=0)),
        tiled("T = 10 not a multiple of block 4, S = 13, Dv != D", 2, _qkv(T=10, S=13, D=4, Dv=3, block=4, seed=1)),
        tiled("causal, T = S = 11, block 4", 2, _qkv(T=11, S=11, D=8, Dv=8, block=4, causal=True, seed=2)),
        tiled("block size 1", 1, _qkv(T=5, S=6, D=4, Dv=4, block=1, seed=3)),
        tiled("(B, H, T, D) inputs, block 3", 1, _qkv((2, 2), T=7, S=9, D=4, Dv=4, block=3, causal=True, seed=4)),
        tiled(
            "causal with T != S (T = 6, S = 10)",
            1,
            _qkv((2,), T=6, S=10, D=4, Dv=4, block=4, causal=True, seed=5),
            hidden=True,
        ),
        tiled(
            "large scores: the running max must grow safely",
            1,
            _qkv(T=9, S=16, D=8, Dv=8, block=4, seed=6, magnitude=30.0),
            hidden=True,
        ),
        tiled(
            "float32 in, float32 out",
            1,
            _qkv((2,), T=12, S=12, D=8, Dv=8, block=5, causal=True, seed=7, dtype=np.float32),
            hidden=True,
        ),
    )


ONLINE_UPDATE = Exercise(
    key="online_softmax_update",
    target="online_softmax_update",
    title="One step of the online softmax",
    cases=_update_cases(),
    forbidden=(
        "mha_course.efficient.online_softmax.online_softmax_update",
        "torch.logsumexp",
        "torch.softmax",
        "torch.nn.functional.softmax",
        "torch.Tensor.softmax",
        "torch.Tensor.logsumexp",
        "torch.log_softmax",
        "torch.nn.functional.log_softmax",
        "torch.Tensor.log_softmax",
        "torch.special.logsumexp",
    ),
)

TILED = Exercise(
    key="tiled_attention",
    target="tiled_attention",
    title="Tiled attention with the online softmax",
    cases=_tiled_cases(),
    forbidden=(
        "torch.nn.functional.scaled_dot_product_attention",
        "mha_course.tiled_attention",
        "mha_course.efficient.tiled.forward.tiled_attention",
        "mha_course.scaled_dot_product_attention",
        "mha_course.core.attention.scaled_dot_product_attention",
        "mha_course.efficient.online_softmax.online_softmax_attention",
        "mha_course.triton_attention",
        "mha_course.kernels.triton_attention",
        "mha_course.kernels.function.triton_attention",
    ),
)

ASSIGNMENT = Assignment(
    key="a12_tiled_attention",
    version=2,  # 2: online_softmax_update returns (m_new, l_new, correction), as the library's does
    title="Assignment 12: the online softmax and tiled attention",
    notebook="a12_tiled_attention.ipynb",
    exercises=(ONLINE_UPDATE, TILED),
)
