"""The lightning indexer of DeepSeek Sparse Attention (DeepSeek-V3.2, 2025): which earlier tokens each query keeps.

A few small indexer heads j = 1 .. HI (each of DI features, against ONE key per token shared by all
heads) score every earlier token s for query t, and a per-query weight w[t, j] mixes the heads:

    I[t, s] = sum_j w[t, j] * ReLU(q_I[t, j] . k_I[s])        (s <= t; future tokens are never scored)

The ReLU (not a softmax) and the tiny sizes (DeepSeek-V3.2: HI = 64, DI = 128, in FP8) make it cheap
enough to run over all T^2/2 pairs; each query then keeps its top-k tokens (:func:`causal_top_k`,
k = 2048 there) and the main attention runs on those only (:mod:`mha_course.inference.sparse_mla`).

Training (the paper's dense warm-up): the indexer learns to imitate the main attention. Its target
for query t is the dense attention's weights summed over the heads and L1-normalised, p[t, :]; the
loss is sum_t KL(p[t, :] || softmax(I[t, :])) (:func:`indexer_kl_loss`), with the target detached
so the loss trains the indexer only. In the sparse stage the same loss is taken over the selected
tokens only (pass their mask).

Checked against DeepSeek-V3.2-Exp's inference code (``inference/model.py``, class ``Indexer``) in
``tests/inference/test_sparse_reference.py``; its FP8 quantisation is left out, and its Hadamard
rotation of q and k is orthogonal (it changes no dot product), so it is left out too.
"""

from __future__ import annotations

import math

import torch
from torch import nn

from ..core.masks import causal_mask
from ..core.positions import apply_rotary
from ..validation import require_floating, require_int, require_positive_int, require_rank, require_tensor


