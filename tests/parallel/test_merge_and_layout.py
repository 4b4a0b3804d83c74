"""mha_course.parallel in one process: the lse merge, split-KV decoding, ring steps, layouts, the cost model.

Everything here runs without a process group; the launches of several ranks are in test_parallel.py.
"""

from __future__ import annotations

import math

import pytest
import torch

from mha_course import causal_mask, scaled_dot_product_attention
from mha_course.parallel import (
    attention_with_lse,
    causal_work,
    comm_cost,
    merge_partial_attention,
    ring_attention,
    ring_step,
    shard_sequence,
    split_kv_decode,
    unshard_sequence,
)
from mha_course.parallel.layout import rank_chunks, visible_pairs
from mha_course.testing import assert_close

# --- the merge, split-KV decoding, ring steps, layouts ---------------------------------------------------------


def _qkv(T_=6, S_=11, D=4, Dv=3, seed=0):
    g = torch.Generator().manual_seed(seed)
    return (
        torch.randn(2, 3, T_, D, generator=g, dtype=torch.float64),
        torch.randn(2, 3, S_, D, generator=g, dtype=torch.float64),
        torch.randn(2, 3, S_, Dv, generator=g, dtype=torch.float64),
    )


def _partials(q, k, v, n, mask=None):
    parts = []
    for cols in torch.tensor_split(torch.arange(k.shape[-2]), n):
        m = None if mask is None else mask[..., cols]
        parts.append(attention_with_lse(q, k[..., cols, :], v[..., cols, :], mask=m))
    return [p[0] for p in parts], [p[1] for p in parts]


@pytest.mark.parametrize("n", [1, 2, 3, 11])
def test_merging_blocks_of_keys_gives_attention_over_all_of_them(n):
    q, k, v = _qkv()
    outs, lses = _partials(q, k, v, n)
    out, lse = merge_partial_attention(outs, lses)
    expected, _ = scaled_dot_product_attention(q, k, v)
    assert_close(out, expected)
    assert_close(lse, torch.logsumexp(q @ k.transpose(-2, -1) / 2, dim=-1))


def test_merge_is_order_independent_and_associative():
    q, k, v = _qkv(S_=12)
    outs, lses = _partials(q, k, v, 4)
    reference = merge_partial_attention(outs, lses)
    shuffled = merge_partial_attention([outs[i] for i in (2, 0, 3, 1)], [lses[i] for i in (2, 0, 3, 1)])
    left = merge_partial_attention(outs[:2], lses[:2])
    right = merge_partial_attention(outs[2:], lses[2:])
    grouped = merge_partial_attention([left[0], right[0]], [left[1], right[1]])
    for got in (shuffled, grouped):
        assert_close(got[0], reference[0])
        assert_close(got[1], reference[1])


def test_blocks_with_no_visible_key_drop_out_and_all_empty_rows_give_zeros():
    q, k, v = _qkv(T_=5, S_=8)
    mask = torch.ones(5, 8, dtype=torch.bool)
    mask[:, 4:] = False  # the second block is invisible to everyone
    mask[2] = False  # query 2 sees nothing at all
    outs, lses = _partials(q, k, v, 2, mask)
    assert torch.isneginf(lses[1]).all() and torch.equal(outs[1], torch.zeros_like(outs[1]))
    out, lse = merge_partial_attention(outs, lses)
    expected, _ = scaled_dot_product_attention(q, k, v, mask=mask)
    assert_close(out, expected)
    assert not out.isnan().any() and torch.equal(out[..., 2, :], torch.zeros_like(out[..., 2, :]))
    assert torch.isneginf(lse[..., 2]).all()
    alone = merge_partial_attention(outs[:1], lses[:1])
    assert_close(out, alone[0])


