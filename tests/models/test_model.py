"""The tiny transformer: shapes, causality, permutation equivariance, rotary attention, ablation gates."""

import pytest
import torch

from mha_course.core.attention import scaled_dot_product_attention
from mha_course.core.mha import MultiHeadAttention
from mha_course.core.positions import apply_rotary
from mha_course.inference.variants import GroupedQueryAttention, repeat_kv
from mha_course.models.model import (
    EncoderDecoder,
    GroupedSelfAttention,
    RotaryMultiHeadAttention,
    TinyTransformer,
    build_model,
    run_model,
)
from mha_course.models.tasks import get_task
from mha_course.testing import assert_close


@pytest.mark.parametrize("positions", ["none", "sinusoidal", "learned", "rotary"])
def test_shapes_and_attention_rows(positions):
    torch.manual_seed(0)
    model = TinyTransformer(vocab_size=11, max_len=9, embed_dim=16, num_heads=4, num_layers=3, positions=positions)
    tokens = torch.randint(11, (2, 7))
    logits, attention = model(tokens)
    assert logits.shape == (2, 7, 11)
    assert attention.shape == (3, 2, 4, 7, 7)  # (L, B, H, T, S)
    assert_close(attention.sum(-1), torch.ones(3, 2, 4, 7))


def test_causal_model_ignores_the_future():
    torch.manual_seed(0)
    model = TinyTransformer(13, 8, embed_dim=16, num_heads=2, num_layers=2, causal=True).eval()
    a = torch.randint(13, (1, 8))
    b = a.clone()
    b[0, 5:] = (b[0, 5:] + 1) % 13
    la, wa = model(a)
    lb, _ = model(b)
    assert_close(la[:, :5], lb[:, :5])
    assert not torch.allclose(la[:, 5:], lb[:, 5:])
    assert (wa[..., 0, 1:] == 0).all()


def test_without_positions_the_model_is_permutation_equivariant():
    torch.manual_seed(0)
    plain = TinyTransformer(10, 8, embed_dim=16, num_heads=2, num_layers=2, positions="none").eval()
    learned = TinyTransformer(10, 8, embed_dim=16, num_heads=2, num_layers=2, positions="learned").eval()
    tokens = torch.randint(10, (3, 8))
    perm = torch.randperm(8)
    out, _ = plain(tokens)
    out_perm, _ = plain(tokens[:, perm])
    assert_close(out_perm, out[:, perm])
    with torch.no_grad():
        learned.embed.positions.weight.normal_()
    out, _ = learned(tokens)
    out_perm, _ = learned(tokens[:, perm])
    assert not torch.allclose(out_perm, out[:, perm], atol=1e-4)


def test_rotary_attention_equals_sdpa_on_rotated_heads():
    torch.manual_seed(0)
    mha = RotaryMultiHeadAttention(16, 4).eval()
    x = torch.randn(2, 6, 16)
    out, weights = mha(x)
    q = apply_rotary(mha.q_proj(x).view(2, 6, 4, 4).transpose(1, 2))  # (B, H, T, D)
    k = apply_rotary(mha.k_proj(x).view(2, 6, 4, 4).transpose(1, 2))
    v = mha.v_proj(x).view(2, 6, 4, 4).transpose(1, 2)
    heads, expected_weights = scaled_dot_product_attention(q, k, v)
    assert_close(weights, expected_weights)
    assert_close(out, mha.out_proj(heads.transpose(1, 2).reshape(2, 6, 16)))


def test_rotary_model_scores_are_shift_invariant():
    # With rotary positions and no other position signal, a sequence of identical tokens gives every
    # query the same scores for the same offset: the weight matrix is constant along diagonals.
    torch.manual_seed(0)
    mha = RotaryMultiHeadAttention(16, 2).eval()
    x = torch.randn(1, 1, 16).expand(1, 6, 16)
    _, weights = mha(x)
    scores = torch.log(weights[0, 0])  # log-softmax differs from scores by a per-row constant
    centred = scores - scores[:, :1]
    for offset in range(1, 3):
        diagonal = torch.diagonal(centred, offset=offset) - torch.diagonal(centred, offset=0)[:-offset]
        assert_close(diagonal, diagonal[:1].expand_as(diagonal))


def test_head_gate_switches_a_head_off():
    torch.manual_seed(0)
    model = TinyTransformer(10, 6, embed_dim=16, num_heads=4, num_layers=1).eval()
    tokens = torch.randint(10, (2, 6))
    reference, _ = model(tokens)
    attn = model.attention_modules()[0]
    assert isinstance(attn, MultiHeadAttention)
    attn.head_gate[2] = 0
    ablated, _ = model(tokens)
    attn.head_gate[2] = 1
    assert not torch.allclose(reference, ablated)
    assert_close(model(tokens)[0], reference)
    # switching a head off equals zeroing its slice of the output projection's input
    with torch.no_grad():
        attn.out_proj.weight[:, 8:12] = 0
    assert_close(model(tokens)[0], ablated)


