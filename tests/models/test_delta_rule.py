"""The gated delta rule: recurrent and chunked forms agree, special cases reduce to what they must, gradients
flow, and both forms match the upstream reference code (ported below, in this test file only)."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from mha_course.inference.mla import cache_numbers_per_token
from mha_course.models.delta_rule import (
    cache_bytes,
    gated_delta_rule_chunked,
    gated_delta_rule_recurrent,
    l2_normalize,
)

F64 = dict(atol=1e-10, rtol=1e-10)  # float64 precision: the two forms differ only by rounding


def assert_close(actual, expected, *, atol, rtol):
    torch.testing.assert_close(actual, expected, atol=atol, rtol=rtol)


# ---------------------------------------------------------------------------------------------------------------
# Reference 1: flash-linear-attention, fla/ops/gated_delta_rule/naive.py at commit
# 39f2d4029eb29a16d963b39dda20a2a0cfdad0f7 (github.com/fla-org/flash-linear-attention; MIT licence,
# Copyright (c) 2023-2026 Songlin Yang, Yu Zhang, Zhiyuan Li). Ported as written, with three changes so that the
# comparison can be made in float64: the inputs keep their dtype (upstream casts to float32), the identity and the
# decay mask take that dtype (upstream: torch.float / .float()), and einops' rearrange is spelled as reshape.
# Layout (B, T, H, D); state (B, H, K, V).
# ---------------------------------------------------------------------------------------------------------------


def fla_naive_recurrent_gated_delta_rule(q, k, v, beta, g, scale=None, initial_state=None, output_final_state=False):
    q, k, v, beta, g = map(lambda x: x.transpose(1, 2).contiguous(), [q, k, v, beta, g])
    B, H, T, K, V = *k.shape, v.shape[-1]
    o = torch.zeros(B, H, T, V).to(v)
    h = torch.zeros(B, H, K, V).to(v)
    if initial_state is not None:
        h = initial_state.to(v)
    if scale is None:
        scale = 1 / (q.shape[-1] ** 0.5)
    q = q * scale

    for i in range(T):
        b_q = q[:, :, i]
        b_k = k[:, :, i]
        b_v = v[:, :, i].clone()
        h = h.clone() * g[:, :, i].exp()[..., None, None]
        b_beta = beta[:, :, i]
        b_v = b_v - (h.clone() * b_k[..., None]).sum(-2)
        b_v = b_v * b_beta[..., None]
        h = h.clone() + b_k.unsqueeze(-1) * b_v.unsqueeze(-2)
        o[:, :, i] = torch.einsum("bhd,bhdm->bhm", b_q, h)

    if not output_final_state:
        h = None
    o = o.transpose(1, 2).contiguous()
    return o, h


def fla_naive_chunk_gated_delta_rule(
    q, k, v, g, beta, chunk_size=64, scale=None, initial_state=None, output_final_state=False
):
    BT = chunk_size
    if scale is None:
        scale = 1 / (q.shape[-1] ** 0.5)

    q, k, v, beta, g = map(lambda x: x.transpose(1, 2).contiguous(), [q, k, v, beta, g])
    dtype = q.dtype

    T = q.shape[-2]
    pad_len = (BT - (T % BT)) % BT
    if pad_len > 0:
        q = F.pad(q, (0, 0, 0, pad_len))
        k = F.pad(k, (0, 0, 0, pad_len))
        v = F.pad(v, (0, 0, 0, pad_len))
        beta = F.pad(beta, (0, pad_len))
        g = F.pad(g, (0, pad_len))

    decay = g
    chunk_size = BT
    b, h, l, d_k = q.shape
    d_v = v.shape[-1]
    q = q * scale
    v = v * beta[..., None]
    k_beta = k * beta[..., None]
    assert l % chunk_size == 0

    def rearrange(x):  # 'b h (n c) d -> b h n c d'
        return x.reshape(x.shape[0], x.shape[1], -1, chunk_size, x.shape[-1])

    # note that diagonal is masked.
    mask = torch.triu(torch.ones(chunk_size, chunk_size, dtype=torch.bool, device=q.device), diagonal=0)
    q, k, v, k_beta, decay = map(rearrange, [q, k, v, k_beta, decay.unsqueeze(-1)])
    decay = decay.squeeze(-1).cumsum(-1)
    decay_exp = decay.exp()[..., None]
    L_mask = ((decay.unsqueeze(-1) - decay.unsqueeze(-2)).tril().exp().to(dtype)).tril()
    attn = -((k_beta @ k.transpose(-1, -2)) * L_mask).masked_fill(mask, 0)
    for i in range(1, chunk_size):
        attn[..., i, :i] = attn[..., i, :i].clone() + (attn[..., i, :i, None].clone() * attn[..., :i, :i].clone()).sum(
            -2
        )
    attn = attn + torch.eye(chunk_size, dtype=dtype, device=q.device)
    k_cumsum = attn @ v
    k_cumdecay = attn @ (k_beta * decay_exp)
    v = k_cumsum

    S = k.new_zeros(b, h, d_k, d_v)
    if initial_state is not None:
        S = initial_state.to(dtype)

    o = torch.zeros_like(v)
    mask = torch.triu(torch.ones(chunk_size, chunk_size, dtype=torch.bool, device=q.device), diagonal=1)
    for i in range(0, l // chunk_size):
        q_i, k_i, v_i = q[:, :, i], k[:, :, i], v[:, :, i]
        attn = (q_i @ k_i.transpose(-1, -2) * L_mask[:, :, i]).masked_fill_(mask, 0)
        v_prime = (k_cumdecay[:, :, i]) @ S
        v_new = v_i - v_prime
        o_inter = (q_i * decay[:, :, i, :, None].exp()) @ S
        o[:, :, i] = o_inter + attn @ v_new
        S = (
            S * decay[:, :, i, -1, None, None].exp()
            + (k_i * (decay[:, :, i, -1, None] - decay[:, :, i]).exp()[..., None]).transpose(-1, -2) @ v_new
        )
    if not output_final_state:
        S = None

    o = o.reshape(o.shape[0], o.shape[1], -1, o.shape[-1])  # 'b h n c d -> b h (n c) d'
    o = o[:, :, :T]
    o = o.transpose(1, 2)
    return o, S


# ---------------------------------------------------------------------------------------------------------------
# Reference 2: HF transformers, src/transformers/models/qwen3_next/modeling_qwen3_next.py at commit
# 7515843b617551b008901620ca58f1208bbc330d (github.com/huggingface/transformers; Apache-2.0, Copyright the
# Qwen team and The HuggingFace Inc. team): l2norm, torch_chunk_gated_delta_rule and
# torch_recurrent_gated_delta_rule, Qwen3-Next's fallbacks when the fla kernels are absent. Ported as written except
# that the inputs keep their dtype (upstream casts to float32) so that the comparison can be made in float64.
# Layout (B, T, H, D); state (B, H, K, V).
# ---------------------------------------------------------------------------------------------------------------


def hf_l2norm(x, dim=-1, eps=1e-6):
    inv_norm = torch.rsqrt((x * x).sum(dim=dim, keepdim=True) + eps)
    return x * inv_norm


def hf_torch_chunk_gated_delta_rule(
    query,
    key,
    value,
    g,
    beta,
    chunk_size=64,
    initial_state=None,
    output_final_state=False,
    use_qk_l2norm_in_kernel=False,
):
    initial_dtype = query.dtype
    if use_qk_l2norm_in_kernel:
        query = hf_l2norm(query, dim=-1, eps=1e-6)
        key = hf_l2norm(key, dim=-1, eps=1e-6)
    query, key, value, beta, g = [x.transpose(1, 2).contiguous() for x in (query, key, value, beta, g)]

    batch_size, num_heads, sequence_length, k_head_dim = key.shape
    v_head_dim = value.shape[-1]
    pad_size = (chunk_size - sequence_length % chunk_size) % chunk_size
    query = F.pad(query, (0, 0, 0, pad_size))
    key = F.pad(key, (0, 0, 0, pad_size))
    value = F.pad(value, (0, 0, 0, pad_size))
    beta = F.pad(beta, (0, pad_size))
    g = F.pad(g, (0, pad_size))
    total_sequence_length = sequence_length + pad_size
    scale = 1 / (query.shape[-1] ** 0.5)
    query = query * scale

    v_beta = value * beta.unsqueeze(-1)
    k_beta = key * beta.unsqueeze(-1)
    # reshape to chunks
    query, key, value, k_beta, v_beta = [
        x.reshape(x.shape[0], x.shape[1], -1, chunk_size, x.shape[-1]) for x in (query, key, value, k_beta, v_beta)
    ]
    g = g.reshape(g.shape[0], g.shape[1], -1, chunk_size)
    mask = torch.triu(torch.ones(chunk_size, chunk_size, dtype=torch.bool, device=query.device), diagonal=0)

    # chunk decay
    g = g.cumsum(dim=-1)
    decay_mask = ((g.unsqueeze(-1) - g.unsqueeze(-2)).tril().exp()).tril()
    attn = -((k_beta @ key.transpose(-1, -2)) * decay_mask).masked_fill(mask, 0)
    for i in range(1, chunk_size):
        row = attn[..., i, :i].clone()
        sub = attn[..., :i, :i].clone()
        attn[..., i, :i] = row + (row.unsqueeze(-1) * sub).sum(-2)
    attn = attn + torch.eye(chunk_size, dtype=attn.dtype, device=attn.device)
    value = attn @ v_beta
    k_cumdecay = attn @ (k_beta * g.exp().unsqueeze(-1))
    last_recurrent_state = (
        torch.zeros(batch_size, num_heads, k_head_dim, v_head_dim).to(value)
        if initial_state is None
        else initial_state.to(value)
    )
    core_attn_out = torch.zeros_like(value)
    mask = torch.triu(torch.ones(chunk_size, chunk_size, dtype=torch.bool, device=query.device), diagonal=1)

    # for each chunk
    for i in range(0, total_sequence_length // chunk_size):
        q_i, k_i, v_i = query[:, :, i], key[:, :, i], value[:, :, i]
        attn = (q_i @ k_i.transpose(-1, -2) * decay_mask[:, :, i]).masked_fill_(mask, 0)
        v_prime = (k_cumdecay[:, :, i]) @ last_recurrent_state
        v_new = v_i - v_prime
        attn_inter = (q_i * g[:, :, i, :, None].exp()) @ last_recurrent_state
        core_attn_out[:, :, i] = attn_inter + attn @ v_new
        last_recurrent_state = (
            last_recurrent_state * g[:, :, i, -1, None, None].exp()
            + (k_i * (g[:, :, i, -1, None] - g[:, :, i]).exp()[..., None]).transpose(-1, -2) @ v_new
        )

    if not output_final_state:
        last_recurrent_state = None
    core_attn_out = core_attn_out.reshape(core_attn_out.shape[0], core_attn_out.shape[1], -1, core_attn_out.shape[-1])
    core_attn_out = core_attn_out[:, :, :sequence_length]
    core_attn_out = core_attn_out.transpose(1, 2).contiguous().to(initial_dtype)
    return core_attn_out, last_recurrent_state


def hf_torch_recurrent_gated_delta_rule(
    query, key, value, g, beta, initial_state, output_final_state, use_qk_l2norm_in_kernel=False
):
    initial_dtype = query.dtype
    if use_qk_l2norm_in_kernel:
        query = hf_l2norm(query, dim=-1, eps=1e-6)
        key = hf_l2norm(key, dim=-1, eps=1e-6)
    query, key, value, beta, g = [x.transpose(1, 2).contiguous() for x in (query, key, value, beta, g)]

    batch_size, num_heads, sequence_length, k_head_dim = key.shape
    v_head_dim = value.shape[-1]
    scale = 1 / (query.shape[-1] ** 0.5)
    query = query * scale

    core_attn_out = torch.zeros(batch_size, num_heads, sequence_length, v_head_dim).to(value)
    last_recurrent_state = (
        torch.zeros(batch_size, num_heads, k_head_dim, v_head_dim).to(value)
        if initial_state is None
        else initial_state.to(value)
    )

    for i in range(sequence_length):
        q_t = query[:, :, i]
        k_t = key[:, :, i]
        v_t = value[:, :, i]
        g_t = g[:, :, i].exp().unsqueeze(-1).unsqueeze(-1)
        beta_t = beta[:, :, i].unsqueeze(-1)

        last_recurrent_state = last_recurrent_state * g_t
        kv_mem = (last_recurrent_state * k_t.unsqueeze(-1)).sum(dim=-2)
        delta = (v_t - kv_mem) * beta_t
        last_recurrent_state = last_recurrent_state + k_t.unsqueeze(-1) * delta.unsqueeze(-2)
        core_attn_out[:, :, i] = (last_recurrent_state * q_t.unsqueeze(-1)).sum(dim=-2)

    if not output_final_state:
        last_recurrent_state = None
    core_attn_out = core_attn_out.transpose(1, 2).contiguous().to(initial_dtype)
    return core_attn_out, last_recurrent_state


# ---------------------------------------------------------------------------------------------------------------
# The course's functions
# ---------------------------------------------------------------------------------------------------------------


def _inputs(B=2, H=3, T=9, Dk=4, Dv=5, gate="head", state=True, seed=0, dtype=torch.float64):
    """q, k (L2-normalised), v, beta in (0, 1), g <= 0 ((B, H, T), (B, H, T, Dk) or None), a state or None."""
    gen = torch.Generator().manual_seed(seed)
    q = torch.randn(B, H, T, Dk, generator=gen, dtype=dtype)
    k = l2_normalize(torch.randn(B, H, T, Dk, generator=gen, dtype=dtype))
    v = torch.randn(B, H, T, Dv, generator=gen, dtype=dtype)
    beta = torch.rand(B, H, T, generator=gen, dtype=dtype)
    g = {
        "head": -torch.rand(B, H, T, generator=gen, dtype=dtype),
        "channel": -2 * torch.rand(B, H, T, Dk, generator=gen, dtype=dtype),
        None: None,
    }[gate]
    s0 = torch.randn(B, H, Dk, Dv, generator=gen, dtype=dtype) if state else None
    return q, k, v, beta, g, s0


def _bthd(x):
    return x.transpose(1, 2)  # the course's (B, H, T, ...) <-> the references' (B, T, H, ...)


@pytest.mark.parametrize(
    "B,H,T,C", [(1, 1, 1, 4), (2, 3, 9, 4), (1, 2, 16, 4), (2, 1, 13, 16), (1, 2, 7, 1), (3, 2, 20, 7)]
)
@pytest.mark.parametrize("gate", ["head", "channel", None])
@pytest.mark.parametrize("state", [True, False])
@pytest.mark.parametrize("delta", [True, False])
def test_chunked_equals_recurrent_to_float64_precision(B, H, T, C, gate, state, delta):
    q, k, v, beta, g, s0 = _inputs(B, H, T, gate=gate, state=state, seed=T * 31 + C)
    o_rec, s_rec = gated_delta_rule_recurrent(q, k, v, beta, g, initial_state=s0, delta=delta)
    o_chk, s_chk = gated_delta_rule_chunked(q, k, v, beta, g, initial_state=s0, chunk_size=C, delta=delta)
    assert o_rec.shape == (B, H, T, 5) and s_rec.shape == (B, H, 4, 5)
    assert_close(o_chk, o_rec, **F64)
    assert_close(s_chk, s_rec, **F64)


@pytest.mark.parametrize("T,C", [(1, 4), (8, 4), (11, 4), (5, 8), (17, 16)])
@pytest.mark.parametrize("state", [True, False])
def test_both_forms_match_flash_linear_attentions_naive_reference(T, C, state):
    q, k, v, beta, g, s0 = _inputs(T=T, state=state, seed=T + 100 * C)
    o_rec, s_rec = gated_delta_rule_recurrent(q, k, v, beta, g, initial_state=s0)
    o_chk, s_chk = gated_delta_rule_chunked(q, k, v, beta, g, initial_state=s0, chunk_size=C)
    bt = [_bthd(x) for x in (q, k, v, beta, g)]
    ref_o, ref_s = fla_naive_recurrent_gated_delta_rule(*bt, initial_state=s0, output_final_state=True)
    assert_close(_bthd(o_rec), ref_o, **F64)
    assert_close(s_rec, ref_s, **F64)
    q_, k_, v_, beta_, g_ = bt
    ref_o, ref_s = fla_naive_chunk_gated_delta_rule(
        q_, k_, v_, g_, beta_, chunk_size=C, initial_state=s0, output_final_state=True
    )
    assert_close(_bthd(o_chk), ref_o, **F64)
    assert_close(s_chk, ref_s, **F64)


@pytest.mark.parametrize("T,C", [(1, 4), (12, 4), (10, 4), (3, 64)])
@pytest.mark.parametrize("state", [True, False])
def test_both_forms_match_qwen3_next_in_hf_transformers_with_l2_normalised_q_and_k(T, C, state):
    q, k, v, beta, g, s0 = _inputs(T=T, state=state, seed=T + 7 * C)
    k = 3 * k  # not normalised: the functions must normalise
    q_, k_, v_, beta_, g_ = (_bthd(x) for x in (q, k, v, beta, g))
    ref_o, ref_s = hf_torch_recurrent_gated_delta_rule(q_, k_, v_, g_, beta_, s0, True, use_qk_l2norm_in_kernel=True)
    o, s = gated_delta_rule_recurrent(q, k, v, beta, g, initial_state=s0, normalize_qk=True)
    assert_close(_bthd(o), ref_o, **F64)
    assert_close(s, ref_s, **F64)
    ref_o, ref_s = hf_torch_chunk_gated_delta_rule(
        q_, k_, v_, g_, beta_, chunk_size=C, initial_state=s0, output_final_state=True, use_qk_l2norm_in_kernel=True
    )
    o, s = gated_delta_rule_chunked(q, k, v, beta, g, initial_state=s0, normalize_qk=True, chunk_size=C)
    assert_close(_bthd(o), ref_o, **F64)
    assert_close(s, ref_s, **F64)


def test_the_reference_comparison_can_fail():
    """Another rule on the same inputs (linear attention without the read-back) is far from the reference."""
    q, k, v, beta, g, s0 = _inputs(T=6)
    ref_o, _ = fla_naive_recurrent_gated_delta_rule(*(_bthd(x) for x in (q, k, v, beta, g)), initial_state=s0)
    without_delta, _ = gated_delta_rule_recurrent(q, k, v, beta, g, initial_state=s0, delta=False)
    assert (_bthd(without_delta) - ref_o).abs().max() > 1e-2


def test_the_references_pass_their_float32_reference_too():
    """In float32 (the references' own dtype) the chunked form still follows the recurrence closely."""
    q, k, v, beta, g, s0 = _inputs(T=33, dtype=torch.float32)
    o_rec, s_rec = gated_delta_rule_recurrent(q, k, v, beta, g, initial_state=s0)
    o_chk, s_chk = gated_delta_rule_chunked(q, k, v, beta, g, initial_state=s0, chunk_size=8)
    assert_close(o_chk, o_rec, atol=1e-4, rtol=1e-4)
    assert_close(s_chk, s_rec, atol=1e-4, rtol=1e-4)


@pytest.mark.parametrize("form", ["recurrent", "chunked"])
@pytest.mark.parametrize("gate", ["head", "channel"])
def test_gradients_flow_gradcheck(form, gate):
    q, k, v, beta, g, s0 = _inputs(B=1, H=1, T=4, Dk=2, Dv=2, gate=gate, seed=3)
    g = g.clamp(max=-0.05)  # gradcheck's small steps must keep every log-gate <= 0
    beta = beta.clamp(0.05, 0.95)
    tensors = [x.clone().requires_grad_() for x in (q, k, v, beta, g, s0)]

    def run(q, k, v, beta, g, s0):
        if form == "recurrent":
            return gated_delta_rule_recurrent(q, k, v, beta, g, initial_state=s0, normalize_qk=True)
        return gated_delta_rule_chunked(q, k, v, beta, g, initial_state=s0, normalize_qk=True, chunk_size=2)

    assert torch.autograd.gradcheck(run, tensors)


def test_chunked_and_recurrent_gradients_agree():
    q, k, v, beta, g, s0 = _inputs(T=11, gate="channel")
    grads = []
    for run in (
        lambda *x: gated_delta_rule_recurrent(*x[:5], initial_state=x[5]),
        lambda *x: gated_delta_rule_chunked(*x[:5], initial_state=x[5], chunk_size=4),
    ):
        tensors = [x.clone().requires_grad_() for x in (q, k, v, beta, g, s0)]
        o, s = run(*tensors)
        (o.sin().sum() + s.cos().sum()).backward()
        grads.append([x.grad for x in tensors])
    for a, b in zip(*grads, strict=True):
        assert_close(a, b, **F64)


@pytest.mark.parametrize("form", [gated_delta_rule_recurrent, gated_delta_rule_chunked])
def test_beta_zero_only_decays_the_state(form):
    q, k, v, beta, g, s0 = _inputs(T=7)
    o, s = form(q, k, v, torch.zeros_like(beta), g, initial_state=s0)
    alive = g.cumsum(-1).exp()  # (B, H, T): alpha_1 ... alpha_t
    assert_close(s, s0 * alive[..., -1, None, None], **F64)
    expected = torch.einsum("bhtk,bhkv->bhtv", q / 2, s0) * alive[..., None]  # scale 1/sqrt(4)
    assert_close(o, expected, **F64)


@pytest.mark.parametrize("form", [gated_delta_rule_recurrent, gated_delta_rule_chunked])
def test_without_delta_and_gate_it_is_chapter_17s_unnormalised_linear_attention(form):
    q, k, v, _, _, _ = _inputs(T=9, state=False)
    o, s = form(q, k, v, delta=False, scale=1.0)
    causal = torch.ones(9, 9, dtype=torch.bool).tril()
    assert_close(o, ((q @ k.transpose(-1, -2)) * causal) @ v, **F64)  # sum_{s<=t} (q_t . k_s) v_s
    assert_close(s, k.transpose(-1, -2) @ v, **F64)  # sum_s k_s v_s^T


@pytest.mark.parametrize("form", [gated_delta_rule_recurrent, gated_delta_rule_chunked])
def test_gated_linear_attention_decays_each_term_by_the_gates_in_between(form):
    q, k, v, beta, g, _ = _inputs(T=8, state=False)
    o, _ = form(q, k, v, beta, g, delta=False, scale=1.0)
    cum = g.cumsum(-1)  # (B, H, T)
    causal = torch.ones(8, 8, dtype=torch.bool).tril()
    weights = (cum[..., :, None] - cum[..., None, :]).masked_fill(~causal, float("-inf")).exp()  # prod alpha_{s+1..t}
    assert_close(o, ((q @ k.transpose(-1, -2)) * weights * beta[..., None, :]) @ v, **F64)


@pytest.mark.parametrize("form", [gated_delta_rule_recurrent, gated_delta_rule_chunked])
def test_plain_delta_rule_with_beta_one_replaces_the_value_stored_under_a_key(form):
    """alpha = 1, beta = 1, ||k|| = 1: after writing (k, v) the state recalls exactly v for k; linear attention sums."""
    torch.manual_seed(0)
    k = torch.randn(1, 1, 1, 4, dtype=torch.float64)
    k = (k / k.norm()).expand(1, 1, 3, 4)  # one unit key written three times
    v = torch.randn(1, 1, 3, 5, dtype=torch.float64)
    _, s = form(k, k, v)
    assert_close(torch.einsum("k,kv->v", k[0, 0, 0], s[0, 0]), v[0, 0, -1], **F64)  # the latest value only
    _, s_linear = form(k, k, v, delta=False)
    assert_close(torch.einsum("k,kv->v", k[0, 0, 0], s_linear[0, 0]), v[0, 0].sum(0), **F64)  # all three, summed


@pytest.mark.parametrize("form", [gated_delta_rule_recurrent, gated_delta_rule_chunked])
def test_with_orthonormal_keys_the_delta_rule_is_linear_attention(form):
    """Keys that never overlap leave nothing to correct: the delta rule and linear attention agree."""
    keys = torch.linalg.qr(torch.randn(6, 6, dtype=torch.float64))[0].T.reshape(1, 1, 6, 6)  # rows orthonormal
    q = torch.randn(1, 1, 6, 6, dtype=torch.float64)
    v = torch.randn(1, 1, 6, 3, dtype=torch.float64)
    beta = torch.full((1, 1, 6), 0.7, dtype=torch.float64)
    assert_close(form(q, keys, v, beta)[0], form(q, keys, v, beta, delta=False)[0], **F64)


def test_decoding_in_two_parts_with_the_state_equals_one_pass():
    q, k, v, beta, g, s0 = _inputs(T=10, gate="channel")
    whole, s_whole = gated_delta_rule_recurrent(q, k, v, beta, g, initial_state=s0)
    first, s_mid = gated_delta_rule_chunked(
        q[:, :, :6], k[:, :, :6], v[:, :, :6], beta[..., :6], g[:, :, :6], initial_state=s0, chunk_size=4
    )
    second, s_end = gated_delta_rule_recurrent(
        q[:, :, 6:], k[:, :, 6:], v[:, :, 6:], beta[..., 6:], g[:, :, 6:], initial_state=s_mid
    )
    assert_close(torch.cat([first, second], 2), whole, **F64)
    assert_close(s_end, s_whole, **F64)


def test_l2_normalize_gives_unit_vectors_and_leaves_zero_at_zero():
    x = torch.randn(3, 7, dtype=torch.float64) * 10
    assert_close(l2_normalize(x).norm(dim=-1), torch.ones(3, dtype=torch.float64), atol=1e-8, rtol=1e-8)
    assert torch.equal(l2_normalize(torch.zeros(2, 3)), torch.zeros(2, 3))
    with pytest.raises(TypeError, match="floating"):
        l2_normalize(torch.ones(2, 3, dtype=torch.long))


@pytest.mark.parametrize("form", [gated_delta_rule_recurrent, gated_delta_rule_chunked])
def test_bad_inputs_are_refused_naming_what_was_expected(form):
    q, k, v, beta, g, s0 = _inputs(T=4)
    cases = [
        (TypeError, "q must be a torch.Tensor", dict(q=q.tolist())),
        (TypeError, "floating", dict(v=v.long())),
        (ValueError, r"q must have shape \(B, H, T, Dk\)", dict(q=q[0])),
        (ValueError, "q and k must both be", dict(k=k[..., :3])),
        (ValueError, "v must be", dict(v=v[:, :, :3])),
        (TypeError, "share a dtype", dict(v=v.float())),
        (ValueError, r"beta must lie in \[0, 1\]", dict(beta=beta + 1)),
        (ValueError, r"beta must lie in \[0, 1\]", dict(beta=beta * float("nan"))),
        (ValueError, r"beta must have shape \(B, H, T\)", dict(beta=beta[..., :3])),
        (TypeError, "beta must have q's dtype", dict(beta=beta.float())),
        (ValueError, "g must be log-gates <= 0", dict(g=-g)),
        (ValueError, r"g must have shape \(B, H, T\) or \(B, H, T, Dk\)", dict(g=g[..., None].expand(2, 3, 4, 2))),
        (ValueError, r"initial_state must have shape \(B, H, Dk, Dv\)", dict(initial_state=s0.transpose(-1, -2))),
        (ValueError, "at least one token", dict(q=q[:, :, :0], k=k[:, :, :0], v=v[:, :, :0], beta=None, g=None)),
    ]
    for error, message, change in cases:
        args = dict(q=q, k=k, v=v, beta=beta, g=g, initial_state=s0) | change
        with pytest.raises(error, match=message):
            form(**args)


def test_chunk_size_must_be_a_positive_int():
    q, k, v, beta, g, _ = _inputs(T=4)
    for bad, error in ((0, ValueError), (2.0, TypeError), (-3, ValueError)):
        with pytest.raises(error, match="chunk_size"):
            gated_delta_rule_chunked(q, k, v, beta, g, chunk_size=bad)


def test_cache_bytes_grows_with_tokens_for_kv_caches_and_not_for_the_state():
    sizes = dict(num_heads=8, head_dim=64)
    for tokens in (0, 1, 1000):
        assert cache_bytes("mha", tokens, **sizes) == tokens * 2 * 8 * 64 * 2
        assert cache_bytes("gqa", tokens, **sizes, num_kv_heads=2) == tokens * 2 * 2 * 64 * 2
        assert cache_bytes("mla", tokens, **sizes, latent_dim=128, rope_dim=32) == tokens * (128 + 32) * 2
        assert cache_bytes("mla", tokens, **sizes, latent_dim=128, rope_dim=32, element_bytes=4) == (
            tokens * cache_numbers_per_token("mla", 8, 64, latent_dim=128, rope_dim=32) * 4
        )
        assert cache_bytes("gated_delta", tokens, **sizes) == 8 * 64 * 64 * 2
        assert cache_bytes("gated_delta", tokens, **sizes, value_dim=32, element_bytes=4) == 8 * 64 * 32 * 4
    # the state's size is the state the functions return
    _, s = gated_delta_rule_recurrent(*_inputs(B=1, H=3, Dk=4, Dv=5, dtype=torch.float32)[:5])
    assert s.numel() * s.element_size() == cache_bytes("gated_delta", 9, 3, 4, value_dim=5, element_bytes=4)


def test_cache_bytes_refuses_unknown_kinds_and_missing_sizes():
    with pytest.raises(ValueError, match="gated_delta"):
        cache_bytes("linear", 10, 8, 64)
    with pytest.raises(ValueError, match="num_kv_heads"):
        cache_bytes("gqa", 10, 8, 64)
    with pytest.raises(ValueError, match="tokens"):
        cache_bytes("mha", -1, 8, 64)
    with pytest.raises(TypeError, match="value_dim"):
        cache_bytes("gated_delta", 10, 8, 64, value_dim=1.5)


@pytest.mark.parametrize("dtype", [torch.float64, torch.float32])
@pytest.mark.parametrize("gate", ["head", "channel"])
def test_strong_gates_stay_finite_in_both_forms_and_their_gradients(dtype, gate):
    """Every exponent the chunked form takes is <= 0: a gate of exp(-30) per token underflows to 0, never to inf."""
    q, k, v, beta, g, s0 = _inputs(T=19, gate=gate, dtype=dtype)
    g = (g - 30).requires_grad_()
    o_rec, s_rec = gated_delta_rule_recurrent(q, k, v, beta, g, initial_state=s0)
    o_chk, s_chk = gated_delta_rule_chunked(q, k, v, beta, g, initial_state=s0, chunk_size=8)
    tol = F64 if dtype == torch.float64 else dict(atol=1e-5, rtol=1e-5)
    assert_close(o_chk, o_rec, **tol)
    assert_close(s_chk, s_rec, **tol)
    (o_chk.sum() + s_chk.sum()).backward()
    assert torch.isfinite(g.grad).all()
