"""Calls of assignment 16 (ALiBi slopes, RoPE layout conversion, a paged-cache lookup), run in the
submission's sandbox: NumPy in, NumPy out."""

from __future__ import annotations

from ..inside.convert import tensor_to_numpy, to_numpy, with_inputs_after


def alibi_slopes(target, inputs):
    """``alibi_slopes(H)``: a (H,) torch tensor."""
    return tensor_to_numpy(target(int(inputs["H"])), "the slopes")


def to_rotate_half(target, inputs):
    """``to_rotate_half(weight, num_heads)`` on a copy of the (H*D, E) weight or (H*D,) bias."""
    import torch

    return tensor_to_numpy(target(torch.from_numpy(inputs["weight"].copy()), int(inputs["H"])), "the converted weight")


def to_rotate_half_unchanged(target, inputs):
    """``to_rotate_half(weight, num_heads)``, and the weight as it is after the call."""
    import torch

    weight = torch.from_numpy(inputs["weight"].copy())
    return with_inputs_after(tensor_to_numpy(target(weight, int(inputs["H"])), "the converted weight"), [weight])


def rotated_scores(target, inputs):
    """Scores of queries and keys projected by the converted W_Q, W_K and rotated in the rotate-half layout.

    Returns (T, T) scores for head 0; they must equal the interleaved layout's with the original weights.
    """
    import torch

    H = int(inputs["H"])
    x = torch.from_numpy(inputs["x"].copy())  # (T, E)
    w_q, w_k = (target(torch.from_numpy(inputs[n].copy()), H) for n in ("w_q", "w_k"))
    D = w_q.shape[0] // H
    q, k = (x @ w[:D].T for w in (w_q, w_k))  # head 0: (T, D)
    T = x.shape[0]
    theta = 10000.0 ** (-torch.arange(0, D, 2, dtype=torch.float64) / D)  # (D/2,)
    angle = torch.arange(T, dtype=torch.float64)[:, None] * theta[None, :]  # (T, D/2)
    cos, sin = angle.cos(), angle.sin()

    def rope_half(y):
        a, b = y[:, : D // 2], y[:, D // 2 :]
        return torch.cat([a * cos - b * sin, a * sin + b * cos], dim=-1)

    return to_numpy(rope_half(q) @ rope_half(k).T)


def paged_lookup(target, inputs):
    """``paged_lookup(pool, block_table, length)``: the request's (G, S, D) entries."""
    import torch

    pool = torch.from_numpy(inputs["pool"].copy())
    table = torch.from_numpy(inputs["table"].copy())
    return tensor_to_numpy(target(pool, table, int(inputs["length"])), "the gathered entries")
