"""Held-back bad input: every public entry point raises ValueError/TypeError whose message says what
was expected and what it got (shapes for shape errors), never a bare torch/NumPy internal error."""

import numpy as np
import pytest
import torch
from torch import nn

from mha_course import (
    MultiHeadAttention,
    attention_backward,
    causal_mask,
    merge_heads,
    padding_mask,
    scaled_dot_product_attention,
    softmax,
    softmax_np,
    split_heads,
    tiled_attention,
)
from mha_course.kv_cache import KVCache, decode_step
from mha_course.masks import from_torch_attn_mask, to_torch_attn_mask
from mha_course.positions import LearnedPositions, apply_rotary
from mha_course.variants import (
    GroupedQueryAttention,
    grouped_query_attention,
    linformer_projections,
    repeat_kv,
    sliding_window_mask,
)

q4, k4, v4 = torch.zeros(2, 3, 4, 8), torch.zeros(2, 3, 5, 8), torch.zeros(2, 3, 5, 6)
g4 = torch.zeros(2, 3, 4, 6)
MHA = MultiHeadAttention(8, 2)
X = torch.zeros(2, 4, 8)

# (label, call, exception, regex the message must match: expected ... actual)
CASES = [
    ("sdpa q/k D differ", lambda: scaled_dot_product_attention(q4, torch.zeros(2, 3, 5, 7), v4), ValueError,
     r"same last dim D.*\(2, 3, 4, 8\).*\(2, 3, 5, 7\)"),
    ("sdpa k/v S differ", lambda: scaled_dot_product_attention(q4, k4, torch.zeros(2, 3, 6, 6)), ValueError,
     r"same length S.*S=5.*S=6"),
    ("sdpa rank 1", lambda: scaled_dot_product_attention(torch.zeros(8), k4, v4), ValueError,
     r"\(\.\.\., T, D\).*got \(8,\)"),
    ("sdpa non-tensor", lambda: scaled_dot_product_attention(np.zeros((4, 8)), k4, v4), TypeError,
     r"q must be a torch.Tensor, got ndarray"),
    ("sdpa integer", lambda: scaled_dot_product_attention(q4.long(), k4.long(), v4.long()), TypeError,
     r"floating-point.*int64"),
    ("sdpa batch", lambda: scaled_dot_product_attention(q4, torch.zeros(3, 3, 5, 8), torch.zeros(3, 3, 5, 6)),
     ValueError, r"broadcast.*q \(2, 3\).*k \(3, 3\)"),
    ("sdpa mask transposed", lambda: scaled_dot_product_attention(q4, k4, v4, torch.ones(5, 4, dtype=torch.bool)),
     ValueError, r"T=4, S=5.*got \(5, 4\)"),
    ("sdpa mask batch", lambda: scaled_dot_product_attention(q4, k4, v4, torch.ones(3, 1, 4, 5, dtype=torch.bool)),
     ValueError, r"\(2, 3, 4, 5\).*got \(3, 1, 4, 5\)"),
    ("sdpa mask int", lambda: scaled_dot_product_attention(q4, k4, v4, torch.ones(4, 5, dtype=torch.int64)),
     TypeError, r"bool.*floating.*int64"),
    ("backward mask batch", lambda: attention_backward(q4, k4, v4, g4, mask=torch.ones(3, 1, 4, 5, dtype=torch.bool)),
     ValueError, r"\(2, 3, 4, 5\).*got \(3, 1, 4, 5\)"),
    ("backward grad_out", lambda: attention_backward(q4, k4, v4, g4[..., :5]), ValueError,
     r"\(2, 3, 4, 6\), got \(2, 3, 4, 5\)"),
    ("tiled D", lambda: tiled_attention(q4, torch.zeros(2, 3, 5, 7), v4, 2), ValueError, r"\(2, 3, 4, 8\).*\(2, 3, 5, 7\)"),
    ("mha E % H", lambda: MultiHeadAttention(10, 3), ValueError, r"embed_dim=10.*num_heads=3"),
    ("mha rank", lambda: MHA(torch.zeros(4, 8)), ValueError, r"\(B, T, E\).*got \(4, 8\)"),
    ("mha E", lambda: MHA(torch.zeros(2, 4, 6)), ValueError, r"E=8.*got \(2, 4, 6\)"),
    ("mha k/v S", lambda: MHA(X, torch.zeros(2, 5, 8), torch.zeros(2, 6, 8)), ValueError,
     r"\(2, 5, 8\).*\(2, 6, 8\)"),
    ("mha mask", lambda: MHA(X, mask=torch.ones(4, 5, dtype=torch.bool)), ValueError,
     r"\(B=2, H=2, T=4, S=4\).*got \(4, 5\)"),
    ("mha mask dtype", lambda: MHA(X, mask=torch.ones(4, 4, dtype=torch.int64)), TypeError, r"int64"),
    ("mha int input", lambda: MHA(X.long()), TypeError, r"floating-point.*int64"),
    ("split E % H", lambda: split_heads(torch.zeros(2, 3, 10), 3), ValueError, r"E=10.*\(2, 3, 10\).*num_heads=3"),
    ("split H = 0", lambda: split_heads(torch.zeros(2, 3, 10), 0), ValueError, r"positive.*num_heads=0"),
    ("merge rank", lambda: merge_heads(torch.zeros(2, 3, 10)), ValueError, r"\(B, H, T, D\).*\(2, 3, 10\)"),
    ("softmax dim type", lambda: softmax(torch.zeros(3, 4), 1.0), TypeError, r"dim must be an int, got float"),
    ("softmax dim None", lambda: softmax(torch.zeros(3, 4), None), TypeError, r"dim must be an int, got NoneType"),
    ("softmax dim range", lambda: softmax(torch.zeros(3, 4), 2), ValueError, r"\[-2, 1\].*\(3, 4\).*got 2"),
    ("softmax_np axis range", lambda: softmax_np(np.zeros((3, 4)), 2), ValueError, r"\[-2, 1\].*\(3, 4\).*got 2"),
    ("softmax_np axis type", lambda: softmax_np(np.zeros((3, 4)), 1.0), TypeError, r"axis must be an int"),
    ("causal float", lambda: causal_mask(3.0), TypeError, r"T must be an int, got float"),
    ("padding > S", lambda: padding_mask([2, 5], 4), ValueError, r"\[0, S=4\].*\[2, 5\]"),
    ("padding str", lambda: padding_mask("ab", 4), TypeError, r"lengths must be a \(B,\) sequence of ints"),
    ("padding float", lambda: padding_mask([1.5], 4), TypeError, r"integers.*float"),
    ("padding 2-D", lambda: padding_mask([[1, 2]], 4), ValueError, r"\(B,\).*\(1, 2\)"),
    ("to_torch_attn_mask int", lambda: to_torch_attn_mask(torch.ones(2, 3, dtype=torch.int64)), TypeError,
     r"bool or floating.*int64"),
    ("from_torch_attn_mask int", lambda: from_torch_attn_mask(torch.ones(2, 3, dtype=torch.uint8)), TypeError,
     r"bool or floating.*uint8"),
    ("gqa D", lambda: grouped_query_attention(torch.zeros(1, 4, 3, 8), torch.zeros(1, 2, 3, 7), torch.zeros(1, 2, 3, 8)),
     ValueError, r"one D.*\(1, 4, 3, 8\).*\(1, 2, 3, 7\)"),
    ("repeat_kv float", lambda: repeat_kv(torch.zeros(1, 2, 3, 4), 4.0), TypeError, r"num_heads must be an int"),
    ("GQA module float", lambda: GroupedQueryAttention(8.0, 2, 1), TypeError, r"embed_dim must be an int"),
    ("GQA module E", lambda: GroupedQueryAttention(8, 2, 1)(torch.zeros(1, 3, 6)), ValueError, r"E=8.*\(1, 3, 6\)"),
    ("window float", lambda: sliding_window_mask(3.5, 1), TypeError, r"T must be an int"),
    ("linformer rank float", lambda: linformer_projections(4, 2.0), TypeError, r"rank must be an int"),
    ("KVCache max_len bool", lambda: KVCache(1, 2, 4, max_len=True), TypeError, r"max_len.*True"),
    ("decode_step k rank", lambda: decode_step(torch.zeros(1, 2, 1, 4), torch.zeros(2, 1, 4), torch.zeros(1, 2, 1, 4),
                                               KVCache(1, 2, 4)), ValueError, r"\(B, G, T, D\).*\(2, 1, 4\)"),
    ("rope positions list", lambda: apply_rotary(torch.zeros(3, 4), [0, 1, 2]), TypeError,
     r"positions must be a torch.Tensor, got list"),
    ("learned positions", lambda: LearnedPositions(0, 4), ValueError, r"max_len must be a positive int, got 0"),
    ("from_torch kdim", lambda: MultiHeadAttention.from_torch(nn.MultiheadAttention(8, 2, kdim=4, vdim=4)),
     ValueError, r"embed_dim=8.*kdim=4"),
]


@pytest.mark.parametrize("call,exc,pattern", [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_bad_input_raises_a_readable_error(call, exc, pattern):
    with pytest.raises(exc, match=pattern) as info:
        call()
    message = str(info.value)
    assert type(info.value) in (ValueError, TypeError), type(info.value)
    assert 20 <= len(message) <= 400, message  # says something, and fits on a screen