class LightningIndexer(nn.Module):
    """Index scores I (B, T, T) for tokens x (B, T, E): HI ReLU'd heads of DI features, weighted per query.

    Args:
        embed_dim: E.
        index_heads: HI, the indexer heads (DeepSeek-V3.2: 64).
        index_dim: DI, each head's query and the shared key's size (DeepSeek-V3.2: 128).
        rope_dim: how many of the DI features (the first ones) carry rotary positions (default
            DI / 2, as DeepSeek-V3.2's 64 of 128; 0 for none; even).

    Parameters (no biases, as upstream): ``q_proj`` E -> HI*DI, ``k_proj`` E -> DI followed by
    ``k_norm`` (LayerNorm over DI), ``weights_proj`` E -> HI. The head weights are scaled by
    1/sqrt(HI) and the dot products by 1/sqrt(DI), as upstream.

    forward(x (B, T, E)) -> scores (B, T, T), -inf where s > t.

    Raises:
        TypeError / ValueError: sizes that are not positive ints, or an odd or too large rope_dim.
    """

    def __init__(self, embed_dim: int, index_heads: int = 4, index_dim: int = 16, rope_dim: int | None = None):
        super().__init__()
        require_positive_int(embed_dim, "embed_dim")
        require_positive_int(index_heads, "index_heads")
        require_positive_int(index_dim, "index_dim")
        rope_dim = 2 * (index_dim // 4) if rope_dim is None else require_int(rope_dim, "rope_dim", minimum=0)
        if rope_dim % 2 or rope_dim > index_dim:
            raise ValueError(f"rope_dim must be even and <= index_dim={index_dim}, got {rope_dim}")
        self.embed_dim, self.index_heads, self.index_dim, self.rope_dim = embed_dim, index_heads, index_dim, rope_dim
        self.q_proj = nn.Linear(embed_dim, index_heads * index_dim, bias=False)
        self.k_proj = nn.Linear(embed_dim, index_dim, bias=False)
        self.k_norm = nn.LayerNorm(index_dim, eps=1e-6)
        self.weights_proj = nn.Linear(embed_dim, index_heads, bias=False)

    def _rotate(self, x: torch.Tensor, positions: torch.Tensor) -> torch.Tensor:
        """Rotary positions on the first rope_dim features of x (..., T, DI); the rest pass unchanged."""
        if self.rope_dim == 0:
            return x
        rotated = apply_rotary(x[..., : self.rope_dim], positions)
        return torch.cat([rotated, x[..., self.rope_dim :]], dim=-1)

    def queries_keys_weights(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """The indexer's queries (B, HI, T, DI), keys (B, T, DI) and head weights (B, T, HI) for x (B, T, E)."""
        require_tensor(x, "x")
        require_floating(x, "x")
        require_rank(x, 3, "x", "(B, T, E)")
        if x.shape[-1] != self.embed_dim:
            raise ValueError(f"x must have shape (B, T, E={self.embed_dim}), got {tuple(x.shape)}")
        B, T, _ = x.shape
        positions = torch.arange(T, device=x.device)
        q = self.q_proj(x).reshape(B, T, self.index_heads, self.index_dim).transpose(1, 2)  # (B, HI, T, DI)
        q = self._rotate(q, positions)
        k = self._rotate(self.k_norm(self.k_proj(x)), positions)  # (B, T, DI): one key, every head
        w = self.weights_proj(x) / math.sqrt(self.index_heads)  # (B, T, HI)
        return q, k, w

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """Causal index scores (B, T, T) for tokens x (B, T, E): I[t, s] for s <= t, -inf for s > t."""
        q, k, w = self.queries_keys_weights(x)
        return lightning_index_scores(q, k, w, scale=1.0 / math.sqrt(self.index_dim))

    def extra_repr(self) -> str:
        return (
            f"embed_dim={self.embed_dim}, index_heads={self.index_heads}, "
            f"index_dim={self.index_dim}, rope_dim={self.rope_dim}"
        )


def lightning_index_scores(
    q: torch.Tensor, k: torch.Tensor, weights: torch.Tensor, scale: float = 1.0, causal: bool = True
) -> torch.Tensor:
    """I[b, t, s] = scale * sum_j weights[b, t, j] * ReLU(q[b, j, t] . k[b, s]).

    Args:
        q: (B, HI, T, DI) indexer queries.
        k: (B, S, DI) indexer keys, one per token, shared by the heads.
        weights: (B, T, HI) per-query head weights.
        scale: multiplies every score (upstream: 1/sqrt(DI)).
        causal: set -inf where s > t + (S - T) (the T queries are the last T of S positions).

    Returns:
        (B, T, S) scores.

    Raises:
        TypeError / ValueError: not floating tensors, or shapes that do not match (both shapes named).
    """
    for name, value, rank, legend in (
        ("q", q, 4, "(B, HI, T, DI)"),
        ("k", k, 3, "(B, S, DI)"),
        ("weights", weights, 3, "(B, T, HI)"),
    ):
        require_tensor(value, name)
        require_floating(value, name)
        require_rank(value, rank, name, legend)
    B, HI, T, DI = q.shape
    if k.shape[0] != B or k.shape[2] != DI:
        raise ValueError(f"k must have shape (B={B}, S, DI={DI}), got {tuple(k.shape)} (q is {tuple(q.shape)})")
    if tuple(weights.shape) != (B, T, HI):
        raise ValueError(f"weights must have shape (B={B}, T={T}, HI={HI}), got {tuple(weights.shape)}")
    dots = torch.relu(q @ k[:, None].transpose(-1, -2))  # (B, HI, T, S)
    scores = torch.einsum("bjts,btj->bts", dots, weights) * scale  # (B, T, S)
    if causal:
        S = k.shape[1]
        visible = causal_mask(T, S, diagonal=S - T, device=q.device)  # (T, S)
        scores = scores.masked_fill(~visible, float("-inf"))
    return scores


def causal_top_k(scores: torch.Tensor, k: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Each query's k best visible keys: the future is never chosen, whatever its score.

    The T queries are the last T of S positions (query t sees keys s <= t + S - T). When a query sees
    fewer than k keys it keeps them all, and the remaining slots are marked invalid.

    Args:
        scores: (B, T, S) index scores (any values; future keys are masked here again).
        k: how many keys each query keeps (>= 1); more than S is allowed.

    Returns:
        indices (B, T, K) long and valid (B, T, K) bool, K = min(k, S): valid[b, t, i] is False for a
        slot that holds no visible key (its index points at a future key and must not be used).

    Raises:
        TypeError / ValueError: scores not a floating (B, T, S) tensor with T <= S, or k not a positive int.
    """
    require_tensor(scores, "scores")
    require_floating(scores, "scores")
    require_rank(scores, 3, "scores", "(B, T, S)")
    require_positive_int(k, "k")
    _, T, S = scores.shape
    if T > S:
        raise ValueError(f"scores must have T <= S (queries are the last T of S positions), got {tuple(scores.shape)}")
    visible = causal_mask(T, S, diagonal=S - T, device=scores.device)  # (T, S)
    # A visible key scored -inf still ranks above every future key: lift it to the lowest finite value.
    lowest = torch.finfo(scores.dtype).min
    masked = torch.where(
        visible, scores.clamp_min(lowest), torch.full((), float("-inf"), dtype=scores.dtype, device=scores.device)
    )
    K = min(k, S)
    indices = masked.topk(K, dim=-1).indices  # (B, T, K), best first
    valid = visible.expand_as(masked).gather(-1, indices)  # (B, T, K)
    return indices, valid


def selection_mask(indices: torch.Tensor, valid: torch.Tensor, S: int) -> torch.Tensor:
    """The (B, T, S) bool mask, True at each query's valid selected keys (course convention: True = may attend).

    Args:
        indices, valid: (B, T, K) from :func:`causal_top_k`.
        S: number of keys.

    Raises:
        TypeError / ValueError: indices not integer, valid not bool, their shapes differ, or an index >= S.
    """
    require_tensor(indices, "indices")
    require_tensor(valid, "valid")
    require_int(S, "S", minimum=1)
    if indices.dtype not in (torch.int32, torch.int64) or valid.dtype != torch.bool:
        raise TypeError(f"indices must be int64/int32 and valid bool, got {indices.dtype} and {valid.dtype}")
    require_rank(indices, 3, "indices", "(B, T, K)")
    if indices.shape != valid.shape:
        raise ValueError(f"indices and valid must have one shape, got {tuple(indices.shape)} and {tuple(valid.shape)}")
    if indices.numel() and int(indices.max()) >= S:
        raise ValueError(f"every index must be < S={S}, got {int(indices.max())}")
    B, T, _ = indices.shape
    mask = torch.zeros(B, T, S, dtype=torch.bool, device=indices.device)
    return mask.scatter(-1, indices.long(), valid)  # an invalid slot writes False


def indexer_kl_loss(
    index_scores: torch.Tensor,
    attention_weights: torch.Tensor,
    mask: torch.Tensor | None = None,
    reduction: str = "sum",
) -> torch.Tensor:
    """The indexer's training loss: sum over queries of KL(p[t, :] || softmax(I[t, :])).

    p[t, :] is the main attention's weights summed over heads and L1-normalised (over ``mask`` only, if
    given), detached: the loss trains the indexer, never the attention it imitates.

    Args:
        index_scores: (B, T, S) index scores, -inf where blocked.
        attention_weights: (B, H, T, S) the main (dense) attention's weights.
        mask: optional bool (B, T, S) or (T, S): the keys the loss is taken over (the selected keys in
            the sparse stage). Keys outside get no target and no indexer probability.
        reduction: "sum" (the paper's sum over queries, and over the batch), "mean" (over B * T), or
            "none" (per query, (B, T)).

    Returns:
        the loss (a scalar, or (B, T)). A target weight on a key the indexer scores -inf costs +inf.

    Raises:
        TypeError / ValueError: not floating tensors, shapes that do not match, a non-bool mask, or an
            unknown reduction.
    """
    for name, value, rank, legend in (
        ("index_scores", index_scores, 3, "(B, T, S)"),
        ("attention_weights", attention_weights, 4, "(B, H, T, S)"),
    ):
        require_tensor(value, name)
        require_floating(value, name)
        require_rank(value, rank, name, legend)
    B, T, S = index_scores.shape
    if attention_weights.shape[0] != B or tuple(attention_weights.shape[2:]) != (T, S):
        raise ValueError(
            f"attention_weights must have shape (B={B}, H, T={T}, S={S}), got {tuple(attention_weights.shape)}"
        )
    if reduction not in ("sum", "mean", "none"):
        raise ValueError(f"reduction must be 'sum', 'mean' or 'none', got {reduction!r}")
    target = attention_weights.detach().sum(dim=1)  # (B, T, S): summed over heads
    if mask is not None:
        require_tensor(mask, "mask")
        if mask.dtype != torch.bool:
            raise TypeError(f"mask must be bool (True = in the loss), got dtype {mask.dtype}")
        if tuple(mask.shape[-2:]) != (T, S) or mask.dim() not in (2, 3):
            raise ValueError(f"mask must have shape (B, T={T}, S={S}) or (T, S), got {tuple(mask.shape)}")
        target = torch.where(mask, target, torch.zeros((), dtype=target.dtype, device=target.device))
        index_scores = index_scores.masked_fill(~mask, float("-inf"))
    target = target / target.sum(dim=-1, keepdim=True).clamp_min(torch.finfo(target.dtype).tiny)  # L1
    log_q = torch.log_softmax(index_scores, dim=-1)  # (B, T, S)
    # 0 * log 0 = 0: only keys the target weighs contribute (and cost +inf if the indexer excludes them).
    terms = torch.where(target > 0, target * (torch.log(target) - log_q), torch.zeros((), dtype=target.dtype))
    per_query = terms.sum(dim=-1)  # (B, T)
    if reduction == "none":
        return per_query
    return per_query.sum() if reduction == "sum" else per_query.mean()


__all__ = ["LightningIndexer", "lightning_index_scores", "causal_top_k", "selection_mask", "indexer_kl_loss"]
