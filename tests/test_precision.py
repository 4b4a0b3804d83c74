"""Mixed precision, measured: the format table and why kernels accumulate in float32."""

from __future__ import annotations

import pytest

from mha_course import precision


def test_format_table_reads_torch_finfo():
    rows = {r["dtype"]: r for r in precision.format_table()}
    assert rows["float16"]["eps"] == 2**-10 and rows["float16"]["max"] == 65504
    assert rows["bfloat16"]["eps"] == 2**-7 and rows["bfloat16"]["max"] > 3e38
    assert rows["float32"]["decimal_digits"] > rows["float16"]["decimal_digits"] > rows["bfloat16"]["decimal_digits"]


@pytest.mark.parametrize("magnitude", [1.0, 8.0])
def test_float32_accumulation_beats_16_bit_accumulation(magnitude):
    rows = {(r["dtype"], r["variant"]): r for r in precision.attention_errors(T=256, D=32, magnitude=magnitude)}
    for dtype, eps in (("float16", 2**-10), ("bfloat16", 2**-7)):
        wide, narrow = rows[(dtype, "accumulate32")], rows[(dtype, "accumulate16")]
        assert wide["finite"] and wide["max_error"] < narrow["max_error"]
        assert wide["max_error"] <= 2 * eps * max(1.0, magnitude)  # about one rounding of the output


def test_bad_sizes_are_refused():
    with pytest.raises(ValueError, match="T and D"):
        precision.attention_errors(T=0)
