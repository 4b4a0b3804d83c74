"""Assignment 08's ``without_head``, grader side: the library's own ablation as the reference, and a
float64 multi-head attention with one head switched off and knobs for the classic mistakes, each
paired with its hint.

Imported only by ``a08_cross_attention``; reference code (torch, the library) is imported inside
the functions, as in every exercise module, so the grader's process stays light until a case runs.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from ..calls import a08_cross_attention as calls
from ..learner import hints


def ablated(inputs, heads):
    """Grader side: the library's own ablation, head_gate[h] = 0, for each h in ``heads``: (len(heads), B, T, E)."""
    import torch

    module = calls.library_module(inputs)
    outs = []
    with torch.no_grad():
        for h in heads:
            module.head_gate.fill_(1.0)
            module.head_gate[h] = 0.0
            out, _ = module(*(torch.from_numpy(inputs[n]) for n in ("query", "key", "value")))
            outs.append(out.numpy())
    return np.stack(outs)


def ref_without(inputs):
    return ablated(inputs, [inputs["head"]])[0]


def ref_every_head(inputs):
    return ablated(inputs, range(inputs["H"]))


def np_without(inputs, head, zero="head", scale=None, out_bias=True, out_proj=True, split="ok", merge="ok"):
    """Grader-side float64 multi-head attention with head ``head`` switched off, and knobs for the mistakes.

    zero: "head" (the right way: zero head h's output before out_proj), "none", "feature" (one feature h
    of the concatenated heads), "token" (row h of the concatenated heads), "after" (head h's features of
    the final output, after out_proj), "uniform" (zeroed queries or keys: head h attends uniformly),
    "v_bias" (zeroed v_proj weights: head h outputs its value bias), "keep_only" (every head but h off).
    """
    from mha_course.core.softmax import softmax_np

    E, H = inputs["E"], inputs["H"]
    D = E // H
    block = slice(head * D, (head + 1) * D)

    def lin(name, x, bias=True):
        y = np.asarray(x, dtype=np.float64) @ inputs[name + ".weight"].astype(np.float64).T
        return y + inputs[name + ".bias"].astype(np.float64) if bias else y

    def split_(x):
        B, T, _ = x.shape
        if split == "no_transpose":
            return x.reshape(B, H, T, D)
        return x.reshape(B, T, H, D).transpose(0, 2, 1, 3)  # (B, H, T, D)

    q, k, v = (split_(lin(p, inputs[n])) for p, n in (("q_proj", "query"), ("k_proj", "key"), ("v_proj", "value")))
    scores = (q @ np.swapaxes(k, -1, -2)) * (1.0 / math.sqrt(D) if scale is None else scale)  # (B, H, T, S)
    if zero == "uniform":
        scores[:, head] = 0.0
    heads = softmax_np(scores, axis=-1) @ v  # (B, H, T, D)
    if zero == "head":
        heads[:, head] = 0.0
    elif zero == "v_bias":
        heads[:, head] = inputs["v_proj.bias"].astype(np.float64)[block]
    elif zero == "keep_only":
        kept = heads[:, head].copy()
        heads[:] = 0.0
        heads[:, head] = kept
    B, _, T, _ = heads.shape
    merged = heads.reshape(B, T, E) if merge == "no_transpose" else heads.transpose(0, 2, 1, 3).reshape(B, T, E)
    if zero == "feature":
        merged[..., head] = 0.0
    elif zero == "token":
        merged[:, head] = 0.0
    out = lin("out_proj", merged, bias=out_bias) if out_proj else merged
    if zero == "after":
        out[..., block] = 0.0
    return out


def without_alternatives(inputs, heads):
    """(wrong output stacked over ``heads``, hint) pairs; the right computation has zero="head"."""
    E, H = inputs["E"], inputs["H"]

    def alt(shift=0, **kw):
        return lambda: np.stack([np_without(inputs, (h + shift) % H, **kw) for h in heads])

    knobs: list[tuple[dict[str, Any], str]] = [
        (dict(zero="none"), "this is the full output: head h is still on"),
        (
            dict(zero="feature"),
            "you zeroed one feature (h .. h+1) of the concatenated heads; head h owns the D "
            "features h*D .. (h+1)*D - 1",
        ),
        (
            dict(zero="token"),
            "you zeroed row h (a token) of the concatenated (B, T, E) heads; head h is the "
            "features h*D .. (h+1)*D - 1 of every token (the last axis)",
        ),
        (
            dict(out_bias=False),
            "out_proj's bias b_O is missing (subtracting out_proj(head h alone) also subtracts "
            "b_O): out = sum over the other heads of head_g W_O^g, plus b_O once",
        ),
        (
            dict(zero="after"),
            "you zeroed head h's features of the output, after out_proj; W_O mixes every head into "
            "every output feature, so zero the head before out_proj",
        ),
        (
            dict(zero="uniform"),
            "head h still contributes: with its queries or keys zeroed it attends uniformly "
            "(softmax of equal scores), it is not switched off; zero the head's output",
        ),
        (
            dict(zero="v_bias"),
            "head h still outputs its value bias b_V: zeroing v_proj's weights leaves the bias; "
            "zero the head's output (after attention) instead",
        ),
        (dict(zero="keep_only"), "you kept only head h and switched the others off; switch off head h alone"),
        (dict(out_proj=False), "out_proj (W_O) is not applied after merging the heads"),
        (
            dict(split="no_transpose", merge="no_transpose"),
            "the heads were split (and merged) without moving the head axis: reshaping straight to "
            "(B, H, T, D) mixes tokens into heads; look at the order of the axes in the split and in the merge",
        ),
        (
            dict(split="no_transpose"),
            "the heads were split without moving the head axis: reshaping straight to (B, H, T, D) mixes tokens "
            "into heads; look at the order of the axes in the split",
        ),
        (
            dict(merge="no_transpose"),
            "merge without transpose: the head axis must be moved back next to D before reshaping to (B, T, E)",
        ),
        (
            dict(scale=1.0 / math.sqrt(E)),
            "the scores are scaled by 1/sqrt(E); each head works in D = E / H dimensions, so scale by 1/sqrt(D)",
        ),
    ]
    found = [(alt(**kw), hint) for kw, hint in knobs]
    if H > 1:
        found += [
            (alt(shift=1), "you switched off head h + 1: heads count from 0"),
            (alt(shift=-1), "you switched off head h - 1: heads count from 0"),
        ]
    return found


def diagnose_without(got, expected, inputs, check_dtype=False):
    return hints.compare(
        got,
        expected,
        "output",
        "[B, T, E]",
        alternatives=[(lambda a=a: a()[0], hint) for a, hint in without_alternatives(inputs, [inputs["head"]])],
        check_dtype=check_dtype,
    )


def diagnose_without_dtype(got, expected, inputs):
    return diagnose_without(got, expected, inputs, check_dtype=True)


def diagnose_every_head(got, expected, inputs):
    hint = hints.compare(
        got, expected, "outputs", "[H, B, T, E]", alternatives=without_alternatives(inputs, list(range(inputs["H"])))
    )
    return None if hint is None else hint + " (the outputs of without_head for h = 0 .. H-1, stacked)"


def without_before(inputs):
    """What without_head_unchanged sends back, as it was before the call: calls.WATCHED, head_gate, query, key, value."""
    gate = np.ones(inputs["H"], dtype=inputs["query"].dtype)  # the module's head_gate, cast like its weights
    return (*(inputs[name] for name in calls.WATCHED), gate, inputs["query"], inputs["key"], inputs["value"])
