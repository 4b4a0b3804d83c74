"""DeepSeek Sparse Attention against DeepSeek's own inference code, ported here (not in the package).

Source: github.com/deepseek-ai/DeepSeek-V3.2-Exp, ``inference/model.py`` at commit
6d8cb70dfdd6f37c83c5208105a3e2c8da117485: ``class Indexer`` (``forward``), ``apply_rotary_emb``,
``rotate_activation``, the prefill branch of ``MLA.forward`` (``mask is not None``) and the causal
mask ``Transformer.forward`` builds; ``fp8_index`` as its docstring in ``inference/kernel.py`` defines
it (relu(q k^T) * weights, summed over the heads, times the key scale).

What the port changes, and why the comparison still holds:
- no FP8: ``act_quant`` is dropped (scales of 1), everything runs in float64;
- ``rotate_activation`` (a Hadamard transform scaled by 1/sqrt(n)) is kept, as a dense Sylvester
  Hadamard matrix instead of the ``fast_hadamard_transform`` kernel; it is orthogonal, which is why the
  course's indexer can leave it out;
- the course's MLA has no query compression and no latent RMSNorm: ``qr = x`` (``wq_a`` the identity,
  ``q_norm`` left out) and ``kv_norm`` is left out; the weights are copied from the course's modules
  into DeepSeek's layouts (``wq_b``, ``wkv_a``, ``wkv_b``, ``wo``).
"""

import pytest
import torch
import torch.nn.functional as F

from mha_course.inference.lightning_indexer import selection_mask
from mha_course.inference.sparse_mla import SparseLatentAttention
from mha_course.testing import assert_close

# ---- the port ---------------------------------------------------------------------------------


def precompute_freqs_cis(dim, seqlen, base=10000.0):
    # model.py precompute_freqs_cis, without the YaRN branch (seqlen <= original_seq_len)
    freqs = 1.0 / (base ** (torch.arange(0, dim, 2, dtype=torch.float64) / dim))
    t = torch.arange(seqlen, dtype=torch.float64)
    freqs = torch.outer(t, freqs)
    return torch.polar(torch.ones_like(freqs), freqs)


def apply_rotary_emb(x, freqs_cis):
    dtype = x.dtype
    x = torch.view_as_complex(x.double().view(*x.shape[:-1], -1, 2))
    freqs_cis = freqs_cis.view(1, x.size(1), 1, x.size(-1))
    y = torch.view_as_real(x * freqs_cis).flatten(3)
    return y.to(dtype)


def hadamard(n):
    h = torch.ones(1, 1, dtype=torch.float64)
    while h.shape[0] < n:
        h = torch.cat([torch.cat([h, h], 1), torch.cat([h, -h], 1)], 0)
    return h


def rotate_activation(x):
    hidden_size = x.size(-1)
    return (x @ hadamard(hidden_size).T) * hidden_size**-0.5  # hadamard_transform(x, scale=hidden_size ** -0.5)


def fp8_index(q, q_s, k, k_s):
    # kernel.py: fp8 q @ fp8 k -> logits; relu(logits) * q_s (weights); sum over heads; * k_s
    logits = torch.einsum("bmhd,bnd->bmhn", q, k)
    logits = logits.clamp_min(0) * q_s
    return logits.sum(dim=2) * k_s[:, None, :]


def indexer_forward(w, x, qr, start_pos, freqs_cis, mask, n_heads, head_dim, rope_head_dim, index_topk):
    bsz, seqlen, _ = x.size()
    end_pos = start_pos + seqlen
    q = F.linear(qr, w["wq_b"])
    q = q.view(bsz, seqlen, n_heads, head_dim)
    q_pe, q_nope = torch.split(q, [rope_head_dim, head_dim - rope_head_dim], dim=-1)
    q_pe = apply_rotary_emb(q_pe, freqs_cis)
    q = torch.cat([q_pe, q_nope], dim=-1)
    k = F.linear(x, w["wk"])
    k = F.layer_norm(k, (head_dim,), w["k_norm.weight"], w["k_norm.bias"], 1e-6)
    k_pe, k_nope = torch.split(k, [rope_head_dim, head_dim - rope_head_dim], dim=-1)
    k_pe = apply_rotary_emb(k_pe.unsqueeze(2), freqs_cis).squeeze(2)
    k = torch.cat([k_pe, k_nope], dim=-1)
    q = rotate_activation(q)
    k = rotate_activation(k)
    q_scale = torch.ones(bsz, seqlen, n_heads, 1, dtype=x.dtype)  # act_quant dropped: scales of 1
    k_scale = torch.ones(bsz, end_pos, dtype=x.dtype)
    weights = F.linear(x, w["weights_proj"]) * n_heads**-0.5
    weights = weights.unsqueeze(-1) * q_scale * head_dim**-0.5
    index_score = fp8_index(q, weights, k, k_scale)
    if mask is not None:
        index_score += mask
    topk_indices = index_score.topk(min(index_topk, end_pos), dim=-1, sorted=False)[1]
    return topk_indices, index_score


