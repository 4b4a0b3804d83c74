"""What DeepSeek Sparse Attention saves: FLOPs and bytes of dense causal MLA against indexer + top-k MLA.

Counted per layer for a whole sequence of T tokens, each query at position t seeing t + 1 tokens
(the causal pairs: T (T + 1) / 2 of them), with absorbed MLA (:mod:`mha_course.inference.mla`):

    main attention, per (query, key) pair and head: 2 r + Dr multiply-adds (score against the latent
        and the rotary key, then the weighted sum of latents) -- dense: every pair; sparse: min(k, t + 1)
        pairs per query, so sum_t min(k, t + 1) = k (k + 1) / 2 + (T - k) k for T > k;
    the indexer, per visible pair: HI (DI + 1) multiply-adds (HI dot products of DI, the weighted sum),
        over every pair: O(T^2) but with HI (DI + 1) small against H (2 r + Dr).

Bytes: what the queries read from the caches, each query reading every entry it uses once (the
decoding view: one token at a time, which is where attention is bandwidth-bound). Dense reads r + Dr
numbers per pair; sparse reads them for its selected pairs only, plus the indexer's DI-number key for
every visible pair (DeepSeek-V3.2 stores those in FP8: ``index_element_bytes=1``).

FLOPs follow :func:`mha_course.efficient.cost.attention_flops` (2 per multiply-add, softmax not
counted); the softmax and the top-k selection are not counted.
"""

from __future__ import annotations

from ..inference.mla import cache_numbers_per_token
from ..validation import require_positive_int
from .cost import attention_flops


def causal_pairs(T: int, top_k: int | None = None) -> int:
    """Number of (query, key) pairs attended: sum over t < T of min(k, t + 1) (every visible key if k is None).

    Raises:
        TypeError / ValueError: T or top_k not a positive int.
    """
    require_positive_int(T, "T")
    if top_k is None or top_k >= T:
        return T * (T + 1) // 2
    k = require_positive_int(top_k, "top_k")
    return k * (k + 1) // 2 + (T - k) * k


def sparse_attention_cost(
    T: int,
    top_k: int,
    num_heads: int,
    latent_dim: int,
    rope_dim: int,
    index_heads: int,
    index_dim: int,
    batch: int = 1,
    element_bytes: int = 2,
    index_element_bytes: int = 1,
) -> dict[str, dict[str, float]]:
    """FLOPs and bytes of one layer over T tokens: dense causal MLA against DSA (indexer + top-k MLA).

    Args:
        T: sequence length. top_k: k. num_heads: H. latent_dim: r. rope_dim: Dr.
        index_heads: HI. index_dim: DI. batch: B.
        element_bytes: bytes per cached latent number (2 in bfloat16).
        index_element_bytes: bytes per cached indexer-key number (1 in FP8).

    Returns:
        {"dense": {"flops", "bytes", "pairs"}, "sparse": {"flops", "bytes", "pairs", "indexer_flops",
        "attention_flops", "indexer_bytes"}}.

    Raises:
        TypeError / ValueError: a size that is not a positive int (rope_dim may be 0).
    """
    require_positive_int(num_heads, "num_heads")
    require_positive_int(index_heads, "index_heads")
    require_positive_int(index_dim, "index_dim")
    require_positive_int(batch, "batch")
    require_positive_int(element_bytes, "element_bytes")
    require_positive_int(index_element_bytes, "index_element_bytes")
    latent_numbers = cache_numbers_per_token("mla", num_heads, 1, latent_dim=latent_dim, rope_dim=rope_dim)  # r + Dr
    dense_pairs, sparse_pairs = causal_pairs(T), causal_pairs(T, top_k)

    def mla_flops(pairs: int) -> float:
        # attention_flops counts 4 D per pair (score and weighted sum, D each): D = r; the rotary score adds 2 Dr.
        return attention_flops(batch, num_heads, pairs, latent_dim, S=1) + 2.0 * batch * num_heads * pairs * rope_dim

    indexer_flops = 2.0 * batch * dense_pairs * index_heads * (index_dim + 1)
    indexer_bytes = batch * dense_pairs * index_dim * index_element_bytes
    sparse_attention = mla_flops(sparse_pairs)
    return {
        "dense": {
            "flops": mla_flops(dense_pairs),
            "bytes": float(batch * dense_pairs * latent_numbers * element_bytes),
            "pairs": float(dense_pairs),
        },
        "sparse": {
            "flops": indexer_flops + sparse_attention,
            "bytes": float(batch * sparse_pairs * latent_numbers * element_bytes + indexer_bytes),
            "pairs": float(sparse_pairs),
            "indexer_flops": indexer_flops,
            "attention_flops": sparse_attention,
            "indexer_bytes": float(indexer_bytes),
        },
    }


__all__ = ["causal_pairs", "sparse_attention_cost"]