def test_encoder_decoder_shapes_causality_and_padding():
    torch.manual_seed(0)
    task = get_task("translate")
    model = build_model(task, embed_dim=16, num_heads=2).eval()
    assert isinstance(model, EncoderDecoder)
    data = task.sample(4, 0)
    logits, attention = model(data.source, data.inputs, data.source_lengths)
    S, T = data.source.shape[1], data.inputs.shape[1]
    assert logits.shape == (4, T, task.vocab_size)
    assert attention["cross"].shape == (1, 4, 2, T, S)
    assert attention["decoder"].shape == (1, 4, 2, T, T)
    assert (torch.triu(attention["decoder"][0, 0, 0], 1) == 0).all()
    for b in range(4):
        n = int(data.source_lengths[b])
        assert (attention["cross"][:, b, :, :, n:] == 0).all()  # padding gets no weight
    _, cross = run_model(model, data)
    assert_close(cross, attention["cross"])
    model.mask_source_padding = False
    _, unmasked = model(data.source, data.inputs, data.source_lengths)
    short = int(data.source_lengths.argmin())
    if data.source_lengths[short] < S:
        assert (unmasked["cross"][:, short, :, :, int(data.source_lengths[short]) :] > 0).all()


def test_bad_inputs_raise():
    model = TinyTransformer(10, 6, embed_dim=16, num_heads=4)
    with pytest.raises(ValueError, match="max_len"):
        model(torch.zeros(1, 7, dtype=torch.long))
    with pytest.raises(TypeError, match="long"):
        model(torch.zeros(1, 3))
    with pytest.raises(ValueError, match=r"\(B, T\)"):
        model(torch.zeros(3, dtype=torch.long))
    with pytest.raises(ValueError, match="positions"):
        TinyTransformer(10, 6, positions="alibi")


@pytest.mark.parametrize("num_kv_heads", [1, 2, 4])
def test_grouped_query_model_shares_key_value_heads(num_kv_heads):
    torch.manual_seed(0)
    model = TinyTransformer(
        10, 8, embed_dim=16, num_heads=4, num_layers=2, num_kv_heads=num_kv_heads, causal=True
    ).eval()
    attn = model.attention_modules()[0]
    assert isinstance(attn, GroupedSelfAttention)
    assert attn.k_proj.out_features == num_kv_heads * 4 and attn.v_proj.out_features == num_kv_heads * 4
    tokens = torch.randint(10, (3, 8))
    logits, weights = model(tokens)
    assert logits.shape == (3, 8, 10) and weights.shape == (2, 3, 4, 8, 8)
    assert (torch.triu(weights[0, 0, 0], 1) == 0).all()  # causal
    # the module computes grouped-query attention: same as the variants' module with the same weights
    x = torch.randn(2, 5, 16)
    reference = GroupedQueryAttention(16, 4, num_kv_heads)
    reference.load_state_dict(attn.state_dict())
    assert_close(attn(x)[0], reference(x)[0])
    # query heads h and h' of one group read the same keys: with K repeated, it is ordinary attention
    q = attn.q_proj(x).view(2, 5, 4, 4).transpose(1, 2)  # (B, H, T, D)
    k = attn.k_proj(x).view(2, 5, num_kv_heads, 4).transpose(1, 2)  # (B, G, T, D)
    v = attn.v_proj(x).view(2, 5, num_kv_heads, 4).transpose(1, 2)
    heads, expected_weights = scaled_dot_product_attention(q, repeat_kv(k, 4), repeat_kv(v, 4))
    assert_close(attn(x)[1], expected_weights)
    assert_close(attn(x)[0], attn.out_proj(heads.transpose(1, 2).reshape(2, 5, 16)))


def test_grouped_query_model_gates_and_rejects_bad_configs():
    torch.manual_seed(0)
    model = TinyTransformer(10, 6, embed_dim=16, num_heads=4, num_layers=1, num_kv_heads=2).eval()
    tokens = torch.randint(10, (2, 6))
    reference, _ = model(tokens)
    attn = model.attention_modules()[0]
    attn.head_gate[1] = 0
    ablated, _ = model(tokens)
    attn.head_gate[1] = 1
    assert not torch.allclose(reference, ablated)
    with torch.no_grad():
        attn.out_proj.weight[:, 4:8] = 0
    assert_close(model(tokens)[0], ablated)
    with pytest.raises(ValueError, match="rotary"):
        TinyTransformer(10, 6, embed_dim=16, num_heads=4, positions="rotary", num_kv_heads=2)
    with pytest.raises(ValueError, match="H % G"):
        TinyTransformer(10, 6, embed_dim=16, num_heads=4, num_kv_heads=3)
    with pytest.raises(ValueError, match="self-attention only"):
        attn(torch.randn(1, 3, 16), torch.randn(1, 4, 16))
