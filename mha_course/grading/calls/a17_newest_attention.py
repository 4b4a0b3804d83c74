"""Calls of assignment 17 (an output gate, one gated delta-rule step, causal top-k, a chunked mask), run in
the submission's sandbox: NumPy in, NumPy out."""

from __future__ import annotations

from ..inside.convert import tensor_to_numpy


def gated_attention(target, inputs):
    """``gated_attention(q, k, v, gate_logits, mask)``: the gated heads (B, H, T, Dv)."""
    import torch

    q, k, v, gate = (torch.from_numpy(inputs[n].copy()) for n in ("q", "k", "v", "gate_logits"))
    mask = None if inputs["mask"] is None else torch.from_numpy(inputs["mask"].copy())
    return tensor_to_numpy(target(q, k, v, gate, mask), "the gated heads")


def delta_rule_step(target, inputs):
    """``delta_rule_step(state, k, v, beta, g)``: the new state (B, H, Dk, Dv)."""
    import torch

    state, k, v, beta, g = (torch.from_numpy(inputs[n].copy()) for n in ("state", "k", "v", "beta", "g"))
    return tensor_to_numpy(target(state, k, v, beta, g), "the new state")


def delta_rule_steps(target, inputs):
    """The step applied to T tokens in turn from an empty state: the final state (B, H, Dk, Dv).

    k (B, H, T, Dk), v (B, H, T, Dv), beta and g (B, H, T).
    """
    import torch

    k, v, beta, g = (torch.from_numpy(inputs[n].copy()) for n in ("k", "v", "beta", "g"))
    B, H, T, Dk = k.shape
    state = torch.zeros(B, H, Dk, v.shape[-1], dtype=k.dtype)
    for t in range(T):
        state = target(state, k[:, :, t], v[:, :, t], beta[:, :, t], g[:, :, t])
        if not isinstance(state, torch.Tensor):  # say so at once, not as a crash at the next step
            return tensor_to_numpy(state, "the new state")
    return tensor_to_numpy(state, "the final state")


def top_k_mask(target, inputs):
    """``top_k_mask(scores, k)``: the (B, T, S) bool selection."""
    import torch

    return tensor_to_numpy(target(torch.from_numpy(inputs["scores"].copy()), int(inputs["k"])), "the selection")


def chunked_mask(target, inputs):
    """``chunked_mask(T, chunk_size)``: the (T, T) bool mask."""
    return tensor_to_numpy(target(int(inputs["T"]), int(inputs["chunk_size"])), "the mask")
