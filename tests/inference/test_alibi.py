"""ALiBi: the paper's slopes, the bias against a loop, the module against plain attention with the bias."""

import math

import pytest
import torch

from mha_course import MultiHeadAttention, attention_loop_reference, causal_mask
from mha_course.inference.alibi import AlibiMultiHeadAttention, alibi_bias, alibi_slopes, use_alibi
from mha_course.models.model import TinyTransformer
from mha_course.testing import assert_close


def paper_slopes(n):
    """The ALiBi paper's own recursive get_slopes, transcribed."""

    def power_of_2(n):
        start = 2 ** (-(2 ** -(math.log2(n) - 3)))
        return [start * start**i for i in range(n)]

    if math.log2(n).is_integer():
        return power_of_2(n)
    closest = 2 ** math.floor(math.log2(n))
    return power_of_2(closest) + paper_slopes(2 * closest)[0::2][: n - closest]


@pytest.mark.parametrize("H", [1, 2, 3, 4, 6, 8, 12, 16, 20])
def test_slopes_match_the_papers_code(H):
    assert_close(alibi_slopes(H, torch.float64), torch.tensor(paper_slopes(H), dtype=torch.float64))


def test_eight_heads_halve_from_one_half():
    assert alibi_slopes(8).tolist() == [2.0**-i for i in range(1, 9)]


def test_bias_against_a_loop_including_queries_at_the_end():
    H, T, S = 3, 4, 7
    slopes = alibi_slopes(H, torch.float64)
    for causal in (True, False):
        bias = alibi_bias(H, T, S, causal=causal, dtype=torch.float64)
        assert bias.shape == (H, T, S)
        for h in range(H):
            for i in range(T):
                p = i + S - T
                for j in range(S):
                    want = -math.inf if causal and j > p else -float(slopes[h]) * abs(p - j)
                    assert float(bias[h, i, j]) == pytest.approx(want)


def test_alibi_module_is_plain_attention_plus_the_bias():
    torch.manual_seed(0)
    mha = AlibiMultiHeadAttention(16, 4).double().eval()
    x = torch.randn(2, 5, 16, dtype=torch.float64)
    out, weights = mha(x, mask=causal_mask(5))
    q = mha.q_proj(x).view(2, 5, 4, 4).transpose(1, 2)  # (B, H, T, D)
    k = mha.k_proj(x).view(2, 5, 4, 4).transpose(1, 2)
    v = mha.v_proj(x).view(2, 5, 4, 4).transpose(1, 2)
    ref_heads, ref_weights = attention_loop_reference(q, k, v, mask=alibi_bias(4, 5, dtype=torch.float64))
    assert_close(weights, ref_weights)
    assert_close(out, mha.out_proj(ref_heads.transpose(1, 2).reshape(2, 5, 16)))


def test_alibi_module_takes_padding_and_3d_masks():
    torch.manual_seed(1)
    mha = AlibiMultiHeadAttention(8, 2).eval()
    x = torch.randn(2, 4, 8)
    pad = torch.tensor([[True, True, True, False], [True, True, False, False]])
    _, w4 = mha(x, mask=pad[:, None, None, :])
    _, w3 = mha(x, mask=pad[:, None, :].expand(2, 4, 4))
    assert_close(w4, w3)
    assert float(w4[..., 3].abs().max().detach()) == 0.0 and float(w4[1, ..., 2:].abs().max().detach()) == 0.0


def test_use_alibi_keeps_weights_and_refuses_models_with_positions():
    torch.manual_seed(2)
    model = TinyTransformer(10, 8, embed_dim=16, num_heads=4, num_layers=2, positions="none", causal=True)
    state = {k: v.clone() for k, v in model.state_dict().items()}
    use_alibi(model)
    assert all(isinstance(b.attn, AlibiMultiHeadAttention) for b in model.blocks)
    assert all(torch.equal(v, model.state_dict()[k]) for k, v in state.items())
    logits, weights = model(torch.randint(10, (2, 8)))
    assert logits.shape == (2, 8, 10) and torch.all(weights.triu(1) == 0)
    with pytest.raises(TypeError, match="positions='none'"):
        use_alibi(TinyTransformer(10, 8, embed_dim=16, num_heads=4, positions="learned"))
    with pytest.raises(TypeError, match="MultiHeadAttention"):
        use_alibi(torch.nn.Linear(2, 2))


def test_bad_inputs_name_what_was_expected():
    with pytest.raises(ValueError, match="positive"):
        alibi_slopes(0)
    with pytest.raises(TypeError, match="int"):
        alibi_slopes(2.0)
    with pytest.raises(ValueError, match="S must be >= T"):
        alibi_bias(2, 5, 3)
    with pytest.raises(ValueError, match=r"\(H,\) = \(2,\)"):
        alibi_bias(2, 3, slopes=torch.ones(3))
    with pytest.raises(ValueError, match="T <= S"):
        AlibiMultiHeadAttention(8, 2)(torch.randn(1, 4, 8), torch.randn(1, 2, 8))
    assert isinstance(MultiHeadAttention(8, 2), torch.nn.Module)
