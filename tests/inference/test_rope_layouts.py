"""RoPE's two layouts: rotate-half against its formula, the permutation between the layouts, and
a rotary model converted to the other layout computing the same function."""

import math

import pytest
import torch

from mha_course.core.positions import apply_rotary
from mha_course.inference.rope_layouts import (
    RotateHalfMultiHeadAttention,
    apply_rotary_half,
    convert_rope_rows,
    interleaved_to_half_permutation,
    with_rope_layout,
)
from mha_course.models.model import RotaryMultiHeadAttention, TinyTransformer
from mha_course.testing import assert_close


def rotate_half_loop(x, base=10000.0):
    """The rotate-half formula, coordinate by coordinate, in float64."""
    T, D = x.shape
    out = torch.empty(T, D, dtype=torch.float64)
    for p in range(T):
        for i in range(D // 2):
            angle = p * base ** (-2 * i / D)
            a, b = float(x[p, i]), float(x[p, i + D // 2])
            out[p, i] = a * math.cos(angle) - b * math.sin(angle)
            out[p, i + D // 2] = a * math.sin(angle) + b * math.cos(angle)
    return out


def test_rotate_half_matches_its_formula_and_hugging_faces_form():
    torch.manual_seed(0)
    x = torch.randn(6, 8, dtype=torch.float64)
    assert_close(apply_rotary_half(x), rotate_half_loop(x))
    # x * cos + rotate_half(x) * sin, as in transformers' LLaMA code
    angle = torch.arange(6, dtype=torch.float64)[:, None] * 10000.0 ** (-torch.arange(0, 8, 2, dtype=torch.float64) / 8)
    cos, sin = torch.cat([angle.cos(), angle.cos()], -1), torch.cat([angle.sin(), angle.sin()], -1)
    rotate_half = torch.cat([-x[:, 4:], x[:, :4]], -1)
    assert_close(apply_rotary_half(x), x * cos + rotate_half * sin)


def test_the_permutation_turns_one_layout_into_the_other():
    torch.manual_seed(1)
    x = torch.randn(2, 3, 7, 16, dtype=torch.float64)
    P = interleaved_to_half_permutation(16)
    assert P.tolist() == [0, 2, 4, 6, 8, 10, 12, 14, 1, 3, 5, 7, 9, 11, 13, 15]
    assert_close(apply_rotary_half(x[..., P]), apply_rotary(x)[..., P])
    assert not torch.allclose(apply_rotary_half(x), apply_rotary(x))  # the layouts do differ


def test_row_conversion_is_the_checkpoint_converters_view_and_round_trips():
    torch.manual_seed(2)
    H, D, E = 3, 8, 24
    w = torch.randn(H * D, E)
    converter = w.view(H, D // 2, 2, E).transpose(1, 2).reshape(H * D, E)  # LLaMA -> Hugging Face's permute
    assert torch.equal(convert_rope_rows(w, H, to="half"), converter)
    assert torch.equal(convert_rope_rows(convert_rope_rows(w, H, "half"), H, "interleaved"), w)
    b = torch.randn(H * D)
    assert torch.equal(convert_rope_rows(b, H, "half"), b.view(H, D // 2, 2).transpose(1, 2).reshape(-1))


def test_scores_survive_the_conversion():
    torch.manual_seed(3)
    E, H = 16, 2
    inter = RotaryMultiHeadAttention(E, H).double().eval()
    half = RotateHalfMultiHeadAttention(E, H).double().eval()
    state = inter.state_dict()
    for name in ("q_proj.weight", "q_proj.bias", "k_proj.weight", "k_proj.bias"):
        state[name] = convert_rope_rows(state[name], H, "half")
    half.load_state_dict(state)
    x = torch.randn(2, 9, E, dtype=torch.float64)
    out_i, w_i = inter(x)
    out_h, w_h = half(x)
    assert_close(w_h, w_i)
    assert_close(out_h, out_i)


def test_a_model_in_the_wrong_layout_runs_but_differs_and_converted_it_is_the_same():
    torch.manual_seed(4)
    model = TinyTransformer(12, 10, embed_dim=16, num_heads=2, num_layers=2, positions="rotary").eval()
    tokens = torch.randint(12, (3, 10))
    logits, _ = model(tokens)
    converted = with_rope_layout(model, "half", convert_weights=True)
    wrong = with_rope_layout(model, "half", convert_weights=False)
    assert all(isinstance(b.attn, RotateHalfMultiHeadAttention) for b in converted.blocks)
    assert_close(converted(tokens)[0], logits)
    assert (wrong(tokens)[0] - logits).abs().max() > 1e-3
    back = with_rope_layout(converted, "interleaved", convert_weights=True)
    assert_close(back(tokens)[0], logits)
    assert isinstance(model.blocks[0].attn, RotaryMultiHeadAttention)  # the original is untouched


def test_bad_inputs_name_what_was_expected():
    with pytest.raises(ValueError, match="even"):
        interleaved_to_half_permutation(5)
    with pytest.raises(ValueError, match="even"):
        apply_rotary_half(torch.randn(3, 5))
    with pytest.raises(TypeError, match="floating"):
        apply_rotary_half(torch.ones(3, 4, dtype=torch.long))
    with pytest.raises(ValueError, match=r"\(T,\) = \(3,\)"):
        apply_rotary_half(torch.randn(3, 4), torch.arange(4))
    with pytest.raises(ValueError, match="H=3 heads of an even D"):
        convert_rope_rows(torch.randn(8, 4), 3)
    with pytest.raises(ValueError, match="to must be one of"):
        convert_rope_rows(torch.randn(8, 4), 2, to="sideways")
    with pytest.raises(ValueError, match=r"\(H\*D, E\)"):
        convert_rope_rows(torch.randn(2, 4, 4), 2)
    with pytest.raises(TypeError, match="rotary"):
        with_rope_layout(TinyTransformer(5, 4, embed_dim=8, num_heads=2, positions="learned"), "half", True)
    with pytest.raises(ValueError, match="layout"):
        with_rope_layout(TinyTransformer(5, 4, embed_dim=8, num_heads=2, positions="rotary"), "both", True)
