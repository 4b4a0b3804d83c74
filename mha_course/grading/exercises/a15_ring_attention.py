"""Assignment 15 (chapter 15): attention across devices, graded in one process.

    merge_partial_attention(outs, lses) -> (out, lse)
        lse = log sum_b exp(lse_b),   out = sum_b exp(lse_b - lse) out_b
        a block with lse_b = -inf counts for nothing; a row where every block is -inf: out 0, lse -inf
    ring_step(q, k, v, out, lse, q_offset, k_offset, causal=False) -> (out, lse)
        attention of q over one K/V block (causal: key k_offset + j visible to query q_offset + i
        when k_offset + j <= q_offset + i), merged into the running (out, lse)

The ring cases also run a whole ring of W "ranks" as a loop in the sandbox (no process group is
needed to grade). Diagnoses name the usual slips: averaging the blocks, forgetting to normalise the
weights, lse taken as the maximum or the sum, NaN for a query that sees no key, the block not merged
into the running result, the causal mask ignored, compared in local instead of global positions, or
made strict, and the missing 1/sqrt(D).
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from ..calls import a15_ring_attention as calls
from ..engine import case_inputs
from ..learner import hints
from ..spec import Assignment, Case, Exercise
from ._ring_twins import np_attend, np_merge, np_ring, np_step

# --- inputs ---------------------------------------------------------------------------------------


def _partials(lead=(), *, n, T, Dv, seed, empty_block=False, empty_rows=False, offset=0.0, dtype=np.float64):
    """n partial results (outs (n, ..., T, Dv), lses (n, ..., T)); optionally a block or rows with no visible key.

    ``offset`` shifts every lse: at 800, exp(lse_b) overflows float64 while the blocks stay within a few
    units of each other, so that taking the largest lse_b for the merged one, or leaving the weights
    unnormalised, is wrong on every draw (lses spread by hundreds let one block dominate, and such bugs
    passed on most draws).
    """

    def make():
        rng = case_inputs.rng(seed)
        outs = rng.standard_normal((n, *lead, T, Dv))
        lses = rng.standard_normal((n, *lead, T)) * 2.0 + offset
        if empty_block:
            lses[1] = -np.inf
        if empty_rows:
            lses[:, ..., 1] = -np.inf  # query 1 sees no key in any block
        outs[np.isneginf(lses)] = 0.0  # the convention for a block in which a query sees nothing
        return {"outs": outs.astype(dtype), "lses": lses.astype(dtype)}

    return make


def _step(lead=(), *, T, S, D, Dv, q_offset, k_offset, causal=False, seed, fresh=False, dtype=np.float64):
    """q (..., T, D) at q_offset.., one K/V block at k_offset.., and a running (out, lse) from an earlier block."""

    def make():
        rng = case_inputs.rng(seed)
        q, k, v = (rng.standard_normal((*lead, n, d)) for n, d in ((T, D), (S, D), (S, Dv)))
        if fresh:
            out, lse = np.zeros((*lead, T, Dv)), np.full((*lead, T), -np.inf)
        else:  # what the queries saw in an earlier block of 5 keys, always visible
            out, lse = np_attend(q, rng.standard_normal((*lead, 5, D)), rng.standard_normal((*lead, 5, Dv)), None)
        return {
            "q": q.astype(dtype),
            "k": k.astype(dtype),
            "v": v.astype(dtype),
            "out": out.astype(dtype),
            "lse": lse.astype(dtype),
            "q_offset": q_offset,
            "k_offset": k_offset,
            "causal": causal,
        }

    return make


def _ring(lead=(), *, T, D, Dv, world_size, causal=False, seed, dtype=np.float64):
    def make():
        rng = case_inputs.rng(seed)
        q, k, v = (rng.standard_normal((*lead, T, d)).astype(dtype) for d in (D, D, Dv))
        return {"q": q, "k": k, "v": v, "world_size": world_size, "causal": causal}

    return make


# --- references (the float64 twins with their slips are in ._ring_twins) ----------------------------


def _ref_merge(inputs):
    import torch

    from mha_course.parallel.merge import merge_partial_attention

    outs = [torch.from_numpy(x) for x in inputs["outs"]]
    lses = [torch.from_numpy(x) for x in inputs["lses"]]
    return tuple(t.numpy() for t in merge_partial_attention(outs, lses))


def _ref_step(inputs):
    import torch

    from mha_course.parallel.ring import ring_step

    t = {n: torch.from_numpy(inputs[n]) for n in ("q", "k", "v", "out", "lse")}
    result = ring_step(
        t["q"], t["k"], t["v"], t["out"], t["lse"], inputs["q_offset"], inputs["k_offset"], inputs["causal"]
    )
    return tuple(x.numpy() for x in result)


def _ref_ring(inputs):
    import torch

    from mha_course.parallel.ring import ring_step

    q, k, v = (torch.from_numpy(inputs[n]) for n in "qkv")
    blocks = torch.arange(q.shape[-2]).tensor_split(inputs["world_size"])  # (T_r,) positions of each rank
    outs: list[torch.Tensor] = []
    lses: list[torch.Tensor] = []
    for rows in blocks:
        out = torch.zeros(*q.shape[:-2], len(rows), v.shape[-1], dtype=q.dtype)
        lse = torch.full((*q.shape[:-2], len(rows)), -math.inf, dtype=q.dtype)
        rank = len(outs)
        for step in range(len(blocks)):
            cols = blocks[(rank - step) % len(blocks)]
            out, lse = ring_step(
                q[..., rows, :],
                k[..., cols, :],
                v[..., cols, :],
                out,
                lse,
                int(rows[0]),
                int(cols[0]),
                inputs["causal"],
            )
        outs.append(out)
        lses.append(lse)
    return torch.cat(outs, dim=-2).numpy(), torch.cat(lses, dim=-1).numpy()


# --- diagnoses (grader) ----------------------------------------------------------------------------

_LEGENDS = ("[..., T, Dv]", "[..., T]")
_NAN_ROW = (
    "a query with no visible key gives NaN: exp(-inf - (-inf)) is NaN; where lse = -inf, shift by 0 "
    "(or use torch.where) so that such a row gets out = 0 and lse = -inf"
)


def _nan_where_nothing_visible(got, expected) -> str | None:
    arrays, _ = hints.unpack(got, ("out", "lse"))
    if arrays is None or arrays[0].shape != np.shape(expected[0]):
        return None
    nothing = np.isneginf(np.asarray(expected[1], dtype=np.float64))
    if nothing.any() and np.isnan(np.asarray(arrays[0], dtype=np.float64)[nothing]).any():
        return _NAN_ROW
    return None


def _diagnose_merge(got, expected, inputs):
    hint = _nan_where_nothing_visible(got, expected)
    if hint:
        return hint
    outs, lses = inputs["outs"], inputs["lses"]
    if np.nanmax(lses, initial=-np.inf) > 100:
        arrays, _ = hints.unpack(got, ("out", "lse"))
        if arrays is not None and not all(
            np.isfinite(a[np.isfinite(e)]).all()
            for a, e in zip(arrays, expected, strict=True)
            if a.shape == np.shape(e)
        ):
            return (
                "exp(lse_b) overflows for large lse_b (e.g. 800): subtract the largest lse_b first (exp(lse_b - max))"
            )

    def alt(mode, part):
        return lambda: np_merge(outs, lses, mode)[part]

    out_alts = [
        (
            alt("average", 0),
            "you averaged the blocks' outputs: weight block b by exp(lse_b - lse), lse = log sum_b exp(lse_b)",
        ),
        (
            alt("unnormalised", 0),
            "the weights exp(lse_b - max) do not sum to 1: they must be divided by their sum",
        ),
    ]
    lse_alts = [
        (
            alt("lse_max", 1),
            "lse is the largest lse_b; the merged lse is log(sum_b exp(lse_b)) (torch.logsumexp over blocks)",
        ),
        (alt("lse_sum", 1), "lse is the sum of the lse_b: they are logarithms, so add their exponentials, not them"),
    ]
    dtype = np.float32 if outs.dtype == np.float32 else None
    return hints.compare_pair(
        got, expected, ("out", "lse"), _LEGENDS, (out_alts, lse_alts), check_dtype=True, dtype=dtype
    )


_STEP_SLIPS = (
    (
        "no_merge",
        "you returned this block's own result: merge it into the running (out, lse) with merge_partial_attention",
    ),
    ("old_lse", "out is right but lse is the old one: return the merged lse too"),
    ("no_scale", "the scores are not scaled: multiply q k^T by 1/sqrt(D)"),
    (
        "no_mask",
        "the causal mask is ignored: key k_offset + j is hidden from query q_offset + i when k_offset + j > q_offset + i",
    ),
    (
        "local",
        "the causal mask compares local indices (j <= i): compare global positions, k_offset + j <= q_offset + i",
    ),
    ("strict", "the causal mask hides the diagonal: a query may attend the key at its own position (<=, not <)"),
)


_NAN_BLOCK = (
    "NaN where the expected output is finite: a query that sees no key of this block (a block in its "
    "future) gets exp(-inf - (-inf)) = NaN, and the merge's weight 0 times NaN is still NaN; where "
    "lse_b = -inf shift by 0 instead, so that such a query gets out_b = 0 and lse_b = -inf"
)


def _diagnose_with(simulate):
    def diagnose(got, expected, inputs):
        hint = _nan_where_nothing_visible(got, expected)
        if hint:
            return hint
        arrays, _ = hints.unpack(got, ("out", "lse"))
        if (
            inputs["causal"]
            and arrays is not None
            and arrays[0].shape == np.shape(expected[0])
            and np.isnan(arrays[0].astype(np.float64)).any()
            and not np.isnan(expected[0]).any()
        ):
            return _NAN_BLOCK
        slips = [(m, h) for m, h in _STEP_SLIPS if inputs["causal"] or m not in ("no_mask", "local", "strict")]
        out_alts: list[tuple[Any, str]] = [
            ((lambda m=m: simulate(inputs, m)[0]), h) for m, h in slips if m != "old_lse"
        ]
        lse_alts: list[tuple[Any, str]] = [
            ((lambda m=m: simulate(inputs, m)[1]), h) for m, h in slips if m != "old_lse"
        ]
        if "lse" in inputs and not np.isneginf(inputs["lse"]).all():  # with an empty state the old lse is all -inf
            lse_alts.append(((lambda: simulate(inputs, "old_lse")[1]), dict(_STEP_SLIPS)["old_lse"]))
        dtype = np.float32 if inputs["q"].dtype == np.float32 else None
        return hints.compare_pair(
            got, expected, ("out", "lse"), _LEGENDS, (out_alts, lse_alts), check_dtype=True, dtype=dtype
        )

    return diagnose


_diagnose_step = _diagnose_with(np_step)
_diagnose_ring = _diagnose_with(np_ring)


def _merge_cases():
    def case(name, points, make, hidden=False):
        return Case(name, points, make, calls.merge_partial_attention, _ref_merge, _diagnose_merge, hidden=hidden)

    return (
        case("two blocks, T = 5, Dv = 3", 2, _partials(n=2, T=5, Dv=3, seed=0)),
        case("four blocks, (B, H, T, Dv) = (2, 3, 4, 5)", 2, _partials((2, 3), n=4, T=4, Dv=5, seed=1)),
        case(
            "a block with no visible key (lse = -inf) counts for nothing",
            2,
            _partials((2,), n=3, T=4, Dv=3, seed=2, empty_block=True),
        ),
        case(
            "a query with no visible key in any block: out = 0, lse = -inf",
            1,
            _partials(n=2, T=3, Dv=4, seed=3, empty_rows=True),
        ),
        case("one block: returned as it is", 1, _partials((2,), n=1, T=4, Dv=3, seed=4), hidden=True),
        case("log-sum-exps near 800: no overflow", 1, _partials(n=3, T=4, Dv=2, seed=5, offset=800.0), hidden=True),
        case("float32 in, float32 out", 1, _partials((2,), n=3, T=6, Dv=4, seed=6, dtype=np.float32), hidden=True),
    )


def _step_cases():
    def step(name, points, make, hidden=False):
        return Case(name, points, make, calls.ring_step, _ref_step, _diagnose_step, hidden=hidden)

    def ring(name, points, make, hidden=False):
        return Case(name, points, make, calls.ring_simulation, _ref_ring, _diagnose_ring, hidden=hidden)

    # q at positions q_offset.., the block's keys at k_offset..
    return (
        step(
            "first step: empty running state (out = 0, lse = -inf)",
            2,
            _step(T=4, S=6, D=8, Dv=5, q_offset=0, k_offset=0, seed=0, fresh=True),
        ),
        step(
            "a later step: merged into the running result, (B, H)",
            2,
            _step((2, 2), T=4, S=6, D=8, Dv=5, q_offset=0, k_offset=6, seed=1),
        ),
        step(
            "causal, the block on the diagonal (q_offset = k_offset = 4)",
            2,
            _step((2,), T=5, S=5, D=8, Dv=8, q_offset=4, k_offset=4, causal=True, seed=2),
        ),
        step(
            "causal, a block wholly in the past",
            1,
            _step(T=4, S=3, D=8, Dv=6, q_offset=6, k_offset=0, causal=True, seed=3),
        ),
        step(
            "causal, a block wholly in the future: nothing changes",
            1,
            _step(T=4, S=3, D=8, Dv=6, q_offset=0, k_offset=6, causal=True, seed=4),
        ),
        ring(
            "a whole ring of 3 ranks, causal, T = 10",
            2,
            _ring((2,), T=10, D=8, Dv=6, world_size=3, causal=True, seed=5),
        ),
        step(
            "causal, queries 3..8 and keys 5..10 overlap",
            1,
            _step(T=6, S=6, D=8, Dv=4, q_offset=3, k_offset=5, causal=True, seed=6),
            hidden=True,
        ),
        ring(
            "a whole ring of 4 ranks, float32",
            1,
            _ring((2, 2), T=9, D=8, Dv=4, world_size=4, seed=7, dtype=np.float32),
            hidden=True,
        ),
    )


_LIBRARY = ("mha_course.parallel.merge_partial_attention", "mha_course.parallel.merge.merge_partial_attention")

MERGE = Exercise(
    key="merge_partial_attention",
    target="merge_partial_attention",
    title="Merge partial attention through the log-sum-exp",
    cases=_merge_cases(),
    forbidden=_LIBRARY,
)

RING_STEP = Exercise(
    key="ring_step",
    target="ring_step",
    title="One step of ring attention",
    cases=_step_cases(),
    forbidden=(
        *_LIBRARY,
        "mha_course.parallel.ring_step",
        "mha_course.parallel.ring.ring_step",
        "mha_course.parallel.attention_with_lse",
        "mha_course.parallel.merge.attention_with_lse",
        "mha_course.tiled_attention",
        "mha_course.efficient.tiled.forward.tiled_attention",
    ),
)

ASSIGNMENT = Assignment(
    key="a15_ring_attention",
    version=1,
    title="Assignment 15: attention across devices (merging partial results, one ring step)",
    notebook="a15_ring_attention.ipynb",
    exercises=(MERGE, RING_STEP),
)