def test_merge_survives_huge_log_sum_exps_and_keeps_dtypes():
    out_a, out_b = torch.ones(3, 2, dtype=torch.float16), torch.zeros(3, 2, dtype=torch.float16)
    lse = torch.tensor([900.0, 900.0, -math.inf])
    out, merged = merge_partial_attention([out_a, out_b], [lse, lse - 1e-9])
    assert out.dtype == torch.float16 and merged.dtype == torch.float32
    assert_close(out[:2], torch.full((2, 2), 0.5, dtype=torch.float16))
    assert torch.isfinite(merged[:2]).all() and torch.isneginf(merged[2])


def test_merge_refuses_bad_partials():
    o, l = torch.zeros(2, 3, 4), torch.zeros(2, 3)
    with pytest.raises(ValueError, match="at least one block"):
        merge_partial_attention([], [])
    with pytest.raises(ValueError, match="one lse per out"):
        merge_partial_attention([o, o], [l])
    with pytest.raises(TypeError, match="list or tuple"):
        merge_partial_attention(o, l)
    with pytest.raises(ValueError, match=r"shape outs\[0\]\.shape\[:-1\]"):
        merge_partial_attention([o], [torch.zeros(2, 4)])
    with pytest.raises(TypeError, match="dtype"):
        merge_partial_attention([o, o.double()], [l, l])
    with pytest.raises(TypeError, match="floating"):
        merge_partial_attention([o], [l.long()])


@pytest.mark.parametrize("splits", [1, 4, 9, 40])
def test_split_kv_decode_equals_attention_over_the_whole_cache(splits):
    q, k, v = _qkv(T_=1, S_=33)
    out, lse = split_kv_decode(q, k, v, splits, return_lse=True)
    expected, _ = scaled_dot_product_attention(q, k, v)
    assert_close(out, expected)
    assert lse.shape == (2, 3, 1)
    with pytest.raises(ValueError, match="num_splits"):
        split_kv_decode(q, k, v, 0)
    with pytest.raises(ValueError, match="same last dim D"):
        split_kv_decode(q, k[..., :3], v, 2)


@pytest.mark.parametrize("layout", ["contiguous", "zigzag"])
@pytest.mark.parametrize("world_size", [1, 2, 3, 4])
def test_a_ring_of_steps_in_one_process_equals_causal_attention(layout, world_size):
    q, k, v = _qkv(T_=10, S_=10)
    expected, _ = scaled_dot_product_attention(q, k, v, mask=causal_mask(10))
    shards = []
    for rank in range(world_size):
        rows = []
        for qa, qb in rank_chunks(10, world_size, rank, layout):
            out, lse = (
                torch.zeros(2, 3, qb - qa, 3, dtype=torch.float64),
                torch.full((2, 3, qb - qa), -math.inf, dtype=torch.float64),
            )
            for step in range(world_size):
                for ka, kb in rank_chunks(10, world_size, (rank - step) % world_size, layout):
                    out, lse = ring_step(q[..., qa:qb, :], k[..., ka:kb, :], v[..., ka:kb, :], out, lse, qa, ka, True)
            rows.append(out)
        shards.append(torch.cat(rows, dim=-2))
    assert_close(unshard_sequence(shards, layout), expected)


def test_block_attention_agrees_on_both_of_its_paths():
    q, k, v = _qkv(T_=6, S_=6)
    tril = torch.ones(6, 6, dtype=torch.bool).tril()
    for causal in (False, True):
        fast = attention_with_lse(q, k, v, causal=causal)  # float64 without a mask: the tiled loop
        explicit = attention_with_lse(q, k, v, mask=tril if causal else torch.ones(6, 6, dtype=torch.bool))
        assert_close(fast[0], explicit[0])
        assert_close(fast[1], explicit[1])
    half = attention_with_lse(*(x.half() for x in (q, k, v)), causal=True)
    assert half[0].dtype == half[1].dtype == torch.float32
    assert_close(half[0], attention_with_lse(q, k, v, causal=True)[0].float(), dtype=torch.float16)
    with pytest.raises(TypeError, match="mask must be bool"):
        attention_with_lse(q, k, v, mask=torch.zeros(6, 6, dtype=torch.float64))


