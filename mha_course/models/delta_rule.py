"""Linear attention with a delta rule and a gate: Gated DeltaNet, the linear layers of Qwen3-Next.

Chapter 17's linear attention only adds to its state, S_t = S_{t-1} + phi(k_t) v_t^T, so a value
stored under a key is never removed: recall degrades as the state fills. The delta rule (Widrow-Hoff;
Schlag et al., 2021; Yang et al., 2024) first reads what the state holds for k_t, then writes back
a fraction beta_t of the error; Gated DeltaNet (Yang, Kautz and Hatamizadeh, 2025) also decays the
whole state by alpha_t = exp(g_t) in (0, 1]. The papers write S_t = alpha_t S_{t-1} (I - beta_t k_t k_t^T)
+ beta_t v_t k_t^T with S (Dv, Dk); here, as in chapter 17 and the reference code, S is its transpose:

    S_t = (I - beta_t k_t k_t^T) alpha_t S_{t-1} + beta_t k_t v_t^T      (B, H, Dk, Dv)
    o_t = scale * S_t^T q_t                                              (B, H, Dv)

Dk is the key (and query) width per head, Dv the value width. With alpha = 1 it is the plain delta
rule; with ``delta=False`` (no read-back) it is gated linear attention, S_t = alpha_t S_{t-1} +
beta_t k_t v_t^T. A per-channel gate g (B, H, T, Dk), decaying each key channel on its own, is
Kimi Delta Attention's (Kimi Linear, 2025). These models L2-normalise q and k (:func:`l2_normalize`):
with ||k|| = 1 and beta = 1 the write replaces what k recalled.

:func:`gated_delta_rule_recurrent` runs the recurrence token by token (decoding);
:func:`gated_delta_rule_chunked` computes the same outputs chunk by chunk for training: within a
chunk of C tokens the writes solve a unit lower-triangular system (the WY representation / UT
transform), and one state passes between chunks. Checked against flash-linear-attention's naive
gated delta rule and HF transformers' Qwen3-Next torch fallbacks (tests/models/test_delta_rule.py).
:func:`cache_bytes` sets the fixed state against the KV cache of MHA, GQA and MLA.
"""

from __future__ import annotations

import torch
from torch.nn import functional as F

from ..inference.mla import cache_numbers_per_token
from ..validation import (
    require_floating,
    require_non_negative_int,
    require_positive_int,
    require_rank,
    require_tensor,
    resolve_scale,
)


def l2_normalize(x: torch.Tensor, eps: float = 1e-6) -> torch.Tensor:
    """x / sqrt(||x||^2 + eps) over the last dim, as Gated DeltaNet normalises q and k (eps as the reference code).

    Raises:
        TypeError: x is not a floating tensor.
    """
    require_tensor(x, "x")
    require_floating(x, "x")
    return x * torch.rsqrt((x * x).sum(-1, keepdim=True) + eps)


def _check_inputs(q, k, v, beta, g, initial_state):
    """Validate the inputs; return beta (B, H, T), g (B, H, T, 1 or Dk) and the state (B, H, Dk, Dv)."""
    for name, x, legend in (("q", q, "(B, H, T, Dk)"), ("k", k, "(B, H, T, Dk)"), ("v", v, "(B, H, T, Dv)")):
        require_tensor(x, name)
        require_floating(x, name)
        require_rank(x, 4, name, legend)
    if not q.dtype == k.dtype == v.dtype:
        raise TypeError(f"q, k, v must share a dtype, got {q.dtype}, {k.dtype}, {v.dtype}")
    if q.shape != k.shape:
        raise ValueError(f"q and k must both be (B, H, T, Dk), got q {tuple(q.shape)} and k {tuple(k.shape)}")
    if v.shape[:3] != q.shape[:3]:
        raise ValueError(f"v must be (B, H, T, Dv) with q's (B, H, T) {tuple(q.shape[:3])}, got {tuple(v.shape)}")
    B, H, T, Dk = q.shape
    if T < 1:
        raise ValueError(f"need at least one token, got T={T}")

    def same_kind(x, name, legend, shapes):
        require_tensor(x, name)
        if x.dtype != q.dtype:
            raise TypeError(f"{name} must have q's dtype {q.dtype}, got {x.dtype}")
        if tuple(x.shape) not in shapes:
            raise ValueError(f"{name} must have shape {legend} = {' or '.join(map(str, shapes))}, got {tuple(x.shape)}")

    if beta is None:
        beta = q.new_ones(B, H, T)
    else:
        same_kind(beta, "beta", "(B, H, T)", [(B, H, T)])
        if not bool(((beta >= 0) & (beta <= 1)).all()):  # NaN fails here too
            raise ValueError(f"beta must lie in [0, 1], got values from {beta.min().item()} to {beta.max().item()}")
    if g is None:
        g = q.new_zeros(B, H, T, 1)
    else:
        same_kind(g, "g", "(B, H, T) or (B, H, T, Dk)", [(B, H, T), (B, H, T, Dk)])
        if not bool((g <= 0).all()):  # alpha = exp(g) <= 1: a gate forgets, it never amplifies
            raise ValueError(f"g must be log-gates <= 0 (alpha = exp(g) in (0, 1]), got a maximum of {g.max().item()}")
        g = g if g.dim() == 4 else g.unsqueeze(-1)
    Dv = v.shape[-1]
    if initial_state is None:
        initial_state = q.new_zeros(B, H, Dk, Dv)
    else:
        same_kind(initial_state, "initial_state", "(B, H, Dk, Dv)", [(B, H, Dk, Dv)])
    return beta, g, initial_state


