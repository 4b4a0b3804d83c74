"""Mixed precision, measured: the format table and why kernels accumulate in float32."""

from __future__ import annotations

import pytest

from mha_course.efficient import precision


def test_format_table_reads_torch_finfo():
    rows = {r["dtype"]: r for r in precision.format_table()}
    assert rows["float16"]["eps"] == 2**-10 and rows["float16"]["max"] == 65504
    assert rows["bfloat16"]["eps"] == 2**-7 and rows["bfloat16"]["max"] > 3e38
    assert rows["float32"]["decimal_digits"] > rows["float16"]["decimal_digits"] > rows["bfloat16"]["decimal_digits"]


@pytest.mark.parametrize("magnitude", [1.0, 8.0])
def test_float32_intermediates_beat_16_bit_intermediates(magnitude):
    rows = {(r["dtype"], r["variant"]): r for r in precision.attention_errors(T=256, D=32, magnitude=magnitude)}
    for dtype, eps in (("float16", 2**-10), ("bfloat16", 2**-7)):
        wide, narrow = rows[(dtype, "intermediates32")], rows[(dtype, "intermediates16")]
        assert wide["finite"] and wide["max_error"] < narrow["max_error"]
        assert wide["max_error"] <= 2 * eps * max(1.0, magnitude)  # about one rounding of the output


def test_bad_sizes_are_refused():
    with pytest.raises(ValueError, match="T and D"):
        precision.attention_errors(T=0)


def test_tf32_rounding_keeps_ten_mantissa_bits_and_rounds_ties_away_from_zero():
    import torch

    x = torch.tensor([1.0, 1 + 2**-11, 1 + 2**-10 + 2**-11, -(1 + 2**-10 + 2**-11), 1 / 3, float("inf"), -3e38])
    y = precision.round_to_tf32(x)
    assert y.tolist()[:4] == [1.0, 1 + 2**-10, 1 + 2**-9, -(1 + 2**-9)]  # the ties go away from zero
    assert abs(y[4].item() - 1 / 3) <= 2**-11 / 3 and y[5].item() == float("inf")
    assert (y.view(torch.int32) & 0x1FFF).eq(0).all()  # the 13 low mantissa bits are cleared
    assert y[6].item() == pytest.approx(-3e38, rel=2**-10)
    with pytest.raises(TypeError, match="float32"):
        precision.round_to_tf32(x.double())


def test_tf32_errs_like_a_ten_bit_mantissa_and_ieee_float32_hardly_at_all():
    rows = {(r["dtype"], r["variant"]): r["max_error"] for r in precision.attention_errors(T=256, D=32)}
    assert rows[("float32", "ieee")] < 1e-5 < rows[("float32", "tf32")] < 2**-8
    # on the CPU, autocast leaves the softmax in the 16-bit dtype: no better than intermediates16
    assert rows[("bfloat16", "autocast")] >= rows[("bfloat16", "intermediates32")]


def test_torch_16_bit_sums_accumulate_in_float32_so_only_storing_loses_terms():
    import torch

    for dtype, stops_at in ((torch.bfloat16, 256), (torch.float16, 2048)):
        assert torch.ones(4096, dtype=dtype).sum().item() == 4096  # float32 inside the reduction
        total = torch.zeros((), dtype=dtype)
        for _ in range(4096):
            total = total + 1  # each partial sum stored in 16 bits
        assert total.item() == stops_at  # at 2/eps the 1 is exactly half the gap: ties-to-even keeps the sum


def test_truncation_to_tf32_goes_towards_zero_and_errs_up_to_one_gap():
    import torch

    x = torch.tensor([1 + 2**-10 + 2**-11 + 2**-12, -(1 + 2**-11), 1 / 3, float("inf")])
    y = precision.truncate_to_tf32(x)
    assert y.tolist()[:2] == [1 + 2**-10, -1.0] and y[3].item() == float("inf")
    assert precision.round_to_tf32(x)[0].item() == 1 + 2**-9  # rounding goes up where truncation goes down
    finite = x[:3]
    assert (y[:3].abs() <= finite.abs()).all() and ((finite - y[:3]).abs() < 2**-10 * finite.abs()).all()
    with pytest.raises(TypeError, match="float32"):
        precision.truncate_to_tf32(x.half())
    rows = {(r["dtype"], r["variant"]): r["max_error"] for r in precision.attention_errors(T=256, D=32)}
    assert rows[("float32", "tf32")] < rows[("float32", "tf32_truncated")] < 2**-7
