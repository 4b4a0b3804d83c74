"""QK-norm per head (Gemma 3, Qwen3) and over the whole projection (OLMo 2), against ports of what
Hugging Face's transformers computes, and the bound on a score each gives."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from mha_course.inference.qk_norm import qk_norm, qk_norm_heads, score_bound

# --- what transformers computes, written here from its modelling code's behaviour ----------------------------


class LlamaRMSNorm(nn.Module):
    """LlamaRMSNorm, which Qwen3RMSNorm is: mean of squares in float32, cast back to the input dtype, *then*
    ``weight * x``."""

    def __init__(self, width: int, eps: float = 1e-6):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(width))
        self.eps = eps

    def forward(self, x):
        dtype = x.dtype
        wide = x.to(torch.float32)
        wide = wide * torch.rsqrt(wide.pow(2).mean(-1, keepdim=True) + self.eps)
        return self.weight * wide.to(dtype)


class Olmo2RMSNorm(LlamaRMSNorm):
    """Olmo2RMSNorm: as Llama's, except that weight and x are multiplied (in float32) *before* the cast back."""

    def forward(self, x):
        dtype = x.dtype
        wide = x.to(torch.float32)
        wide = wide * torch.rsqrt(wide.pow(2).mean(-1, keepdim=True) + self.eps)
        return (self.weight * wide).to(dtype)


class GemmaRMSNorm(LlamaRMSNorm):
    """Gemma3RMSNorm: the weight is stored as w and scales by (1 + w), multiplied in float32, then cast back."""

    def forward(self, x):
        wide = x.float()
        wide = wide * torch.rsqrt(wide.pow(2).mean(-1, keepdim=True) + self.eps)
        return (wide * (1.0 + self.weight.float())).type_as(x)


def olmo2_queries(hidden, q_proj, q_norm, head_dim):
    """Olmo2Attention: q_norm over num_attention_heads * head_dim features, *then* the split into heads."""
    B, T, _ = hidden.shape
    return q_norm(q_proj(hidden)).view(B, T, -1, head_dim).transpose(1, 2)  # (B, H, T, D)


def qwen3_queries(hidden, q_proj, q_norm, head_dim):
    """Qwen3Attention (and Gemma3Attention): the split into heads, then q_norm over head_dim features."""
    B, T, _ = hidden.shape
    return q_norm(q_proj(hidden).view(B, T, -1, head_dim)).transpose(1, 2)  # (B, H, T, D)


def _layer(E, H, D, dtype, seed):
    torch.manual_seed(seed)
    q_proj = nn.Linear(E, H * D, bias=False).to(dtype)
    hidden = torch.randn(2, 5, E).to(dtype)
    return hidden, q_proj


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_whole_projection_is_olmo2s_qk_norm(dtype):
    E, H, D = 32, 4, 8
    hidden, q_proj = _layer(E, H, D, dtype, 0)
    norm = Olmo2RMSNorm(H * D).to(dtype)
    with torch.no_grad():
        norm.weight.copy_(torch.linspace(0.5, 1.5, H * D))
        expected = olmo2_queries(hidden, q_proj, norm, D)
        ours = qk_norm_heads(q_proj(hidden), H, over="projection", gain=norm.weight)
    assert ours.shape == (2, H, 5, D) and ours.dtype == dtype
    assert torch.equal(ours, expected)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_per_head_is_qwen3s_qk_norm(dtype):
    E, H, D = 32, 4, 8
    hidden, q_proj = _layer(E, H, D, dtype, 1)
    norm = LlamaRMSNorm(D).to(dtype)
    with torch.no_grad():
        norm.weight.copy_(torch.linspace(0.5, 1.5, D))
        expected = qwen3_queries(hidden, q_proj, norm, D)
        ours = qk_norm_heads(q_proj(hidden), H, over="head", gain=norm.weight)
        rows = qk_norm(q_proj(hidden).view(2, 5, H, D), norm.weight).transpose(1, 2)
    assert torch.equal(ours, expected) and torch.equal(rows, expected)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_per_head_is_gemma3s_qk_norm_with_gain_one_plus_w(dtype):
    E, H, D = 32, 4, 8
    hidden, q_proj = _layer(E, H, D, dtype, 2)
    norm = GemmaRMSNorm(D).to(dtype)
    with torch.no_grad():
        norm.weight.copy_(torch.linspace(-0.5, 0.5, D))
        expected = qwen3_queries(hidden, q_proj, norm, D)
        ours = qk_norm_heads(q_proj(hidden), H, over="head", gain=1 + norm.weight.float(), gain_before_cast=True)
        rows = qk_norm(q_proj(hidden).view(2, 5, H, D), 1 + norm.weight.float(), gain_before_cast=True)
    assert ours.dtype == dtype
    assert torch.equal(ours, expected) and torch.equal(rows.transpose(1, 2), expected)


def test_in_bfloat16_where_the_gain_is_applied_changes_the_result():
    # the reason the three models need their own order: the two orders round differently in bfloat16
    hidden, q_proj = _layer(32, 4, 8, torch.bfloat16, 5)
    gain = torch.linspace(0.3, 1.7, 32).to(torch.bfloat16)
    with torch.no_grad():
        projected = q_proj(hidden)
        before = qk_norm_heads(projected, 4, over="projection", gain=gain)
        after = qk_norm_heads(projected, 4, over="projection", gain=gain, gain_before_cast=False)
        per_head_before = qk_norm_heads(projected, 4, over="head", gain=gain[:8], gain_before_cast=True)
        per_head_after = qk_norm_heads(projected, 4, over="head", gain=gain[:8])
    assert not torch.equal(before, after) and not torch.equal(per_head_before, per_head_after)
    assert float((before.float() - after.float()).abs().max()) < 0.05  # rounding, not a different norm
    # in float64 the order does not matter
    x64 = projected.double()
    assert torch.allclose(
        qk_norm_heads(x64, 4, over="projection", gain=gain.double()),
        qk_norm_heads(x64, 4, over="projection", gain=gain.double(), gain_before_cast=False),
    )


