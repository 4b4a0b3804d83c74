"""Gated attention (Qwen3-Next's output gate), by its properties and against HF transformers' code.

Reference, ported below (not in the package): github.com/huggingface/transformers,
``src/transformers/models/qwen3_next/modeling_qwen3_next.py`` at commit
01cdc6081c7500f9e50c98b1b943c90ecb665db3: ``Qwen3NextAttention.forward`` and
``eager_attention_forward``. The course's MultiHeadAttention has no QK-norm and no RoPE, so the port
takes ``q_norm``, ``k_norm`` and the rotary step as arguments and the comparison passes identities;
with num_key_value_heads == num_heads, ``repeat_kv`` is the identity too.
"""

import pytest
import torch
import torch.nn.functional as F

from mha_course import MultiHeadAttention, causal_mask
from mha_course.inference.gated_attention import GatedMultiHeadAttention, split_query_gate_weight
from mha_course.testing import assert_close


def make(bias=True, seed=0, E=12, H=3):
    torch.manual_seed(seed)
    return GatedMultiHeadAttention(E, H, bias=bias).double().eval()


def ungated_twin(gated: GatedMultiHeadAttention) -> MultiHeadAttention:
    plain = MultiHeadAttention(gated.embed_dim, gated.num_heads, bias=gated.q_proj.bias is not None).double()
    plain.load_state_dict({k: v for k, v in gated.state_dict().items() if not k.startswith("gate_proj")})
    return plain.eval()


# ---- properties ---------------------------------------------------------------------------------


def test_the_gate_scales_each_head_output_before_the_output_projection():
    m = make()
    x = torch.randn(2, 5, 12, dtype=torch.float64)
    out, weights = m(x, mask=causal_mask(5))
    q = m.q_proj(x).view(2, 5, 3, 4).transpose(1, 2)
    k = m.k_proj(x).view(2, 5, 3, 4).transpose(1, 2)
    v = m.v_proj(x).view(2, 5, 3, 4).transpose(1, 2)
    w = torch.softmax((q @ k.transpose(-1, -2) / 2.0).masked_fill(~causal_mask(5), float("-inf")), -1)
    heads = (w @ v).transpose(1, 2).reshape(2, 5, 12)  # (B, T, H D)
    expected = m.out_proj(heads * torch.sigmoid(m.gate_proj(x)))
    assert_close(out, expected)
    assert_close(weights, w, what="the weights are the softmax's: the gate comes after it")


def test_a_gate_at_plus_infinity_is_ungated_attention_and_at_minus_infinity_gives_zeros():
    m = make(bias=True, seed=1)
    x = torch.randn(2, 6, 12, dtype=torch.float64)
    with torch.no_grad():
        m.gate_proj.weight.zero_()
        m.gate_proj.bias.fill_(float("inf"))
        open_out, open_weights = m(x, mask=causal_mask(6))
        plain_out, plain_weights = ungated_twin(m)(x, mask=causal_mask(6))
        assert_close(open_out, plain_out, what="gate open")
        assert_close(open_weights, plain_weights)
        m.gate_proj.bias.fill_(float("-inf"))
        closed_out, _ = m(x, mask=causal_mask(6))
    assert_close(closed_out, m.out_proj.bias.expand(2, 6, 12), what="gate closed: only W_O's bias is left")
    m = make(bias=False, seed=2)
    with torch.no_grad():
        m.gate_proj.weight.fill_(-1e300)  # every logit -inf-like for positive inputs: test a closed gate
        closed_out, _ = m(torch.rand(1, 4, 12, dtype=torch.float64) + 0.1)
    assert float(closed_out.abs().max()) == 0.0


def test_the_gate_is_per_head_and_per_feature():
    m = make(seed=3)
    x = torch.randn(1, 4, 12, dtype=torch.float64)
    gate = m.gate(x)
    assert gate.shape == (1, 3, 4, 4) and bool(((gate > 0) & (gate < 1)).all())
    with torch.no_grad():  # close head 1 only: the output loses exactly head 1's share
        m.gate_proj.weight[4:8].zero_()
        m.gate_proj.bias[4:8].fill_(float("-inf"))
        out, _ = m(x)
        plain = ungated_twin(m)
        plain.head_gate[1] = 0.0
        for rows in (slice(0, 4), slice(8, 12)):
            m.gate_proj.weight[rows].zero_()
            m.gate_proj.bias[rows].fill_(float("inf"))
        out_open_others, _ = m(x)
    assert_close(out_open_others, plain(x)[0])
    assert not torch.allclose(out, ungated_twin(m)(x)[0])


def test_multi_head_attention_is_unchanged_by_the_hook():
    torch.manual_seed(4)
    m = MultiHeadAttention(8, 2).double()
    x = torch.randn(1, 3, 8, dtype=torch.float64)
    heads = torch.randn(1, 2, 3, 4, dtype=torch.float64)
    assert m.gate_head_outputs(heads, x) is heads


