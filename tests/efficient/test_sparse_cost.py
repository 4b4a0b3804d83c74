"""The cost model of DeepSeek Sparse Attention against counting by hand."""

import pytest

from mha_course.efficient.cost import attention_flops
from mha_course.efficient.sparse_cost import causal_pairs, sparse_attention_cost

SIZES = dict(num_heads=4, latent_dim=16, rope_dim=4, index_heads=2, index_dim=8)


@pytest.mark.parametrize("T,k", [(1, 1), (5, 2), (10, 10), (10, 30), (37, 8)])
def test_causal_pairs_against_a_loop(T, k):
    assert causal_pairs(T, k) == sum(min(k, t + 1) for t in range(T))
    assert causal_pairs(T) == sum(t + 1 for t in range(T))


def test_flops_and_bytes_counted_by_hand():
    T, k, B = 12, 5, 2
    cost = sparse_attention_cost(T, k, batch=B, element_bytes=2, index_element_bytes=1, **SIZES)
    H, r, Dr, HI, DI = 4, 16, 4, 2, 8
    dense_pairs, sparse_pairs = T * (T + 1) // 2, sum(min(k, t + 1) for t in range(T))
    assert cost["dense"]["flops"] == 2 * B * H * dense_pairs * (2 * r + Dr)
    assert cost["sparse"]["attention_flops"] == 2 * B * H * sparse_pairs * (2 * r + Dr)
    assert cost["sparse"]["indexer_flops"] == 2 * B * dense_pairs * HI * (DI + 1)
    assert cost["sparse"]["flops"] == cost["sparse"]["attention_flops"] + cost["sparse"]["indexer_flops"]
    assert cost["dense"]["bytes"] == B * dense_pairs * (r + Dr) * 2
    assert cost["sparse"]["bytes"] == B * sparse_pairs * (r + Dr) * 2 + B * dense_pairs * DI * 1
    # the same count as the course's attention_flops when there is no rotary part: 4 D per pair, D = r
    no_rope = sparse_attention_cost(T, T, **(SIZES | {"rope_dim": 0}))
    assert no_rope["sparse"]["attention_flops"] == attention_flops(1, H, dense_pairs, r, S=1)


def test_k_at_least_T_costs_the_dense_attention_plus_the_indexer():
    cost = sparse_attention_cost(20, 64, **SIZES)
    assert cost["sparse"]["attention_flops"] == cost["dense"]["flops"]
    assert cost["sparse"]["flops"] > cost["dense"]["flops"]


def test_the_attention_part_grows_like_T_k_and_the_saving_grows_with_T():
    ratios = [
        sparse_attention_cost(T, 256, **SIZES)["dense"]["flops"]
        / sparse_attention_cost(T, 256, **SIZES)["sparse"]["flops"]
        for T in (1024, 4096, 16384)
    ]
    assert ratios[0] < ratios[1] < ratios[2]
    a, b = (sparse_attention_cost(T, 256, **SIZES)["sparse"]["attention_flops"] for T in (8192, 16384))
    assert b / a == pytest.approx(2.0, rel=0.02)  # linear in T once T >> k


def test_bad_sizes_are_refused():
    with pytest.raises(ValueError, match="top_k"):
        sparse_attention_cost(10, 0, **SIZES)
    with pytest.raises(ValueError, match="T"):
        causal_pairs(0)
    with pytest.raises(TypeError, match="index_dim"):
        sparse_attention_cost(10, 2, **(SIZES | {"index_dim": 2.5}))
