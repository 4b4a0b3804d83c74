"""Additive (Bahdanau) scoring: against its formula pair by pair, the scorer module, and the toy lookup."""

import math

import pytest
import torch

from mha_course.core.additive import Scorer, additive_scores, fit, lookup_batch
from mha_course.testing import assert_close


def test_additive_scores_against_a_loop_over_pairs():
    torch.manual_seed(0)
    q, k = torch.randn(2, 3, 4, dtype=torch.float64), torch.randn(2, 5, 4, dtype=torch.float64)
    w_q, w_k = torch.randn(4, 6, dtype=torch.float64), torch.randn(4, 6, dtype=torch.float64)
    w, b = torch.randn(6, dtype=torch.float64), torch.randn(6, dtype=torch.float64)
    scores = additive_scores(q, k, w_q, w_k, w, b)
    assert scores.shape == (2, 3, 5)
    for n in range(2):
        for i in range(3):
            for j in range(5):
                hidden = [math.tanh(float(q[n, i] @ w_q[:, a] + k[n, j] @ w_k[:, a] + b[a])) for a in range(6)]
                assert float(scores[n, i, j]) == pytest.approx(sum(hh * float(w[a]) for a, hh in enumerate(hidden)))
    assert_close(additive_scores(q, k, w_q, w_k, w), torch.tanh((q @ w_q)[:, :, None] + (k @ w_k)[:, None]) @ w)


def test_scorer_modules_attend_and_mask():
    torch.manual_seed(1)
    q, k, v = torch.randn(2, 3, 8), torch.randn(2, 5, 8), torch.randn(2, 5, 7)
    for kind in ("dot", "additive"):
        scorer = Scorer(8, 4, kind)
        out, weights = scorer(q, k, v, mask=torch.tensor([True, True, False, True, False]))
        assert out.shape == (2, 3, 7) and weights.shape == (2, 3, 5)
        assert_close(weights.sum(-1), torch.ones(2, 3))
        assert float(weights[..., [2, 4]].abs().max().detach()) == 0.0
    dot = Scorer(8, 4, "dot")
    assert_close(dot.scores(q, k), (q @ dot.w_q) @ (k @ dot.w_k).transpose(-2, -1) / 2.0)


@pytest.mark.slow
def test_lookup_is_solvable_and_both_scorers_learn_it():
    q, k, target = lookup_batch(200, generator=torch.Generator().manual_seed(0), noise=0.0)
    relation = torch.linalg.qr(torch.randn(16, 16, generator=torch.Generator().manual_seed(0)))[0]
    assert torch.equal(torch.cdist(q @ relation, k)[:, 0].argmin(-1), target)  # without noise, q R is the key itself
    for kind in ("dot", "additive"):
        torch.manual_seed(2)
        curve = fit(Scorer(16, 32, kind), steps=50, batch_size=32)
        assert curve[-1] > 0.5, (kind, curve)


def test_bad_inputs_name_what_was_expected():
    with pytest.raises(ValueError, match="kind must be"):
        Scorer(4, 4, "cosine")
    with pytest.raises(ValueError, match=r"w_q and w_k \(D, A\)"):
        additive_scores(torch.randn(2, 4), torch.randn(3, 4), torch.randn(5, 2), torch.randn(4, 2), torch.randn(2))
    with pytest.raises(ValueError, match=r"\(A,\) = \(2,\)"):
        additive_scores(
            torch.randn(2, 4), torch.randn(3, 4), torch.randn(4, 2), torch.randn(4, 2), torch.randn(2), torch.randn(3)
        )
    with pytest.raises(ValueError, match="positive"):
        lookup_batch(0)