def test_the_two_places_differ_unless_every_head_has_the_same_size():
    torch.manual_seed(3)
    H, D = 4, 8
    x = torch.randn(2, 5, H, D, dtype=torch.float64)
    same_size = x / x.pow(2).mean(-1, keepdim=True).sqrt()  # every head's row of RMS 1
    flat = same_size.reshape(2, 5, H * D)
    assert float((qk_norm_heads(flat, H, "head") - qk_norm_heads(flat, H, "projection")).abs().max()) < 1e-6
    uneven = (x * torch.tensor([1.0, 10.0, 0.1, 1.0], dtype=torch.float64)[:, None]).reshape(2, 5, H * D)
    per_head, whole = qk_norm_heads(uneven, H, "head"), qk_norm_heads(uneven, H, "projection")
    assert float((per_head - whole).abs().max()) > 1.0
    # per head, each head's size is forgotten; over the projection, heads share one norm: the big one takes it
    assert float((per_head.pow(2).mean(-1) - 1).abs().max()) < 1e-3  # eps = 1e-6 against RMS^2 = 0.01 aside
    assert float(whole[:, 1].pow(2).mean(-1).min()) > 3.0 > float(whole[:, 2].pow(2).mean(-1).max())


def test_per_head_bound_holds_per_head_and_not_over_the_projection():
    H, D = 4, 8
    q = torch.zeros(1, 1, H * D, dtype=torch.float64)
    q[..., :D] = torch.randn(D, dtype=torch.float64)  # all of the projection's size in head 0
    for over in ("head", "projection"):
        normed = qk_norm_heads(q, H, over)
        top = float((normed[:, 0] @ normed[:, 0].transpose(-2, -1)).abs().max())  # head 0, q = k: reaches the bound
        assert top == pytest.approx(score_bound(D, over, H), rel=1e-5)
    assert score_bound(D, "projection", H) == H * score_bound(D, "head") == H * D
    torch.manual_seed(4)
    for _ in range(20):  # random sizes per head: never above the bound of its own place
        x = torch.randn(3, 6, H * D, dtype=torch.float64) * torch.rand(H * D, dtype=torch.float64).mul(100)
        gain_q, gain_k = torch.rand(H * D, dtype=torch.float64) * 2, torch.rand(H * D, dtype=torch.float64) * 2
        qn = qk_norm_heads(x, H, "projection", gain_q)
        kn = qk_norm_heads(x.flip(1), H, "projection", gain_k)
        bound = score_bound(D, "projection", H, max_gain_q=float(gain_q.max()), max_gain_k=float(gain_k.max()))
        assert float((qn @ kn.transpose(-2, -1)).abs().max()) <= bound
        qh = qk_norm_heads(x, H, "head", gain_q[:D])
        kh = qk_norm_heads(x.flip(1), H, "head", gain_k[:D])
        bound = score_bound(D, "head", max_gain_q=float(gain_q[:D].max()), max_gain_k=float(gain_k[:D].max()))
        assert float((qh @ kh.transpose(-2, -1)).abs().max()) <= bound


def test_grouped_keys_bound_over_the_projection():
    assert score_bound(16, "projection", num_heads=8, num_kv_heads=2) == pytest.approx((8 * 16 * 2 * 16) ** 0.5)


def test_qk_norm_bounds_the_scores_whatever_the_size_of_q_and_k():
    torch.manual_seed(0)
    q, k = torch.randn(3, 16, 8, dtype=torch.float64), torch.randn(3, 16, 8, dtype=torch.float64)
    normed = qk_norm(q)
    assert float((normed.pow(2).mean(-1) - 1).abs().max()) < 1e-4  # RMS 1 (eps = 1e-6 aside)
    assert float((qk_norm(100 * q) - normed).abs().max()) < 1e-4  # the size of the projection no longer matters
    gain = torch.linspace(0.5, 2.0, 8, dtype=torch.float64)
    scores = qk_norm(q, gain) @ qk_norm(k, gain).transpose(-2, -1)
    assert float(scores.abs().max()) <= 8 * 2.0 * 2.0


def test_bad_inputs_name_what_was_expected():
    q = torch.randn(2, 5, 32)
    with pytest.raises(ValueError, match=r"\(8,\)"):
        qk_norm(torch.randn(3, 8), torch.ones(3))
    with pytest.raises(TypeError, match="floating"):
        qk_norm(torch.ones(2, 4, dtype=torch.long))
    with pytest.raises(ValueError, match="must divide"):
        qk_norm_heads(q, 5)
    with pytest.raises(ValueError, match="over must be one of"):
        qk_norm_heads(q, 4, over="layer")
    with pytest.raises(ValueError, match=r"gain must be \(32,\)"):
        qk_norm_heads(q, 4, over="projection", gain=torch.ones(8))
    with pytest.raises(ValueError, match=r"\(B, T, H\*D\)"):
        qk_norm_heads(torch.randn(2, 4, 5, 8), 4)
    with pytest.raises(ValueError, match="eps must be positive"):
        qk_norm(q, eps=0.0)
    with pytest.raises(TypeError, match="gain_before_cast must be a bool"):
        qk_norm_heads(q, 4, gain_before_cast="yes")
    with pytest.raises(ValueError, match=">= 0"):
        score_bound(8, max_gain_q=-1.0)
    with pytest.raises(ValueError, match="over must be one of"):
        score_bound(8, "everything")
