"""DeepSeek Sparse Attention's pieces, by their properties: the indexer's formula, top-k never choosing
the future, sparse MLA with k >= T equal to dense causal MLA, the gathered form equal to the masked one,
and the indexer's KL target."""

import math

import pytest
import torch

from mha_course import causal_mask
from mha_course.inference.lightning_indexer import (
    LightningIndexer,
    causal_top_k,
    indexer_kl_loss,
    lightning_index_scores,
    selection_mask,
)
from mha_course.inference.mla import MultiHeadLatentAttention
from mha_course.inference.sparse_mla import SparseLatentAttention
from mha_course.testing import assert_close


def make(top_k, seed=0, **sizes):
    torch.manual_seed(seed)
    options = dict(embed_dim=24, num_heads=3, latent_dim=10, head_dim=6, rope_dim=4, value_dim=5) | sizes
    return SparseLatentAttention(top_k=top_k, index_heads=3, index_dim=8, **options).double().eval()


def test_index_scores_against_a_loop_over_heads_and_tokens():
    torch.manual_seed(1)
    B, HI, T, S, DI = 2, 3, 4, 6, 5
    q, k, w = torch.randn(B, HI, T, DI).double(), torch.randn(B, S, DI).double(), torch.randn(B, T, HI).double()
    scores = lightning_index_scores(q, k, w, scale=0.5)
    for b in range(B):
        for t in range(T):
            for s in range(S):
                expected = 0.5 * sum(w[b, t, j] * max(0.0, float(q[b, j, t] @ k[b, s])) for j in range(HI))
                if s > t + S - T:
                    assert scores[b, t, s] == float("-inf")
                else:
                    assert math.isclose(float(scores[b, t, s]), float(expected), rel_tol=1e-12, abs_tol=1e-12)


def test_the_indexer_module_is_the_formula_on_its_projections():
    torch.manual_seed(2)
    indexer = LightningIndexer(12, index_heads=2, index_dim=6, rope_dim=0).double()
    x = torch.randn(2, 5, 12, dtype=torch.float64)
    q, k, w = indexer.queries_keys_weights(x)
    assert q.shape == (2, 2, 5, 6) and k.shape == (2, 5, 6) and w.shape == (2, 5, 2)
    assert_close(indexer(x), lightning_index_scores(q, k, w, scale=1 / math.sqrt(6)))
    assert_close(w, indexer.weights_proj(x) / math.sqrt(2))


@pytest.mark.parametrize("k", [1, 3, 7, 50])
def test_top_k_never_picks_the_future_and_keeps_everything_when_k_exceeds_what_is_visible(k):
    torch.manual_seed(3)
    T = 7
    scores = torch.randn(2, T, T)
    scores = scores + 100 * (~causal_mask(T)).float()  # the future scores highest: it must still lose
    indices, valid = causal_top_k(scores, k)
    K = min(k, T)
    assert indices.shape == valid.shape == (2, T, K)
    position = torch.arange(T)[None, :, None]
    assert bool((indices[valid] <= position.expand_as(indices)[valid]).all()), "a valid slot points to the future"
    assert bool((indices[~valid] > position.expand_as(indices)[~valid]).all()), "an invalid slot hides a visible key"
    assert valid.sum(-1).tolist() == [[min(K, t + 1) for t in range(T)]] * 2
    chosen = selection_mask(indices, valid, T)
    for b in range(2):
        for t in range(T):
            visible = scores[b, t, : t + 1]
            best = set(visible.argsort(descending=True)[:K].tolist())
            assert set(torch.nonzero(chosen[b, t]).flatten().tolist()) == best


def test_top_k_ranks_a_visible_key_scored_minus_infinity_above_the_future():
    scores = torch.tensor([[[float("-inf"), 5.0, 9.0]]])  # T = 1 query, the last of S = 3: it sees all three
    indices, valid = causal_top_k(scores, 3)
    assert valid.all() and sorted(indices[0, 0].tolist()) == [0, 1, 2]
    scores = torch.full((1, 2, 2), float("-inf"))
    indices, valid = causal_top_k(scores, 2)
    assert indices[0, 0, 0] == 0 and valid[0, 0].tolist() == [True, False]


def test_queries_that_are_the_last_of_a_longer_cache():
    scores = torch.randn(1, 2, 5)
    indices, valid = causal_top_k(scores, 5)
    assert valid.sum(-1).tolist() == [[4, 5]]  # positions 3 and 4 see 4 and 5 keys


def test_sparse_mla_with_k_at_least_T_is_dense_causal_mla_in_float64():
    sparse = make(top_k=50)
    x = torch.randn(2, 9, 24, dtype=torch.float64)
    dense_out, dense_weights = MultiHeadLatentAttention.forward(sparse, x, causal_mask(9))
    out, weights = sparse(x)
    assert_close(out, dense_out, what="sparse (k >= T) against dense causal MLA")
    assert_close(weights, dense_weights)
    gathered, gathered_weights, indices = sparse.forward_gathered(x)
    assert_close(gathered, dense_out, what="gathered form against dense causal MLA")
    assert gathered_weights.shape == (2, 3, 9, 9)


