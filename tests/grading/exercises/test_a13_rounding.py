"""Assignment 13's attention cases judge a correct float32 kernel the same on every draw of the inputs.

A kernel exponentiates scores in float32: with large scores (the cases that test the running max) a
correct kernel lands a few float32 epsilons times max|s| from the float64 reference, which the usual
float32 tolerance refuses on outputs near zero for about one draw in 300. The cases allow that
rounding (``_float32_error_bound``) and still name every wrong kernel the diagnosis knows.
"""

import math

import numpy as np
import pytest

from mha_course.core.softmax import LOG2E
from mha_course.grading.engine import case_inputs
from mha_course.grading.exercises import a13_triton_kernel as a13

SALTS = range(1, 121)


def _online_softmax_float32(q, k, v, block_n=16, rescale=True):
    """The kernel's loop in NumPy float32: scores scaled by log2(e)/sqrt(D), exp2, blocks of block_n keys."""
    q, k, v = (x.astype(np.float32) for x in (q, k, v))
    scale = np.float32(LOG2E / math.sqrt(q.shape[-1]))
    m = np.full(q.shape[0], -np.inf, np.float32)
    total, acc = np.zeros(q.shape[0], np.float32), np.zeros((q.shape[0], v.shape[1]), np.float32)
    for start in range(0, k.shape[0], block_n):
        scores = (q @ k[start : start + block_n].T) * scale  # (T, block_n)
        m_new = np.maximum(m, scores.max(axis=1))
        alpha = np.exp2(m - m_new).astype(np.float32) if rescale else np.float32(1)
        p = np.exp2(scores - m_new[:, None]).astype(np.float32)
        total, acc = total * alpha + p.sum(axis=1), acc * np.reshape(alpha, (-1, 1)) + p @ v[start : start + block_n]
        m = m_new
    return (acc / total[:, None]).astype(np.float32)


@pytest.mark.slow  # 120 draws of each case: about 2 s per case
@pytest.mark.parametrize("case", a13.ATTENTION.cases, ids=lambda c: c.name)
def test_a_correct_float32_kernel_passes_on_every_draw_and_a_wrong_one_never(case):
    for salt in SALTS:
        with case_inputs.salted(salt):
            inputs = case.make_inputs()
        expected = a13._attention_reference(inputs)
        q, k, v = (inputs[n] for n in "qkv")
        assert a13._diagnose_attention(_online_softmax_float32(q, k, v), expected, inputs) is None, salt
        wrong = _online_softmax_float32(q, k, v, rescale=False)
        if not np.allclose(wrong, expected, atol=1e-3):  # the running max grew after the first block
            assert a13._diagnose_attention(wrong, expected, inputs) is not None, salt
        unscaled = a13._attention_reference(inputs, scale=1.0)
        assert "1/sqrt(D)" in (a13._diagnose_attention(unscaled, expected, inputs) or ""), salt


def test_the_bound_grows_with_the_scores_and_stays_far_below_a_mistake():
    small = {"q": np.ones((2, 16), np.float32) * 0.1, "k": np.ones((3, 16), np.float32) * 0.1, "v": np.ones((3, 16))}
    large = {name: array * 60 for name, array in small.items()}
    assert a13._float32_error_bound(small) < a13._float32_error_bound(large)
    for case in a13.ATTENTION.cases:  # on the cases' own inputs: far below what any known mistake changes
        assert a13._float32_error_bound(case.make_inputs()) < 1e-3, case.name


def test_a_cases_absolute_tolerance_raises_the_dtypes_and_never_lowers_it():
    from mha_course.grading.learner import hints

    expected = np.zeros((2, 3), np.float32)
    off = expected + np.float32(5e-4)
    assert not hints.close(off, expected)  # float32's own tolerance: 1e-5 absolute
    assert hints.close(off, expected, atol=1e-3)
    assert not hints.close(expected + np.float32(2e-5), expected, atol=1e-9)  # a smaller atol is no stricter
    assert hints.close(expected + np.float32(5e-6), expected, atol=1e-9)
    assert hints.compare(off, expected, "output", atol=1e-3) is None
    assert "output" in (hints.compare(off, expected, "output") or "")
