"""A deliberately slow float64 reference: attention written as plain loops over every index.

Nothing here is vectorised, so it shares no code path (and no bug) with the fast versions it
checks. Use it on small sizes only.
"""

from __future__ import annotations

import math

import torch

from ..validation import broadcast_shapes


def attention_loop_reference(
    q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, mask: torch.Tensor | None = None, scale: float | None = None
) -> tuple[torch.Tensor, torch.Tensor]:
    """Float64 attention by explicit loops, with the course's conventions.

    Args:
        q: (..., T, D), k: (..., S, D), v: (..., S, Dv); leading dims broadcast (as in the fast version).
        mask: optional bool (True = may attend) or float (added), broadcastable to (..., T, S).
        scale: default 1/sqrt(D).

    Returns:
        out (..., T, Dv) and weights (..., T, S) in float64; fully masked rows are zeros.

    Raises:
        RuntimeError (from torch): shapes that do not broadcast. It checks nothing itself, so that it
            shares no code with the functions it tests: give it valid, small inputs.
    """
    q64, k64, v64 = (x.detach().to(torch.float64).cpu() for x in (q, k, v))
    T, D = q64.shape[-2:]
    S, Dv = v64.shape[-2], v64.shape[-1]
    scale = 1.0 / math.sqrt(D) if scale is None else scale
    lead_shapes = [q64.shape[:-2], k64.shape[:-2], v64.shape[:-2]]
    if mask is not None:
        mask = mask.detach().cpu()
        lead_shapes.append(mask.shape[:-2])
    lead = broadcast_shapes(*lead_shapes)
    q64, k64, v64 = q64.expand(*lead, T, D), k64.expand(*lead, S, D), v64.expand(*lead, S, Dv)
    if mask is not None:
        mask = mask.expand(*lead, T, S)
    q2, k2, v2 = q64.reshape(-1, T, D), k64.reshape(-1, S, D), v64.reshape(-1, S, Dv)  # (N, ., .)
    m2 = None if mask is None else mask.reshape(-1, T, S)  # (N, T, S)
    out = torch.zeros(q2.shape[0], T, Dv, dtype=torch.float64)
    weights = torch.zeros(q2.shape[0], T, S, dtype=torch.float64)
    for n in range(q2.shape[0]):
        for i in range(T):
            scores = []
            for j in range(S):
                s = sum(float(q2[n, i, d]) * float(k2[n, j, d]) for d in range(D)) * scale
                if m2 is not None:
                    if m2.dtype == torch.bool:
                        s = s if bool(m2[n, i, j]) else -math.inf
                    else:
                        s += float(m2[n, i, j])
                scores.append(s)
            top = max(scores)
            if top == -math.inf:
                continue  # every key masked: zero weights, zero output
            exps = [math.exp(s - top) for s in scores]
            total = sum(exps)
            for j in range(S):
                weights[n, i, j] = exps[j] / total
                for d in range(Dv):
                    out[n, i, d] += weights[n, i, j] * float(v2[n, j, d])
    return out.reshape(*lead, T, Dv), weights.reshape(*lead, T, S)
