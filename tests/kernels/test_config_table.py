"""The configs a kernel ships, as data: every row reachable, every launch served, all of them autotuned.

A row for a head-dim range other than 64 and 128 (D = 32 here) reaches the autotuner and is chosen for
its launches; a row that no launch selects is an error when the table is built, never a silent no-op.
"""

from __future__ import annotations

import pytest
import torch

from mha_course.kernels.config_table import ConfigRow, ConfigTable
from mha_course.kernels.runtime import MAX_HEAD_DIM, MIN_HEAD_DIM

SMALL, WIDE, AMPERE = (64, 64, 4, 3), (128, 64, 8, 2), (32, 32, 4, 2)


def _table_with_a_d32_row() -> ConfigTable:
    return ConfigTable(
        ConfigRow(90, (MIN_HEAD_DIM, 32), None, (SMALL,)),
        ConfigRow(90, (33, MAX_HEAD_DIM), None, (WIDE,)),
        ConfigRow(80, (MIN_HEAD_DIM, MAX_HEAD_DIM), None, (AMPERE,)),
    )


def test_a_row_for_head_dim_32_is_chosen_for_d_32():
    table = _table_with_a_d32_row()
    assert table.select(90, 32, False) == table.select(90, 16, True) == (SMALL,)
    assert table.select(90, 33, False) == table.select(90, 128, True) == (WIDE,)
    assert table.shipped(90) == (SMALL, WIDE)  # every row of the GPU, not only D = 64 and 128's


def test_gpus_take_the_newest_rows_at_or_below_them():
    table = _table_with_a_d32_row()
    assert table.select(100, 32, False) == (SMALL,)  # sm_100 takes sm_90's rows
    assert table.select(86, 32, False) == table.select(75, 32, False) == (AMPERE,)
    assert table.select(0, 32, False) == (AMPERE,)  # no GPU: the oldest rows
    assert table.shipped(89) == (AMPERE,)


def test_a_row_beyond_the_launched_head_dims_is_an_error_naming_it():
    with pytest.raises(ValueError, match=r"sm_90\+ D=129\.\.256 either mask is never selected"):
        ConfigTable(
            ConfigRow(90, (MIN_HEAD_DIM, MAX_HEAD_DIM), None, (WIDE,)),
            ConfigRow(90, (129, 256), None, (SMALL,)),
        )
    with pytest.raises(ValueError, match=r"D=8\.\.128 causal is never selected in full"):
        ConfigTable(ConfigRow(90, (8, MAX_HEAD_DIM), True, (WIDE,)))


def test_a_row_covered_by_another_is_an_error_naming_both():
    with pytest.raises(ValueError, match=r"D=16\.\.128 either mask and sm_90\+ D=16\.\.64 causal both match"):
        ConfigTable(
            ConfigRow(90, (MIN_HEAD_DIM, MAX_HEAD_DIM), None, (WIDE,)),
            ConfigRow(90, (MIN_HEAD_DIM, 64), True, (SMALL,)),  # never selected: the row above serves D <= 64
        )


def test_a_launch_without_a_row_is_an_error():
    with pytest.raises(ValueError, match=r"no config row for sm_90\+ at head dim 65, causal=False"):
        ConfigTable(ConfigRow(90, (MIN_HEAD_DIM, 64), None, (WIDE,)), ConfigRow(90, (66, 128), None, (WIDE,)))
    with pytest.raises(ValueError, match="causal=True"):
        ConfigTable(ConfigRow(90, (MIN_HEAD_DIM, MAX_HEAD_DIM), False, (WIDE,)))
    with pytest.raises(ValueError, match="at least one"):
        ConfigTable()


def test_a_bad_shape_is_an_error():
    with pytest.raises(ValueError, match=r"powers of two >= 16, got \(48, 64, 4, 3\)"):
        ConfigTable(ConfigRow(90, (MIN_HEAD_DIM, MAX_HEAD_DIM), None, ((48, 64, 4, 3),)))
    with pytest.raises(ValueError, match="ships no shape"):
        ConfigTable(ConfigRow(90, (MIN_HEAD_DIM, MAX_HEAD_DIM), None, ()))


def test_select_outside_the_head_dims_names_them():
    with pytest.raises(ValueError, match=r"head dims must be in \[16, 128\]"):
        _table_with_a_d32_row().select(90, 256, False)