def test_a_ring_step_over_partly_overlapping_positions_masks_by_global_position():
    q, k, v = _qkv(T_=6, S_=6)  # queries at 3..8, keys at 5..10
    visible = torch.arange(5, 11) <= torch.arange(3, 9).unsqueeze(-1)
    out, lse = ring_step(
        q,
        k,
        v,
        torch.zeros(2, 3, 6, 3, dtype=torch.float64),
        torch.full((2, 3, 6), -math.inf, dtype=torch.float64),
        3,
        5,
        causal=True,
    )
    expected, _ = scaled_dot_product_attention(q, k, v, mask=visible)
    assert_close(out, expected)
    assert torch.isneginf(lse[..., :2]).all() and torch.isfinite(lse[..., 2:]).all()  # queries 3, 4 see no key


def test_a_future_block_leaves_the_running_result_unchanged():
    q, k, v = _qkv(T_=3, S_=3)
    out, lse = torch.randn(2, 3, 3, 3, dtype=torch.float64), torch.randn(2, 3, 3, dtype=torch.float64)
    same = ring_step(q, k, v, out, lse, q_offset=0, k_offset=3, causal=True)
    assert same[0] is out and same[1] is lse
    with pytest.raises(ValueError, match="out must have shape"):
        ring_step(q, k, v, out[..., :2, :], lse, 0, 0)
    with pytest.raises(ValueError, match="q_offset"):
        ring_step(q, k, v, out, lse, -1, 0)


def test_layouts_cut_and_reassemble_any_length():
    for T_ in (0, 1, 7, 16):
        for world_size in (1, 2, 3, 5):
            for layout in ("contiguous", "zigzag"):
                x = torch.arange(float(T_)).reshape(1, T_, 1)
                shards = [shard_sequence(x, world_size, r, layout) for r in range(world_size)]
                assert torch.equal(unshard_sequence(shards, layout), x)
    assert rank_chunks(16, 4, 0, "zigzag") == [(0, 2), (14, 16)]
    with pytest.raises(ValueError, match="layout"):
        rank_chunks(8, 2, 0, "striped")
    with pytest.raises(ValueError, match=r"rank must be in \[0, world_size=2\)"):
        rank_chunks(8, 2, 2)
    with pytest.raises(ValueError, match="layout 'zigzag'"):
        unshard_sequence([torch.zeros(1, 3, 1), torch.zeros(1, 5, 1)], "zigzag")


def test_causal_work_shows_the_imbalance_and_zigzag_removes_it():
    W, T_ = 4, 64
    n, c = T_ // W, T_ // (2 * W)  # a rank's block, a zigzag chunk
    contiguous, zigzag = causal_work(T_, W, "contiguous"), causal_work(T_, W, "zigzag")
    diagonal = n * (n + 1) // 2
    assert contiguous[0] == [diagonal, 0, 0, 0] and contiguous[W - 1] == [diagonal] + [n * n] * (W - 1)
    assert all(len({row[s] for row in zigzag}) == 1 for s in range(W)), "zigzag: equal work per step"
    assert zigzag[0] == [2 * c * c + c] + [2 * c * c] * (W - 1)
    critical = {
        name: sum(max(row[s] for row in w) for s in range(W))
        for name, w in (("contiguous", contiguous), ("zigzag", zigzag))
    }
    assert critical["contiguous"] == diagonal + (W - 1) * n * n and critical["zigzag"] == 2 * c * c * W + c
    assert sum(map(sum, contiguous)) == sum(map(sum, zigzag)) == T_ * (T_ + 1) // 2  # the same pairs in all
    assert visible_pairs(0, 3, 5, 2) == 0 and visible_pairs(5, 2, 0, 3) == 6 and visible_pairs(2, 3, 2, 3) == 6
    assert visible_pairs(2, 3, 2, 3, causal=False) == 9


def test_ring_attention_needs_a_process_group_and_forward_only_inputs():
    q, k, v = _qkv()
    with pytest.raises(RuntimeError, match="not initialised"):
        ring_attention(q, k, v)
    with pytest.raises(ValueError, match="forward pass only"):
        ring_attention(q.requires_grad_(), k, v)
    with pytest.raises(ValueError, match="layout"):
        ring_attention(q.detach(), k, v, layout="striped")


