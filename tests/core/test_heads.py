"""split_heads / merge_heads: (B, T, E) <-> (B, H, T, D), head h holds features h*D .. (h+1)*D - 1."""

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from mha_course.core.heads import merge_heads, split_heads

FAST = settings(max_examples=30, deadline=None, derandomize=True)


@FAST
@given(B=st.integers(1, 3), T=st.integers(1, 5), H=st.integers(1, 4), D=st.integers(1, 4))
def test_split_puts_feature_blocks_in_heads(B, T, H, D):
    x = torch.arange(B * T * H * D, dtype=torch.float32).reshape(B, T, H * D)
    heads = split_heads(x, H)
    assert heads.shape == (B, H, T, D)
    for h in range(H):
        assert torch.equal(heads[:, h], x[:, :, h * D : (h + 1) * D])


@FAST
@given(B=st.integers(1, 3), T=st.integers(1, 5), H=st.integers(1, 4), D=st.integers(1, 4))
def test_merge_inverts_split_both_ways(B, T, H, D):
    x = torch.randn(B, T, H * D)
    assert torch.equal(merge_heads(split_heads(x, H)), x)
    y = torch.randn(B, H, T, D)
    assert torch.equal(split_heads(merge_heads(y), H), y)
    merged = merge_heads(y)
    assert merged.shape == (B, T, H * D)
    for h in range(H):
        assert torch.equal(merged[:, :, h * D : (h + 1) * D], y[:, h])


def test_split_accepts_non_contiguous_input():
    x = torch.randn(6, 2, 4).transpose(0, 1)  # (B=2, T=6, E=4), not contiguous
    assert torch.equal(split_heads(x, 2), split_heads(x.contiguous(), 2))


def test_split_keeps_tokens_apart():
    """The classic bug: view(B, H, T, D) without the transpose mixes tokens into heads."""
    x = torch.randn(1, 3, 4)
    heads = split_heads(x, 2)
    assert not torch.equal(heads, x.view(1, 2, 3, 2))
    assert torch.equal(heads[0, :, 1], x[0, 1].view(2, 2))  # token 1 in every head comes from token 1


def test_errors_name_shapes():
    with pytest.raises(ValueError, match=r"E=6.*\(2, 3, 6\).*num_heads=4"):
        split_heads(torch.zeros(2, 3, 6), 4)
    with pytest.raises(ValueError, match=r"num_heads=0"):
        split_heads(torch.zeros(2, 3, 6), 0)
    with pytest.raises(ValueError, match=r"\(B, T, E\).*\(3, 6\)"):
        split_heads(torch.zeros(3, 6), 2)
    with pytest.raises(TypeError, match="num_heads must be an int"):
        split_heads(torch.zeros(2, 3, 6), 2.0)
    with pytest.raises(TypeError, match="torch.Tensor"):
        split_heads([[1.0]], 1)
    with pytest.raises(ValueError, match=r"\(B, H, T, D\).*\(2, 3, 6\)"):
        merge_heads(torch.zeros(2, 3, 6))
    with pytest.raises(TypeError, match="torch.Tensor"):
        merge_heads(None)
