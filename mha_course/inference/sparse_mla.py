"""DeepSeek Sparse Attention (DSA, DeepSeek-V3.2, 2025): MLA that attends to each query's top-k tokens only.

A :class:`~mha_course.inference.lightning_indexer.LightningIndexer` scores every earlier token,
each query keeps its k best (:func:`~mha_course.inference.lightning_indexer.causal_top_k`), and
multi-head latent attention (:class:`~mha_course.inference.mla.MultiHeadLatentAttention`) runs on
those. The selection is made per query and shared by all heads: what is selected are entries of
MLA's latent cache (a latent c_s and its rotary key), exactly what absorbed MLA reads. So

    dense MLA   work ~ T^2/2 pairs x H (2r + Dr)
    DSA         work ~ T^2/2 pairs x HI (DI + 1)  (the indexer)  +  T k pairs x H (2r + Dr)

and for T >> k the attention's part grows like T k instead of T^2 (see
:mod:`mha_course.efficient.sparse_cost`). When k >= T nothing is dropped and DSA is dense causal MLA.

Two forms compute the same output:
- :meth:`SparseLatentAttention.forward` masks the dense scores to the selection (as DeepSeek's own
  prefill code does): simple, returns (B, H, T, T) weights, but still does O(T^2) work;
- :meth:`SparseLatentAttention.forward_gathered` gathers the K selected latents of each query and
  scores only those: O(T K) work, weights (B, H, T, K).

Checked against DeepSeek-V3.2-Exp's ``inference/model.py`` (``MLA.forward``, prefill branch, with its
``Indexer``) in ``tests/inference/test_sparse_reference.py``.
"""

from __future__ import annotations

import torch

from ..core.masks import causal_mask
from ..core.softmax import softmax
from ..validation import require_positive_int, require_tensor
from .lightning_indexer import LightningIndexer, causal_top_k, selection_mask
from .mla import MultiHeadLatentAttention


class SparseLatentAttention(MultiHeadLatentAttention):
    """MLA (:class:`MultiHeadLatentAttention`) plus a lightning indexer: each query attends to its top-k tokens.

    Args:
        embed_dim, num_heads, latent_dim, head_dim, rope_dim, value_dim: as MultiHeadLatentAttention.
        top_k: k, the tokens each query keeps (DeepSeek-V3.2: 2048); k >= T keeps every visible token.
        index_heads, index_dim, index_rope_dim: the indexer's HI, DI and rotary features (see
            LightningIndexer).

    Adds the submodule ``indexer``. forward(x (B, T, E), mask=None) -> (out (B, T, E),
    weights (B, H, T, T)), causal by construction.

    Raises:
        TypeError / ValueError: as MultiHeadLatentAttention and LightningIndexer, or top_k not a positive int.
    """

    def __init__(
        self,
        embed_dim: int,
        num_heads: int,
        latent_dim: int,
        top_k: int,
        index_heads: int = 4,
        index_dim: int = 16,
        index_rope_dim: int | None = None,
        head_dim: int | None = None,
        rope_dim: int | None = None,
        value_dim: int | None = None,
    ):
        super().__init__(embed_dim, num_heads, latent_dim, head_dim=head_dim, rope_dim=rope_dim, value_dim=value_dim)
        self.top_k = require_positive_int(top_k, "top_k")
        self.indexer = LightningIndexer(embed_dim, index_heads, index_dim, index_rope_dim)

    def select(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """Which tokens each query of x (B, T, E) keeps.

        Returns:
            indices (B, T, K) and valid (B, T, K) (K = min(top_k, T); see causal_top_k), and the index
            scores (B, T, T) they were chosen by.
        """
        self._check_x(x)
        scores = self.indexer(x)  # (B, T, T), -inf in the future
        indices, valid = causal_top_k(scores, self.top_k)
        return indices, valid, scores

    def forward(self, x: torch.Tensor, mask: torch.Tensor | None = None) -> tuple[torch.Tensor, torch.Tensor]:
        """Masked form: dense MLA scores, every key outside the query's selection (or in its future) blocked.

        Args:
            x: (B, T, E) at positions 0 .. T-1.
            mask: optional bool mask broadcastable to (B, T, T) (True = may attend), applied on top
                (e.g. padding); the selection is made before it.

        Returns:
            out (B, T, E), weights (B, H, T, T) (zero outside the selection).

        Raises:
            TypeError / ValueError: x not (B, T, E), or a mask that is not bool or does not broadcast.
        """
        indices, valid, _ = self.select(x)
        B, T, _ = x.shape
        keep = selection_mask(indices, valid, T) & causal_mask(T, device=x.device)  # (B, T, T)
        if mask is not None:
            require_tensor(mask, "mask")
            if mask.dtype != torch.bool:
                raise TypeError(f"mask must be bool (True = may attend), got dtype {mask.dtype}")
            try:
                keep = keep & mask
            except RuntimeError:
                raise ValueError(f"mask must broadcast to (B={B}, T={T}, T={T}), got {tuple(mask.shape)}") from None
        return super().forward(x, mask=keep[:, None])  # (B, 1, T, T): one selection for every head

    def forward_gathered(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """Gathered form: each query scores only its K selected latents, in latent space (absorbed MLA).

            scores^h[t, i] = ((x_t A_q^h) . c_{s_i} + q_rope^h_t . k_rope_{s_i}) / sqrt(D + Dr),  s_i = indices[t, i]

        Returns:
            out (B, T, E), weights (B, H, T, K) over the selected tokens (0 on invalid slots), and
            indices (B, T, K).
        """
        indices, valid, _ = self.select(x)
        B, T, _ = x.shape
        positions = torch.arange(T, device=x.device)
        latent, rope_key = self.latents(x, positions)  # (B, T, r), (B, T, Dr): the cache
        batch = torch.arange(B, device=x.device)[:, None, None]  # (B, 1, 1)
        chosen_latent = latent[batch, indices]  # (B, T, K, r): only these are read
        chosen_rope = rope_key[batch, indices]  # (B, T, K, Dr)
        query_to_latent, latent_to_output = self.absorbed_matrices()  # (H, E, r), (H, r, E)
        q_latent = torch.einsum("bte,her->bhtr", x, query_to_latent)  # (B, H, T, r)
        _, q_rope = self._queries(x, positions)  # (B, H, T, Dr)
        scores = (
            torch.einsum("bhtr,btkr->bhtk", q_latent, chosen_latent)
            + torch.einsum("bhtd,btkd->bhtk", q_rope, chosen_rope)
        ) * self.scale  # (B, H, T, K)
        scores = scores.masked_fill(~valid[:, None], float("-inf"))  # slots with no visible token
        weights = softmax(scores, dim=-1)  # (B, H, T, K)
        summary = torch.einsum("bhtk,btkr->bhtr", weights, chosen_latent)  # (B, H, T, r)
        return torch.einsum("bhtr,hre->bte", summary, latent_to_output), weights, indices  # (B, T, E)

    def extra_repr(self) -> str:
        return f"{super().extra_repr()}, top_k={self.top_k}"


__all__ = ["SparseLatentAttention"]