# --- the cost model --------------------------------------------------------------------------------------------


def test_cost_formulas():
    assert comm_cost.allreduce_bytes(1000, 4, 4) == 6000
    assert comm_cost.allreduce_bytes(1000, 1, 4) == 0
    assert comm_cost.tp_bytes(2, 8, 16, 2, 2) == 2 * 8 * 16 * 2
    assert comm_cost.ring_step_bytes(1, 2, 8, 4, 3, 4) == 1 * 2 * 8 * 7 * 4
    assert comm_cost.ring_bytes(1, 2, 32, 4, 4, 4, 0, 4) == 3 * comm_cost.ring_step_bytes(1, 2, 8, 4, 4, 4)
    # T = 7 over 3 ranks: blocks 3, 2, 2; rank 0 passes on its own (3) and rank 2's (2)
    assert comm_cost.ring_bytes(1, 1, 7, 1, 1, 3, 0, 1) == 2 * (3 + 2)
    assert comm_cost.transfer_time(1e9, 50e9, 1e-5) == pytest.approx(0.02001)
    assert comm_cost.ring_hiding_block(1e15, 5e11, 2) == pytest.approx(2000)
    assert comm_cost.ring_hiding_block(1e15, 5e11, 2, balanced_causal=True) == pytest.approx(4000)
    assert comm_cost.tp_compute_over_comm(1024, 0, 2, 1e12, 1e9, 4) == pytest.approx(4 * 1024 * 1e9 / (4 * 1e12))
    with pytest.raises(ValueError, match="world_size must be an int >= 2"):
        comm_cost.tp_compute_over_comm(1024, 0, 1, 1e12, 1e9, 4)
    with pytest.raises(ValueError, match="bandwidth"):
        comm_cost.transfer_time(10, 0)


def test_grouped_query_attention_shrinks_the_ring_break_even_by_the_head_ratio():
    mha = comm_cost.ring_hiding_block(989.4e12, 50e9, 2)
    gqa = comm_cost.ring_hiding_block(989.4e12, 50e9, 2, num_heads=64, num_kv_heads=8)
    assert comm_cost.ring_hiding_block(989.4e12, 50e9, 2, num_heads=64) == pytest.approx(mha)
    assert mha / gqa == pytest.approx(8) and gqa == pytest.approx(989.4e12 * 2 * 8 / (2 * 50e9 * 64))
    with pytest.raises(ValueError, match="divide"):
        comm_cost.ring_hiding_block(1e12, 1e9, 2, num_heads=6, num_kv_heads=4)


@pytest.mark.parametrize(("W", "G"), [(2, 8), (4, 8), (8, 8), (4, 4)])
def test_ulysses_bytes_follow_the_closed_form_and_undercut_the_ring_by_w_over_2_for_mha(W, G):
    B, H, T, D = 2, 8, 1024, 16
    for rank in range(W):
        got = comm_cost.ulysses_bytes(B, H, G, T, T, D, D, W, rank, 2)
        assert got == pytest.approx((W - 1) / W * B * (T / W) * (H * D + G * D + G * D + H * D) * 2)
    ring = comm_cost.ring_bytes(B, G, T, D, D, W, 0, 2)
    if G == H:
        assert ring / comm_cost.ulysses_bytes(B, H, G, T, T, D, D, W, 0, 2) == pytest.approx(W / 2)
    # uneven blocks: T = 7 over 2 ranks (4, 3); rank 0 keeps its share and gets rank 1's 3 rows of its heads back
    assert comm_cost.ulysses_bytes(1, 2, 2, 7, 7, 1, 1, 2, 0, 1) == 1 * (1 * 4 * 1 + 1 * 4 * 2) + 1 * 1 * 3
    with pytest.raises(ValueError, match="divisible"):
        comm_cost.ulysses_bytes(1, 6, 3, 8, 8, 4, 4, 2, 0, 2)
