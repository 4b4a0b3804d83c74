"""The shared input checks: integers (bools refused), one value or several keywords, messages naming expected and actual."""

import numpy as np
import pytest

from mha_course.validation import (
    require_int,
    require_non_negative_ints,
    require_positive_int,
    require_positive_ints,
    require_positive_number,
)


def test_require_int_accepts_integers_of_any_kind_and_returns_a_python_int():
    assert require_int(np.int64(3), "n") == 3 and type(require_int(np.int64(3), "n")) is int
    assert require_positive_int(1, "n") == 1


@pytest.mark.parametrize("value", [True, 2.0, "2", None])
def test_require_int_refuses_bools_floats_strings_and_none(value):
    with pytest.raises(TypeError, match=rf"n must be an int, got {type(value).__name__}"):
        require_int(value, "n")


def test_the_minimum_is_named_in_the_message():
    with pytest.raises(ValueError, match="n must be a positive int, got 0"):
        require_positive_int(0, "n")
    with pytest.raises(ValueError, match="n must be an int >= 2, got 1"):
        require_int(1, "n", 2)


def test_keyword_forms_check_every_value_in_order_and_name_the_keyword():
    require_positive_ints(B=1, T=5)
    require_non_negative_ints(T=0, S=0)
    with pytest.raises(ValueError, match="T must be a positive int, got 0"):
        require_positive_ints(B=2, T=0, S=-1)
    with pytest.raises(ValueError, match="S must be a non-negative int, got -1"):
        require_non_negative_ints(T=0, S=-1)
    with pytest.raises(TypeError, match="B must be an int, got bool"):
        require_positive_ints(B=True)


@pytest.mark.parametrize("value", [0, -1.5, float("nan")])
def test_require_positive_number_rejects_zero_negatives_and_nan(value):
    with pytest.raises(ValueError, match="bandwidth must be > 0"):
        require_positive_number(value, "bandwidth")


@pytest.mark.parametrize(
    "shapes", [((2, 1), (1, 3)), ((), (4,)), ((5, 1, 3), (4, 1)), ((1,), (1,), (7,)), ((0, 2), (1, 2))]
)
def test_broadcast_shapes_agrees_with_torch(shapes):
    import torch

    from mha_course.validation import broadcast_shapes

    assert broadcast_shapes(*shapes) == tuple(torch.broadcast_shapes(*shapes))


def test_broadcast_shapes_refuses_what_torch_refuses_with_a_value_error():
    from mha_course.validation import broadcast_shapes

    with pytest.raises(ValueError):
        broadcast_shapes((2, 3), (4, 3))


LIBRARY_CALLS = """
import sys, torch
from mha_course import (MultiHeadAttention, attention_backward, attention_loop_reference, causal_mask,
    scaled_dot_product_attention, tiled_attention)
from mha_course.efficient.online_softmax import online_softmax_attention
q, k, v = (torch.randn(2, 3, 5, 4) for _ in range(3))
mask = causal_mask(5, 5)
scaled_dot_product_attention(q, k, v, mask)
attention_loop_reference(q, k, v, mask)
tiled_attention(q, k, v, causal=True)
online_softmax_attention(q, k, v, block_size=2)
attention_backward(q, k, v, torch.randn(2, 3, 5, 4), mask=mask)
MultiHeadAttention(8, 2)(torch.randn(2, 5, 8), mask=torch.ones(2, 1, 1, 5, dtype=torch.bool))
print("sympy" in sys.modules)
"""


@pytest.mark.slow
def test_the_library_never_pays_for_torchs_lazy_sympy_import():
    """torch.broadcast_shapes imports sympy on first use (about half a second in every fresh process, such as
    each grader case process); the library's shape checks broadcast with NumPy's rule instead."""
    import subprocess
    import sys

    done = subprocess.run([sys.executable, "-c", LIBRARY_CALLS], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.strip() == "False"