@pytest.mark.parametrize("k", [1, 2, 4])
def test_the_gathered_form_equals_the_masked_form_and_weights_stay_in_the_selection(k):
    sparse = make(top_k=k, seed=4)
    x = torch.randn(2, 8, 24, dtype=torch.float64)
    with torch.no_grad():
        out, weights = sparse(x)
        gathered, gathered_weights, indices = sparse.forward_gathered(x)
        indices_again, valid, _ = sparse.select(x)
    assert_close(gathered, out, what="gathered against masked")
    chosen = selection_mask(indices_again, valid, 8)[:, None]  # (B, 1, T, T)
    assert float(weights.masked_select(~chosen).abs().max()) == 0.0
    assert_close(weights.sum(-1), torch.ones(2, 3, 8, dtype=torch.float64))
    assert bool((indices == indices_again).all())
    scattered = torch.zeros_like(weights).scatter(-1, indices[:, None].expand(-1, 3, -1, -1), gathered_weights)
    assert_close(scattered, weights, what="gathered weights put back in place")


def test_k_one_attends_to_a_single_token():
    sparse = make(top_k=1, seed=5)
    _, weights = sparse(torch.randn(1, 6, 24, dtype=torch.float64))
    assert ((weights > 0).sum(-1) == 1).all()


def test_kl_loss_is_zero_when_the_indexer_matches_and_positive_otherwise():
    torch.manual_seed(6)
    B, H, T = 2, 3, 5
    logits = torch.randn(B, H, T, T, dtype=torch.float64).masked_fill(~causal_mask(T), float("-inf"))
    weights = torch.softmax(logits, -1)
    target = weights.sum(1) / weights.sum(1).sum(-1, keepdim=True)
    assert float(indexer_kl_loss(torch.log(target), weights)) == pytest.approx(0.0, abs=1e-12)
    scores = torch.randn(B, T, T, dtype=torch.float64).masked_fill(~causal_mask(T), float("-inf"))
    per_query = indexer_kl_loss(scores, weights, reduction="none")
    q = torch.softmax(scores, -1)
    expected = torch.where(target > 0, target * (target.log() - q.log()), torch.zeros(())).sum(-1)
    assert_close(per_query, expected)
    assert float(indexer_kl_loss(scores, weights)) == pytest.approx(float(expected.sum()))
    assert float(indexer_kl_loss(scores, weights, reduction="mean")) == pytest.approx(float(expected.mean()))


def test_kl_loss_trains_the_indexer_only_and_renormalises_over_a_mask():
    torch.manual_seed(7)
    logits = torch.randn(1, 2, 4, 4, dtype=torch.float64, requires_grad=True)
    weights = torch.softmax(logits.masked_fill(~causal_mask(4), float("-inf")), -1)
    scores = torch.randn(1, 4, 4, dtype=torch.float64).masked_fill(~causal_mask(4), float("-inf")).requires_grad_()
    indexer_kl_loss(scores, weights).backward()
    assert logits.grad is None and scores.grad is not None
    keep = causal_mask(4) & ~torch.eye(4, dtype=torch.bool)
    keep[0, 0] = True
    masked = indexer_kl_loss(scores.detach(), weights.detach(), mask=keep, reduction="none")
    target = (weights.detach().sum(1) * keep) / (weights.detach().sum(1) * keep).sum(-1, keepdim=True)
    q = torch.softmax(scores.detach().masked_fill(~keep, float("-inf")), -1)
    expected = torch.where(target > 0, target * (target.log() - q.log()), torch.zeros(())).sum(-1)
    assert_close(masked, expected)


def test_kl_loss_is_infinite_when_the_indexer_excludes_a_weighted_key():
    weights = torch.full((1, 1, 1, 2), 0.5)
    scores = torch.tensor([[[0.0, float("-inf")]]])
    assert indexer_kl_loss(scores, weights) == float("inf")


def test_bad_input_is_refused_with_both_shapes_named():
    indexer = LightningIndexer(8)
    with pytest.raises(ValueError, match="E=8"):
        indexer(torch.randn(1, 3, 7))
    with pytest.raises(ValueError, match="rope_dim"):
        LightningIndexer(8, index_dim=4, rope_dim=6)
    with pytest.raises(ValueError, match="k must"):
        lightning_index_scores(torch.randn(1, 2, 3, 4), torch.randn(1, 3, 5), torch.randn(1, 3, 2))
    with pytest.raises(ValueError, match="weights must"):
        lightning_index_scores(torch.randn(1, 2, 3, 4), torch.randn(1, 3, 4), torch.randn(1, 3, 3))
    with pytest.raises(ValueError, match="T <= S"):
        causal_top_k(torch.randn(1, 4, 3), 2)
    with pytest.raises(ValueError, match="positive int"):
        causal_top_k(torch.randn(1, 3, 3), 0)
    with pytest.raises(TypeError, match="int"):
        causal_top_k(torch.randn(1, 3, 3), 2.0)
    with pytest.raises(ValueError, match="S=3"):
        selection_mask(torch.tensor([[[3]]]), torch.tensor([[[True]]]), 3)
    with pytest.raises(ValueError, match="reduction"):
        indexer_kl_loss(torch.randn(1, 2, 2), torch.rand(1, 1, 2, 2), reduction="avg")
    with pytest.raises(ValueError, match="attention_weights"):
        indexer_kl_loss(torch.randn(1, 2, 2), torch.rand(1, 1, 2, 3))
    with pytest.raises(TypeError, match="bool"):
        make(top_k=2)(torch.randn(1, 3, 24, dtype=torch.float64), mask=torch.zeros(3, 3))
    with pytest.raises(ValueError, match="top_k"):
        SparseLatentAttention(24, 3, 10, top_k=0)