# --- the registry: what the autotuner is given and keeps (needs Triton's Config) ---------------------------


@pytest.fixture
def registry():
    pytest.importorskip("triton")
    from mha_course.kernels import registry

    return registry


def test_the_autotuner_is_given_the_d32_row_and_keeps_it_for_d_32(registry):
    entry = registry.KernelEntry("toy", None, _table_with_a_d32_row(), lambda *a: ((), {}), products=2)
    every = registry.shipped(entry, 90)
    assert [registry.describe(c) for c in every] == [registry.describe(registry.as_config(s)) for s in (SMALL, WIDE)]
    kept = registry.prune_to_launch(entry, 90, every, dict(D=32, DV=24, CAUSAL=False))
    assert [entry.tile(c) + (c.num_warps, c.num_stages) for c in kept] == [SMALL]
    kept = registry.prune_to_launch(entry, 90, every, dict(D=16, DV=48, CAUSAL=True))  # max(D, Dv) = 48
    assert [entry.tile(c) + (c.num_warps, c.num_stages) for c in kept] == [WIDE]


@pytest.mark.parametrize("gpu", [80, 90, 100])
def test_every_shipped_config_of_every_kernel_reaches_the_autotuner(registry, gpu):
    for entry in registry.REGISTRY.values():
        every = {registry.describe(c) for c in registry.shipped(entry, gpu)}
        for head_dim in range(MIN_HEAD_DIM, MAX_HEAD_DIM + 1):
            for causal in (False, True):
                chosen = {registry.describe(c) for c in entry.configs(gpu, head_dim, causal)}
                assert chosen and chosen <= every, (entry.name, gpu, head_dim, causal)


class _Kernel:
    """The one attribute :func:`launch_signature` reads of a jitted kernel: its parameters' names."""

    arg_names = ["X", "n", "stride", "scale", "offset", "BLOCK"]


def test_the_launch_signature_follows_tritons_specialisation(registry):
    x = torch.empty(64, dtype=torch.bfloat16)
    signature, values, attrs = registry.launch_signature(_Kernel(), (x, 1000, 1, 0.5, 32), {"BLOCK": 64})
    assert signature == dict(X="*bf16", n="i32", stride="constexpr", scale="fp32", offset="i32", BLOCK="constexpr")
    assert values == dict(BLOCK=64, stride=1)  # an int equal to 1 becomes a constant
    hint = [["tt.divisibility", 16]]
    assert attrs == {(0,): hint, (1,): [], (4,): hint}  # aligned pointer, 1000 % 16 != 0, 32 % 16 == 0
    assert registry.launch_signature(_Kernel(), (x, 2**31, 3, 0.5, 0), {"BLOCK": 64})[0]["n"] == "i64"


def test_the_launch_signature_rejects_what_it_cannot_specialise(registry):
    x = torch.empty(64)
    with pytest.raises(ValueError, match="positional, then the constexprs"):
        registry.launch_signature(_Kernel(), (x, 1, 1, 0.5), {"BLOCK": 64})
    with pytest.raises(TypeError, match="X: expected a tensor of"):
        registry.launch_signature(_Kernel(), (x.to(torch.int64), 1, 1, 0.5, 0), {"BLOCK": 64})
    with pytest.raises(TypeError, match="n: expected a tensor, an int or a float, got bool"):
        registry.launch_signature(_Kernel(), (x, True, 1, 0.5, 0), {"BLOCK": 64})


def test_tritons_autotuner_keeps_the_launchs_row(registry):
    """The prune hook as Triton's Autotuner calls it (its own ``prune_configs``): no GPU needed to build one."""
    from mha_course.kernels.forward import FORWARD

    tuned = registry.autotuned(FORWARD, ["T", "S", "D", "DV", "CAUSAL"])
    assert len(tuned.configs) == len(registry.shipped(FORWARD, registry.capability()))
    tuned.nargs = {"T": 1024, "S": 1024}  # what a launch sets before pruning
    for head_dim in (32, 64, 128):
        for causal in (False, True):
            kept = tuned.prune_configs({"D": head_dim, "DV": head_dim, "CAUSAL": causal})
            expected = FORWARD.configs(registry.capability(), head_dim, causal)
            assert sorted(map(registry.describe, kept)) == sorted(map(registry.describe, expected))
