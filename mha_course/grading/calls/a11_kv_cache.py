"""Calls of assignment 11 (a KV-cache decoding step), run in the submission sandbox; see the package docstring."""

from __future__ import annotations

import numpy as np

from ..inside.convert import returned, to_numpy

# The names of kv_decode_step's three results, in order (also the diagnoses' names for them).
NAMES = ("out", "k_cache", "v_cache")


def _unpack_step(result):
    return returned(result, NAMES, "kv_decode_step")


def kv_decode_step(target, inputs):
    """One ``kv_decode_step(q, k_new, v_new, k_cache, v_cache)`` -> (out, k_cache, v_cache)."""
    import torch

    args = [torch.from_numpy(inputs[n].copy()) for n in ("q", "k_new", "v_new", "k_cache", "v_cache")]
    out, k_cache, v_cache = _unpack_step(target(*args))
    return tuple(to_numpy(x, name) for x, name in zip((out, k_cache, v_cache), NAMES, strict=True))


def kv_decode_sequence(target, inputs):
    """Decode all N positions one at a time; return (outputs (B, H, N, D), final k_cache, v_cache)."""
    import torch

    q, k, v = (torch.from_numpy(inputs[n].copy()) for n in "qkv")
    B, G, N, D = k.shape
    k_cache, v_cache = k[:, :, :0].clone(), v[:, :, :0].clone()  # (B, G, 0, D): empty
    outs = []
    for t in range(N):
        out, k_cache, v_cache = _unpack_step(
            target(q[:, :, t : t + 1], k[:, :, t : t + 1], v[:, :, t : t + 1], k_cache, v_cache)
        )
        outs.append(to_numpy(out, f"out of step {t}"))
    shapes = {o.shape for o in outs}
    if len(shapes) != 1:
        raise ValueError(f"out changed shape between steps: {sorted(shapes)}")
    return np.concatenate(outs, axis=2), to_numpy(k_cache, "k_cache"), to_numpy(v_cache, "v_cache")
