"""FlexAttention: every mask_mod / score_mod equals the course's mask, and FlexAttention (eager) with
them equals the course's attention. Compiling runs only with MHA_COURSE_COMPILE_FLEX=1 (it takes up to minutes)."""

import os

import pytest
import torch

# torch's FlexAttention runs through its compiler even in eager mode: the compiler's import (2-4 s on
# 2 cores, once per process) is paid here with the file's other imports, not by whichever test runs first
import torch._dynamo  # noqa: F401

from mha_course import causal_mask, padding_mask, scaled_dot_product_attention
from mha_course.inference.alibi import alibi_bias, alibi_slopes
from mha_course.inference.flex import (
    alibi_score_mod,
    and_mods,
    bias_from_score_mod,
    causal_conventions,
    causal_mod,
    compile_support,
    document_mod,
    flex_attention,
    flex_available,
    mask_from_mod,
    padding_mod,
    sliding_window_mod,
)
from mha_course.inference.variants import sliding_window_mask
from mha_course.testing import assert_close

pytestmark = pytest.mark.skipif(not flex_available()[0], reason=flex_available()[1])
B, H, T, S, D = 2, 4, 10, 10, 8


def test_mask_mods_are_the_course_masks():
    assert torch.equal(mask_from_mod(causal_mod(), B, H, T, S), causal_mask(T).expand(B, H, T, S))
    assert torch.equal(mask_from_mod(causal_mod(3), 1, 1, 4, 7)[0, 0], causal_mask(4, 7, diagonal=3))
    assert torch.equal(mask_from_mod(padding_mod([10, 6]), B, H, T, S), padding_mask([10, 6], S).expand(B, H, T, S))
    for causal in (True, False):
        assert torch.equal(
            mask_from_mod(sliding_window_mod(3, causal), 1, 1, T, S)[0, 0], sliding_window_mask(T, 3, causal=causal)
        )
    docs = torch.tensor([0, 0, 0, 1, 1, 2, 2, 2, 2, 2])
    expected = torch.tensor([[bool(docs[i] == docs[j] and j <= i) for j in range(T)] for i in range(T)])
    assert torch.equal(mask_from_mod(document_mod(docs), 1, 1, T, S)[0, 0], expected)
    both = and_mods(causal_mod(), padding_mod([10, 6]))
    assert torch.equal(mask_from_mod(both, B, H, T, S), (causal_mask(T) & padding_mask([10, 6], S)).expand(B, H, T, S))


def test_alibi_score_mod_is_the_alibi_bias():
    slopes = alibi_slopes(H)
    assert_close(bias_from_score_mod(alibi_score_mod(slopes), 1, H, T, S)[0], alibi_bias(H, T, causal=False))
    assert_close(
        bias_from_score_mod(alibi_score_mod(slopes, offset=3), 1, H, 4, 7)[0], alibi_bias(H, 4, 7, causal=False)
    )


@pytest.mark.parametrize("name", ["causal", "padding", "window", "documents", "alibi", "alibi+causal", "none"])
def test_flex_attention_in_eager_mode_equals_the_course(name):
    torch.manual_seed(0)
    q, k, v = (torch.randn(B, H, T, D) for _ in range(3))
    slopes = alibi_slopes(H)
    mask_mod = {
        "causal": causal_mod(),
        "padding": padding_mod([10, 6]),
        "window": sliding_window_mod(2),
        "documents": document_mod([0, 0, 0, 1, 1, 2, 2, 2, 2, 2]),
        "alibi+causal": causal_mod(),
    }.get(name)
    score_mod = alibi_score_mod(slopes) if name.startswith("alibi") else None
    mask = None
    if mask_mod is not None:
        mask = mask_from_mod(mask_mod, B, H, T, S)
    if score_mod is not None:
        bias = alibi_bias(H, T, causal=False)
        mask = bias if mask is None else bias.masked_fill(~mask, float("-inf"))
    out = flex_attention(q, k, v, score_mod=score_mod, mask_mod=mask_mod, block_size=4)
    assert_close(out, scaled_dot_product_attention(q, k, v, mask=mask)[0])


def test_a_fully_masked_row_gives_zeros_as_in_the_course():
    q, k, v = (torch.randn(1, 1, 3, 4) for _ in range(3))
    out = flex_attention(q, k, v, mask_mod=padding_mod([0]))
    assert torch.equal(out, torch.zeros_like(out))


def test_the_causal_conventions_line_up():
    masks = causal_conventions(3, 5)
    assert torch.equal(masks["torch causal_upper_left"], causal_mask(3, 5))
    assert torch.equal(masks["torch causal_lower_right"], causal_mask(3, 5, diagonal=2))
    assert torch.equal(causal_conventions(5, 3)["torch causal_lower_right"], causal_mask(5, 3, diagonal=-2))


def test_compile_support_says_why():
    ok, why = compile_support()
    assert isinstance(ok, bool) and why


def test_bad_inputs_name_what_was_expected():
    with pytest.raises(TypeError, match="integers"):
        padding_mod([1.5])
    with pytest.raises(ValueError, match=">= 0"):
        padding_mod([-1])
    with pytest.raises(TypeError, match="integers"):
        document_mod([0.0, 1.0])
    with pytest.raises(ValueError, match=r"\(H,\)"):
        alibi_score_mod(torch.ones(2, 2))
    with pytest.raises(TypeError, match="mask_mod must be a function"):
        mask_from_mod(None, 1, 1, 2, 2)
    with pytest.raises(ValueError, match=r"\(B, H, T, D\)"):
        flex_attention(torch.randn(3, 4), torch.randn(3, 4), torch.randn(3, 4))
    with pytest.raises(TypeError, match="one or more"):
        and_mods()


@pytest.mark.slow
@pytest.mark.skipif(
    os.environ.get("MHA_COURSE_COMPILE_FLEX") != "1",
    reason="compiling FlexAttention takes from seconds to minutes on a CPU: set MHA_COURSE_COMPILE_FLEX=1 "
    "to run it (python benchmarks/flex_attention_cpu.py also times it)",
)
def test_compiled_flex_attention_equals_the_course():
    ok, why = compile_support()
    if not ok:
        pytest.skip(f"FlexAttention cannot compile here: {why}")
    torch.manual_seed(1)
    q, k, v = (torch.randn(1, 2, 128, 16) for _ in range(3))
    docs = torch.repeat_interleave(torch.arange(3), torch.tensor([50, 30, 48]))
    out = flex_attention(q, k, v, mask_mod=document_mod(docs), compiled=True)
    assert_close(out, scaled_dot_product_attention(q, k, v, mask=mask_from_mod(document_mod(docs), 1, 2, 128, 128))[0])