def gated_delta_rule_recurrent(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    beta: torch.Tensor | None = None,
    g: torch.Tensor | None = None,
    *,
    initial_state: torch.Tensor | None = None,
    scale: float | None = None,
    normalize_qk: bool = False,
    delta: bool = True,
) -> tuple[torch.Tensor, torch.Tensor]:
    """The gated delta rule one token at a time: decay, read k_t, write beta_t times the error, read q_t.

    Args:
        q, k: (B, H, T, Dk); v: (B, H, T, Dv).
        beta: (B, H, T) write strengths in [0, 1]; None means 1.
        g: log-gates <= 0, (B, H, T) one per head (Gated DeltaNet) or (B, H, T, Dk) one per key channel
            (Kimi Delta Attention); None means 0 (alpha = 1, no decay).
        initial_state: (B, H, Dk, Dv), or None for zeros.
        scale: multiplies q; None means 1/sqrt(Dk), as the reference code.
        normalize_qk: L2-normalise q and k first (:func:`l2_normalize`).
        delta: False drops the read-back: gated linear attention, S_t = alpha_t S_{t-1} + beta_t k_t v_t^T.

    Returns:
        o (B, H, T, Dv) and the final state (B, H, Dk, Dv).

    Raises:
        TypeError / ValueError: inputs that are not tensors of the shapes above and one floating dtype,
        beta outside [0, 1], g > 0, T = 0.
    """
    beta, g, state = _check_inputs(q, k, v, beta, g, initial_state)
    if normalize_qk:
        q, k = l2_normalize(q), l2_normalize(k)
    q = q * resolve_scale(scale, q.shape[-1])
    outputs = []
    for t in range(q.shape[2]):
        k_t = k[:, :, t]  # (B, H, Dk)
        state = state * g[:, :, t].exp().unsqueeze(-1)  # alpha_t S_{t-1}: row d (key channel d) decays by alpha_t,d
        error = v[:, :, t]  # (B, H, Dv)
        if delta:  # what the state recalls for k_t, subtracted: only the difference is written
            error = error - (k_t.unsqueeze(-2) @ state).squeeze(-2)
        state = state + k_t.unsqueeze(-1) * (beta[:, :, t, None] * error).unsqueeze(-2)  # (B, H, Dk, Dv)
        outputs.append((q[:, :, t].unsqueeze(-2) @ state).squeeze(-2))
    return torch.stack(outputs, dim=2), state  # (B, H, T, Dv), (B, H, Dk, Dv)


