"""Positional encodings match their formulas; rotary scores depend only on the relative offset."""

import math

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from mha_course.core.positions import (
    LearnedPositions,
    SinusoidalPositions,
    apply_rotary,
    rotary_angles,
    sinusoidal_positions,
)
from mha_course.testing import assert_close


def test_sinusoidal_matches_formula_elementwise():
    T, E, base = 7, 10, 10000.0
    table = sinusoidal_positions(T, E, base, dtype=torch.float64)
    assert table.shape == (T, E)
    for p in range(T):
        for i in range(E // 2):
            angle = p / base ** (2 * i / E)
            assert math.isclose(table[p, 2 * i].item(), math.sin(angle), abs_tol=1e-12)
            assert math.isclose(table[p, 2 * i + 1].item(), math.cos(angle), abs_tol=1e-12)


def test_sinusoidal_shift_is_a_linear_map():
    # PE[p + k] = M_k PE[p] with the same M_k for every p (a block rotation)
    table = sinusoidal_positions(20, 8, dtype=torch.float64)
    k = 3
    solution = torch.linalg.lstsq(table[:10], table[k : 10 + k]).solution  # (E, E)
    assert_close(table[10:17] @ solution, table[10 + k : 17 + k], dtype=torch.float64)


def test_sinusoidal_rejects_odd_dimension():
    with pytest.raises(ValueError, match="even"):
        sinusoidal_positions(4, 5)
    with pytest.raises(TypeError):
        sinusoidal_positions(4.0, 6)


def test_position_modules_return_rows_and_refuse_long_sequences():
    sinus, learned = SinusoidalPositions(6, 8), LearnedPositions(6, 8)
    assert_close(sinus(4), sinusoidal_positions(4, 8))
    assert learned(4).shape == (4, 8) and learned(4).requires_grad
    for module in (sinus, learned):
        with pytest.raises(ValueError, match="max_len"):
            module(7)


def test_rotary_matches_formula():
    torch.manual_seed(0)
    x = torch.randn(2, 5, 6, dtype=torch.float64)  # (B, T, D)
    y = apply_rotary(x)
    angle = rotary_angles(torch.arange(5), 6)  # (T, D/2)
    for p in range(5):
        for i in range(3):
            c, s = math.cos(angle[p, i]), math.sin(angle[p, i])
            a, b = x[:, p, 2 * i], x[:, p, 2 * i + 1]
            assert_close(y[:, p, 2 * i], a * c - b * s, dtype=torch.float64)
            assert_close(y[:, p, 2 * i + 1], a * s + b * c, dtype=torch.float64)
    assert math.isclose(angle[1, 1].item(), 10000 ** (-2 / 6))


def test_rotary_preserves_norms_and_position_zero():
    x = torch.randn(3, 4, 8)
    y = apply_rotary(x)
    assert_close(y.norm(dim=-1), x.norm(dim=-1))
    assert_close(y[:, 0], x[:, 0])


@settings(max_examples=25, deadline=None)
@given(m=st.integers(0, 40), n=st.integers(0, 40), shift=st.integers(-20, 60), seed=st.integers(0, 2**16))
def test_rotary_score_depends_only_on_offset(m, n, shift, seed):
    if m + shift < 0 or n + shift < 0:
        shift = 0
    generator = torch.Generator().manual_seed(seed)
    q, k = torch.randn(2, 16, generator=generator, dtype=torch.float64)

    def score(a, b):
        qa = apply_rotary(q[None], torch.tensor([a]))[0]
        kb = apply_rotary(k[None], torch.tensor([b]))[0]
        return qa @ kb

    assert math.isclose(score(m, n), score(m + shift, n + shift), rel_tol=1e-9, abs_tol=1e-9)


def test_rotary_scores_change_with_offset():
    # the property above must not hold trivially: different offsets give different scores
    torch.manual_seed(1)
    q, k = torch.randn(2, 16, dtype=torch.float64)
    scores = [
        apply_rotary(q[None], torch.tensor([0]))[0] @ apply_rotary(k[None], torch.tensor([d]))[0] for d in range(4)
    ]
    assert len({round(float(s), 6) for s in scores}) == 4


def test_rotary_input_checks():
    with pytest.raises(ValueError, match="even"):
        apply_rotary(torch.randn(3, 5))
    with pytest.raises(ValueError, match="positions"):
        apply_rotary(torch.randn(3, 4), torch.arange(2))
    with pytest.raises(TypeError):
        apply_rotary(torch.ones(3, 4, dtype=torch.long))