def test_split_query_gate_weight_reads_qwens_per_head_layout():
    H, D, E = 3, 2, 5
    fused = torch.arange(2 * H * D * E, dtype=torch.float64).view(2 * H * D, E)
    w_q, w_g = split_query_gate_weight(fused, H)
    for h in range(H):
        assert torch.equal(w_q[h * D : (h + 1) * D], fused[2 * h * D : 2 * h * D + D])
        assert torch.equal(w_g[h * D : (h + 1) * D], fused[2 * h * D + D : 2 * (h + 1) * D])
    b_q, b_g = split_query_gate_weight(torch.arange(2 * H * D, dtype=torch.float64), H)
    assert b_q.tolist() == [0, 1, 4, 5, 8, 9] and b_g.tolist() == [2, 3, 6, 7, 10, 11]
    with pytest.raises(ValueError, match="2 H D"):
        split_query_gate_weight(torch.zeros(10, 5), 3)
    with pytest.raises(TypeError, match="Tensor"):
        split_query_gate_weight([1, 2], 1)
    with pytest.raises(ValueError, match="E=12"):
        make().gate(torch.zeros(1, 2, 11, dtype=torch.float64))


# ---- HF transformers' Qwen3NextAttention, ported ----------------------------------------------------


def eager_attention_forward(query, key, value, attention_mask, scaling, dropout=0.0, training=False):
    attn_weights = torch.matmul(query, key.transpose(2, 3)) * scaling
    if attention_mask is not None:
        causal_mask = attention_mask[:, :, :, : key.shape[-2]]
        attn_weights = attn_weights + causal_mask
    # HF: dtype=torch.float32 (an upcast for half precision); float64 here keeps the comparison's precision
    attn_weights = F.softmax(attn_weights, dim=-1, dtype=torch.float64).to(query.dtype)
    attn_weights = F.dropout(attn_weights, p=dropout, training=training)
    attn_output = torch.matmul(attn_weights, value)
    attn_output = attn_output.transpose(1, 2).contiguous()
    return attn_output, attn_weights


def qwen3_next_attention(w, hidden_states, attention_mask, head_dim, q_norm, k_norm, rotary):
    input_shape = hidden_states.shape[:-1]
    hidden_shape = (*input_shape, -1, head_dim)
    query_states, gate = torch.chunk(
        F.linear(hidden_states, w["q_proj.weight"], w.get("q_proj.bias")).view(*input_shape, -1, head_dim * 2),
        2,
        dim=-1,
    )
    gate = gate.reshape(*input_shape, -1)
    query_states = q_norm(query_states.view(hidden_shape)).transpose(1, 2)
    key_states = k_norm(F.linear(hidden_states, w["k_proj.weight"], w.get("k_proj.bias")).view(hidden_shape))
    key_states = key_states.transpose(1, 2)
    value_states = F.linear(hidden_states, w["v_proj.weight"], w.get("v_proj.bias")).view(hidden_shape).transpose(1, 2)
    query_states, key_states = rotary(query_states, key_states)
    attn_output, attn_weights = eager_attention_forward(
        query_states, key_states, value_states, attention_mask, scaling=head_dim**-0.5
    )
    attn_output = attn_output.reshape(*input_shape, -1).contiguous()
    attn_output = attn_output * torch.sigmoid(gate)
    attn_output = F.linear(attn_output, w["o_proj.weight"], w.get("o_proj.bias"))
    return attn_output, attn_weights


def qwen_weights(m: GatedMultiHeadAttention):
    H, D, E = m.num_heads, m.head_dim, m.embed_dim
    fused = torch.stack([m.q_proj.weight.view(H, D, E), m.gate_proj.weight.view(H, D, E)], 1).reshape(2 * H * D, E)
    w = {"q_proj.weight": fused, "k_proj.weight": m.k_proj.weight, "v_proj.weight": m.v_proj.weight}
    w["o_proj.weight"] = m.out_proj.weight
    if m.q_proj.bias is not None:
        w["q_proj.bias"] = torch.stack([m.q_proj.bias.view(H, D), m.gate_proj.bias.view(H, D)], 1).reshape(-1)
        w |= {"k_proj.bias": m.k_proj.bias, "v_proj.bias": m.v_proj.bias, "o_proj.bias": m.out_proj.bias}
    return w


@pytest.mark.parametrize("bias", [False, True])  # Qwen3-Next: attention_bias=False
def test_gated_attention_matches_qwen3_next_attention(bias):
    m = make(bias=bias, seed=5, E=16, H=2)
    x = torch.randn(2, 7, 16, dtype=torch.float64)
    hf_mask = torch.full((7, 7), float("-inf"), dtype=torch.float64).triu(1)[None, None]  # (1, 1, T, S)
    identity = lambda t: t  # noqa: E731
    with torch.no_grad():
        theirs, their_weights = qwen3_next_attention(
            qwen_weights(m), x, hf_mask, 8, identity, identity, lambda q, k: (q, k)
        )
        ours, weights = m(x, mask=causal_mask(7))
    assert_close(ours, theirs, what="GatedMultiHeadAttention against Qwen3NextAttention")
    assert_close(weights, their_weights)
    w_q, w_g = split_query_gate_weight(qwen_weights(m)["q_proj.weight"], 2)
    assert torch.equal(w_q, m.q_proj.weight) and torch.equal(w_g, m.gate_proj.weight)