def mla_prefill(w, x, freqs_cis, mask, n_heads, qk_nope_head_dim, qk_rope_head_dim, v_head_dim, kv_lora_rank, ix):
    bsz, seqlen, _ = x.size()
    qr = x  # wq_a = identity, q_norm left out (the course's MLA compresses no query)
    q = F.linear(qr, w["wq_b"])
    q = q.view(bsz, seqlen, n_heads, qk_nope_head_dim + qk_rope_head_dim)
    q_nope, q_pe = torch.split(q, [qk_nope_head_dim, qk_rope_head_dim], dim=-1)
    q_pe = apply_rotary_emb(q_pe, freqs_cis)
    kv = F.linear(x, w["wkv_a"])
    kv, k_pe = torch.split(kv, [kv_lora_rank, qk_rope_head_dim], dim=-1)
    k_pe = apply_rotary_emb(k_pe.unsqueeze(2), freqs_cis)  # kv_norm left out
    q = torch.cat([q_nope, q_pe], dim=-1)
    kv = F.linear(kv, w["wkv_b"])
    kv = kv.view(bsz, seqlen, n_heads, qk_nope_head_dim + v_head_dim)
    k_nope, v = torch.split(kv, [qk_nope_head_dim, v_head_dim], dim=-1)
    k = torch.cat([k_nope, k_pe.expand(-1, -1, n_heads, -1)], dim=-1)
    scores = torch.einsum("bshd,bthd->bsht", q, k) * (qk_nope_head_dim + qk_rope_head_dim) ** -0.5
    topk_indices, _ = indexer_forward(ix["weights"], x, qr, 0, freqs_cis, mask, **ix["sizes"])
    index_mask = torch.full((bsz, seqlen, seqlen), float("-inf"), dtype=x.dtype).scatter_(-1, topk_indices, 0)
    index_mask += mask
    scores += index_mask.unsqueeze(2)
    scores = scores.softmax(dim=-1)
    x = torch.einsum("bsht,bthd->bshd", scores, v)
    return F.linear(x.flatten(2), w["wo"])


# ---- the course's weights in DeepSeek's layouts -----------------------------------------------


def deepseek_weights(m: SparseLatentAttention):
    H, D, Dr, Dv, r = m.num_heads, m.head_dim, m.rope_dim, m.value_dim, m.latent_dim
    E = m.embed_dim
    wq_b = torch.cat([m.q_proj.weight.view(H, D, E), m.q_rope_proj.weight.view(H, Dr, E)], 1).reshape(-1, E)
    wkv_b = torch.cat([m.k_up.weight.view(H, D, r), m.v_up.weight.view(H, Dv, r)], 1).reshape(-1, r)
    mla = {
        "wq_b": wq_b,
        "wkv_a": torch.cat([m.kv_down.weight, m.k_rope_proj.weight]),
        "wkv_b": wkv_b,
        "wo": m.out_proj.weight,
    }
    ix = m.indexer
    indexer = {
        "weights": {
            "wq_b": ix.q_proj.weight,
            "wk": ix.k_proj.weight,
            "k_norm.weight": ix.k_norm.weight,
            "k_norm.bias": ix.k_norm.bias,
            "weights_proj": ix.weights_proj.weight,
        },
        "sizes": dict(n_heads=ix.index_heads, head_dim=ix.index_dim, rope_head_dim=ix.rope_dim, index_topk=m.top_k),
    }
    return mla, indexer


def make(top_k, seed):
    torch.manual_seed(seed)
    m = SparseLatentAttention(24, 3, 10, top_k=top_k, index_heads=4, index_dim=8, index_rope_dim=4, rope_dim=4)
    m = m.double().eval()
    with torch.no_grad():  # LayerNorm starts at (1, 0): move it so that the port has to get it right
        m.indexer.k_norm.weight.uniform_(0.5, 1.5)
        m.indexer.k_norm.bias.uniform_(-0.5, 0.5)
    return m


def causal(seqlen):
    return torch.full((seqlen, seqlen), float("-inf"), dtype=torch.float64).triu_(1)


@pytest.mark.parametrize("top_k,seed", [(3, 0), (5, 1), (1, 2), (64, 3)])
def test_index_scores_and_selection_match_deepseeks_indexer(top_k, seed):
    m = make(top_k, seed)
    x = torch.randn(2, 11, 24, dtype=torch.float64)
    _, ix = deepseek_weights(m)
    freqs_cis = precompute_freqs_cis(m.indexer.rope_dim, 11)
    with torch.no_grad():
        theirs, their_scores = indexer_forward(ix["weights"], x, x, 0, freqs_cis, causal(11), **ix["sizes"])
        indices, valid, scores = m.select(x)
    assert_close(scores, their_scores, what="index scores (future: -inf in both)")
    # DeepSeek keeps min(k, S) per row, some of them future tokens the causal mask removes later
    their_kept = [[{int(s) for s in theirs[b, t] if s <= t} for t in range(11)] for b in range(2)]
    ours = selection_mask(indices, valid, 11)
    assert [[set(torch.nonzero(ours[b, t]).flatten().tolist()) for t in range(11)] for b in range(2)] == their_kept


@pytest.mark.parametrize("top_k,seed", [(3, 4), (6, 5), (64, 6)])
def test_sparse_mla_matches_deepseeks_prefill(top_k, seed):
    m = make(top_k, seed)
    x = torch.randn(2, 9, 24, dtype=torch.float64)
    mla, ix = deepseek_weights(m)
    freqs_cis = precompute_freqs_cis(m.rope_dim, 9)
    with torch.no_grad():
        theirs = mla_prefill(mla, x, freqs_cis, causal(9), m.num_heads, m.head_dim, m.rope_dim, m.value_dim, 10, ix)
        ours, _ = m(x)
        gathered, _, _ = m.forward_gathered(x)
    assert_close(ours, theirs, what="masked form against DeepSeek's prefill")
    assert_close(gathered, theirs, what="gathered form against DeepSeek's prefill")


def test_the_hadamard_rotation_changes_no_index_score():
    torch.manual_seed(7)
    q, k = torch.randn(5, 8, dtype=torch.float64), torch.randn(6, 8, dtype=torch.float64)
    assert_close(rotate_activation(q) @ rotate_activation(k).T, q @ k.T)
