"""Llama 4's layers: the chunked causal mask against its definition, the NoPE temperature and the layer pattern."""

import math

import pytest
import torch

from mha_course.core.masks import causal_mask
from mha_course.inference.chunked_attention import chunked_causal_mask, chunked_visible_counts
from mha_course.inference.nope_layers import apply_nope_temperature, nope_query_scale, rope_layers
from mha_course.testing import assert_close


def brute_force_chunked(T, C, S):
    """Query i sits at position S - T + i; it sees key j when both are in one chunk and j is not later."""
    return torch.tensor(
        [[(j <= S - T + i) and (j // C == (S - T + i) // C) for j in range(S)] for i in range(T)], dtype=torch.bool
    )


@pytest.mark.parametrize("T,C,S", [(1, 1, 1), (7, 3, 7), (8, 4, 8), (9, 4, 9), (5, 16, 5), (3, 4, 10), (1, 4, 9)])
def test_chunked_mask_against_the_definition(T, C, S):
    assert torch.equal(chunked_causal_mask(T, C, S), brute_force_chunked(T, C, S))


def test_the_chunk_boundary_is_where_a_query_starts_again():
    mask = chunked_causal_mask(8, 4)
    assert mask[3].tolist() == [True] * 4 + [False] * 4  # the last query of chunk 0 sees chunk 0
    assert mask[4].tolist() == [False] * 4 + [True] + [False] * 3  # the first of chunk 1 sees itself only
    assert chunked_visible_counts(8, 4).tolist() == mask.sum(-1).tolist() == [1, 2, 3, 4, 1, 2, 3, 4]


def test_a_chunk_as_long_as_the_sequence_is_the_causal_mask():
    assert torch.equal(chunked_causal_mask(6, 6), causal_mask(6))
    assert torch.equal(chunked_causal_mask(6, 100), causal_mask(6))
    assert torch.equal(chunked_causal_mask(6, 1), torch.eye(6, dtype=torch.bool))


def test_decoding_rows_are_the_last_rows_of_the_full_mask():
    full = chunked_causal_mask(11, 4)
    for T in (1, 3, 11):
        assert torch.equal(chunked_causal_mask(T, 4, 11), full[11 - T :])


def test_chunked_mask_refuses_bad_sizes():
    with pytest.raises(ValueError, match="chunk_size"):
        chunked_causal_mask(4, 0)
    with pytest.raises(TypeError, match="chunk_size"):
        chunked_causal_mask(4, 2.0)
    with pytest.raises(ValueError, match="S must be >= T"):
        chunked_causal_mask(4, 2, S=3)


def test_rope_layers_every_fourth_is_nope():
    assert rope_layers(8) == [True, True, True, False, True, True, True, False]
    assert rope_layers(5, no_rope_interval=2) == [True, False, True, False, True]
    assert rope_layers(3, no_rope_interval=1) == [False, False, False]
    with pytest.raises(ValueError, match="no_rope_interval"):
        rope_layers(4, no_rope_interval=0)


def test_nope_scale_is_one_for_the_first_floor_scale_minus_one_positions_then_grows_like_a_log():
    scale = nope_query_scale(torch.tensor([0, 8190, 8191, 3 * 8192 - 1, 10**6]))
    expected = [1.0, 1.0, 1 + 0.1 * math.log(2), 1 + 0.1 * math.log(4), 1 + 0.1 * math.log(10**6 // 8192 + 1)]
    assert scale.tolist() == pytest.approx(expected)
    assert nope_query_scale(torch.tensor([0, 1, 2]), floor_scale=1.0).tolist() == pytest.approx(
        [1 + 0.1 * math.log(2), 1 + 0.1 * math.log(3), 1 + 0.1 * math.log(4)]
    )


def test_apply_nope_temperature_scales_each_query_row():
    q = torch.randn(2, 3, 5, 4, dtype=torch.float64)
    positions = torch.tensor([0, 10, 100, 1000, 10000])
    scaled = apply_nope_temperature(q, positions, floor_scale=10.0)
    assert_close(scaled, q * nope_query_scale(positions, floor_scale=10.0).double()[:, None])
    assert torch.equal(apply_nope_temperature(q), q)  # positions 0 .. 4 < 8191: scale 1
    with pytest.raises(ValueError, match="positions must have shape"):
        apply_nope_temperature(q, torch.arange(4))
    with pytest.raises(ValueError, match=">= 0"):
        nope_query_scale(torch.tensor([-1]))
    with pytest.raises(ValueError, match="floor_scale"):
        nope_query_scale(torch.tensor([1]), floor_scale=0)