def gated_delta_rule_chunked(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    beta: torch.Tensor | None = None,
    g: torch.Tensor | None = None,
    *,
    chunk_size: int = 64,
    initial_state: torch.Tensor | None = None,
    scale: float | None = None,
    normalize_qk: bool = False,
    delta: bool = True,
) -> tuple[torch.Tensor, torch.Tensor]:
    """The same outputs and final state as :func:`gated_delta_rule_recurrent`, computed chunk by chunk.

    Within a chunk starting from state S_0, with Gamma_i = exp(gamma_i) the decay from the chunk's start
    through token i (gamma the running sum of g), the state after token i is
    Diag(Gamma_i) S_0 + sum_{j<=i} Diag(Gamma_i / Gamma_j) k_j u_j^T, where u_j (Dv) is what token j
    writes. The delta rule makes u_i = beta_i (v_i - what the state recalls for k_i), and that recall
    holds the earlier u_j of the chunk: (I + A) u = beta v - beta (k * Gamma) S_0, with A (C, C) strictly
    lower triangular, A_ij = beta_i sum_d k_id k_jd Gamma_id / Gamma_jd. Solving it once per chunk,
    u = U - W S_0 with U = (I + A)^-1 beta v and W = (I + A)^-1 beta (k * Gamma), is the WY representation
    (the UT transform): matrix products for the C tokens of a chunk, a loop only over the T / C chunks.
    The last chunk is padded with tokens that change nothing (k = v = beta = g = 0), so any T works.

    Args:
        as :func:`gated_delta_rule_recurrent`, and chunk_size: C, tokens per chunk.

    Returns:
        o (B, H, T, Dv) and the final state (B, H, Dk, Dv).

    Raises:
        TypeError / ValueError: as :func:`gated_delta_rule_recurrent`, or chunk_size < 1.

    Per-channel gates hold their decays as a (B, H, T / C, C, C, Dk) tensor: plain and exact (every
    exponent is <= 0), sized for the course's small models rather than for speed.
    """
    beta, g, state = _check_inputs(q, k, v, beta, g, initial_state)
    C = require_positive_int(chunk_size, "chunk_size")
    if normalize_qk:
        q, k = l2_normalize(q), l2_normalize(k)
    q = q * resolve_scale(scale, q.shape[-1])
    B, H, T, _ = q.shape
    pad = -T % C
    N = (T + pad) // C

    def chunks(x: torch.Tensor) -> torch.Tensor:  # (B, H, T, X) -> (B, H, N, C, X), zero-padded at the end
        return F.pad(x, (0, 0, 0, pad)).reshape(B, H, N, C, x.shape[-1])

    q_c, k_c, v_c = chunks(q), chunks(k), chunks(v)
    beta_c = chunks(beta.unsqueeze(-1))  # (B, H, N, C, 1)
    gamma = chunks(g).cumsum(-2)  # (B, H, N, C, 1 or Dk): log-decay from the chunk's start
    causal = torch.ones(C, C, dtype=torch.bool, device=q.device).tril()  # (C, C): [i, j] True for j <= i
    decay = (gamma.unsqueeze(-2) - gamma.unsqueeze(-3)).masked_fill(~causal.unsqueeze(-1), float("-inf")).exp()
    # decay (B, H, N, C, C, 1 or Dk): Gamma_i / Gamma_j (per channel) for j <= i, 0 above the diagonal

    def decayed_products(a, b):  # (B, H, N, C, C): sum_d a_id b_jd Gamma_id / Gamma_jd
        if decay.shape[-1] == 1:  # one gate per head: the decay factors out of the dot product
            return (a @ b.transpose(-1, -2)) * decay.squeeze(-1)
        return (a.unsqueeze(-2) * b.unsqueeze(-3) * decay).sum(-1)

    scores = decayed_products(q_c, k_c)  # (B, H, N, C, C), causal
    if delta:
        kk = decayed_products(k_c, k_c)  # (B, H, N, C, C)
        unit_lower = torch.eye(C, dtype=q.dtype, device=q.device) + beta_c * kk.tril(-1)  # I + A

        def solve(rhs):
            return torch.linalg.solve_triangular(unit_lower, rhs, upper=False, unitriangular=True)

        writes = solve(beta_c * v_c)  # U (B, H, N, C, Dv)
        from_state = solve(beta_c * k_c * gamma.exp())  # W (B, H, N, C, Dk)
    else:
        writes, from_state = beta_c * v_c, None
    outputs = []
    for n in range(N):
        u = writes[:, :, n] if from_state is None else writes[:, :, n] - from_state[:, :, n] @ state  # (B, H, C, Dv)
        outputs.append((q_c[:, :, n] * gamma[:, :, n].exp()) @ state + scores[:, :, n] @ u)  # (B, H, C, Dv)
        last = gamma[:, :, n, -1:]  # (B, H, 1, Dk): the whole chunk's log-decay
        carried = (k_c[:, :, n] * (last - gamma[:, :, n]).exp()).transpose(-1, -2) @ u  # (B, H, Dk, Dv)
        state = state * last.transpose(-1, -2).exp() + carried
    return torch.cat(outputs, dim=2)[:, :, :T], state  # (B, H, T, Dv), (B, H, Dk, Dv)


def cache_bytes(
    kind: str,
    tokens: int,
    num_heads: int,
    head_dim: int,
    *,
    num_kv_heads: int | None = None,
    latent_dim: int | None = None,
    rope_dim: int | None = None,
    value_dim: int | None = None,
    element_bytes: int = 2,
) -> int:
    """Bytes one layer keeps to decode after ``tokens`` tokens; divide by ``tokens`` for bytes per token.

    "mha", "gqa", "mqa", "mla": the KV cache, ``tokens`` times
    :func:`mha_course.inference.mla.cache_numbers_per_token` numbers, growing with the context.
    "gated_delta": the state, H * Dk * Dv numbers (head_dim = Dk, value_dim = Dv, default Dk) whatever
    the context; its bytes per token fall as 1 / tokens. (Qwen3-Next's layer also keeps a short
    convolution's last few inputs, left out here.) The references hold the state in float32: pass
    ``element_bytes=4`` for that.

    Raises:
        TypeError / ValueError: unknown kind, sizes that are not positive ints (tokens may be 0), or the
        sizes the kind needs are missing (as cache_numbers_per_token).
    """
    require_non_negative_int(tokens, "tokens")
    require_positive_int(element_bytes, "element_bytes")
    if kind == "gated_delta":
        require_positive_int(num_heads, "num_heads")
        require_positive_int(head_dim, "head_dim")
        Dv = head_dim if value_dim is None else require_positive_int(value_dim, "value_dim")
        return num_heads * head_dim * Dv * element_bytes
    if kind not in ("mha", "gqa", "mqa", "mla"):
        raise ValueError(f"kind must be 'mha', 'gqa', 'mqa', 'mla' or 'gated_delta', got {kind!r}")
    numbers = cache_numbers_per_token(kind, num_heads, head_dim, num_kv_heads, latent_dim, rope_dim)
    return tokens * numbers * element_bytes


__all__ = ["l2_normalize", "gated_delta_rule_recurrent", "gated_delta_rule_chunked", "cache_bytes"]
