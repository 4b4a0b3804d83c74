"""The wire between the sandbox and the grader carries plain data only: arrays, numbers, tuples and lists come back
as they went; subclasses, object arrays and anything else are refused.

(From test_grading_engine.py before the tests mirrored the package.)
"""

from __future__ import annotations

import numpy as np
import pytest

from mha_course.grading.inside import wire


def test_wire_roundtrip_and_rejections():
    import torch

    value = (np.arange(6.0).reshape(2, 3), torch.ones(2, dtype=torch.float16), 3, 2.5, True, None, [np.asarray(True)])
    back = wire.roundtrip(value)
    assert type(back) is tuple and type(back[0]) is np.ndarray and back[1].dtype == np.float16
    np.testing.assert_array_equal(back[0], value[0])
    assert back[2:6] == (3, 2.5, True, None) and back[6][0].shape == ()

    class Liar(np.ndarray):
        def __eq__(self, other):
            return True

    for bad in (
        np.zeros(3).view(Liar),
        torch.zeros(2).as_subclass(type("T", (torch.Tensor,), {})),
        np.array([object()]),
        object(),
    ):
        with pytest.raises(wire.RejectedOutput):
            wire.pack(bad)
    with pytest.raises(ValueError):
        wire.unpack({"t": "array", "i": 0, "n": 5}, b"\x93NUMPY")
