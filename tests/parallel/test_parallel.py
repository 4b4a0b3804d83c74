"""mha_course.parallel: tensor-parallel heads and ring attention under gloo, against one process.

Multi-process checks start each world size (1, 2, 3) ONCE per module: every rank runs
:func:`battery`, which does all the distributed work and returns plain results; the tests below
compare them with the single-process library. Shapes are tiny and awkward on purpose: T = 7 is
no multiple of 2 or 3, Dv != D, cross-attention with S != T.
"""

from __future__ import annotations

import math
import time

import pytest
import torch
import torch.distributed as dist
from torch import nn

from mha_course import MultiHeadAttention, causal_mask, padding_mask, scaled_dot_product_attention
from mha_course.parallel import (
    TensorParallelMultiHeadAttention,
    attention_with_lse,
    causal_work,
    comm_cost,
    demo,
    merge_partial_attention,
    ring_attention,
    ring_step,
    run_ranks,
    shard_sequence,
    split_kv_decode,
    unshard_sequence,
)
from mha_course.parallel.layout import rank_chunks, visible_pairs
from mha_course.testing import assert_close

E, H, B, T, S = 24, 6, 2, 7, 5
RING_CASES = [  # (name, causal, layout, T, S)
    ("plain", False, "contiguous", 7, 7),
    ("causal", True, "contiguous", 7, 7),
    ("causal zigzag", True, "zigzag", 7, 7),
    ("plain zigzag", False, "zigzag", 9, 9),
    ("cross S != T", False, "contiguous", 7, 5),
]


# --- what every rank runs (module level: the ranks import it by name) -------------------------------


def _tp_problem():
    torch.manual_seed(0)
    module = MultiHeadAttention(E, H).double()
    g = torch.Generator().manual_seed(1)
    x = torch.randn(B, T, E, generator=g, dtype=torch.float64)
    kv = torch.randn(B, S, E, generator=g, dtype=torch.float64)
    masks = {
        "none": None,
        "causal": causal_mask(T),
        "padding": padding_mask([T, 4], T),
        "per-head float": torch.randn(B, H, T, T, generator=g, dtype=torch.float64),
    }
    return module, x, kv, masks, torch.randn(B, T, E, generator=g, dtype=torch.float64)


def _ring_problem(T_, S_):
    g = torch.Generator().manual_seed(2)
    return (
        torch.randn(B, 2, T_, 4, generator=g, dtype=torch.float64),
        torch.randn(B, 2, S_, 4, generator=g, dtype=torch.float64),
        torch.randn(B, 2, S_, 3, generator=g, dtype=torch.float64),
    )


def battery(rank: int, world_size: int) -> dict:
    """All distributed checks of this module, in one launch; returns plain results for the tests."""
    results = {"tp": {}, "ring": {}, "errors": {}}
    module, x, kv, masks, grad = _tp_problem()
    for name, mask in masks.items():
        shard = TensorParallelMultiHeadAttention.from_module(module, rank, world_size)
        out, weights = shard(x, mask=mask)
        results["tp"][name] = (out.detach(), weights.detach(), list(shard.head_range))
    # gradients: cross-attention, every input and parameter
    shard = TensorParallelMultiHeadAttention.from_module(module, rank, world_size)
    xq, xk = x.clone().requires_grad_(), kv.clone().requires_grad_()
    xv = (kv * 0.5).detach().requires_grad_()
    out, _ = shard(xq, xk, xv, mask=padding_mask([S, 3], S))
    out.backward(grad)
    results["tp"]["grads"] = {
        "inputs": (xq.grad, xk.grad, xv.grad),
        "params": {n: p.grad for n, p in shard.named_parameters()},
        "heads": list(shard.head_range),
    }
    from_torch = TensorParallelMultiHeadAttention.from_module(module.to_torch(), rank, world_size)
    results["tp"]["from torch"] = from_torch(x)[0].detach()
    for name, causal, layout, T_, S_ in RING_CASES:
        q, k, v = (shard_sequence(t, world_size, rank, layout) for t in _ring_problem(T_, S_))
        with torch.no_grad():
            out, stats = ring_attention(q, k, v, causal=causal, layout=layout, return_stats=True)
        results["ring"][name] = (out, stats)
    results["errors"]["wrong lengths"] = _error_of(
        lambda: ring_attention(*(t[..., : 1 + rank, :] for t in _ring_problem(T, T)), causal=True)
    )
    results["errors"]["shard for another world"] = _error_of(
        lambda: TensorParallelMultiHeadAttention.from_module(module, 0, 6)(x)
    )
    dist.barrier()
    return results


def _error_of(fn) -> str | None:
    try:
        fn()
    except (TypeError, ValueError) as exc:
        return f"{type(exc).__name__}: {exc}"
    return None


def fail_on_rank_one(rank: int, world_size: int) -> None:
    if rank == 1:
        raise ValueError("rank one says no")
    time.sleep(30)


@pytest.fixture(scope="module", params=[1, 2, 3], ids=lambda w: f"W={w}")
def ranks(request):
    return request.param, run_ranks(battery, request.param, timeout_s=240)


# --- equality with one process ----------------------------------------------------------------------------


@pytest.mark.parametrize("mask_name", ["none", "causal", "padding", "per-head float"])
def test_tensor_parallel_mha_equals_the_whole_module(ranks, mask_name):
    world_size, results = ranks
    module, x, _, masks, _ = _tp_problem()
    with torch.no_grad():
        expected, weights = module(x, mask=masks[mask_name])
    for rank, r in enumerate(results):
        out, w, heads = r["tp"][mask_name]
        assert heads == list(range(rank * H // world_size, (rank + 1) * H // world_size))
        assert_close(out, expected, what=f"rank {rank} output")
        assert_close(w, weights[:, heads], what=f"rank {rank} weights")


def test_tensor_parallel_gradients_equal_the_whole_module(ranks):
    world_size, results = ranks
    module, x, kv, _, grad = _tp_problem()
    xq, xk = x.clone().requires_grad_(), kv.clone().requires_grad_()
    xv = (kv * 0.5).detach().requires_grad_()
    module(xq, xk, xv, mask=padding_mask([S, 3], S))[0].backward(grad)
    D = E // H
    for rank, r in enumerate(results):
        g = r["tp"]["grads"]
        for got, want, name in zip(g["inputs"], (xq.grad, xk.grad, xv.grad), ("dquery", "dkey", "dvalue"), strict=True):
            assert_close(got, want, what=f"rank {rank} {name}")
        rows = slice(g["heads"][0] * D, (g["heads"][-1] + 1) * D)
        for proj in ("q_proj", "k_proj", "v_proj"):
            assert_close(g["params"][f"{proj}.weight"], getattr(module, proj).weight.grad[rows], what=proj)
            assert_close(g["params"][f"{proj}.bias"], getattr(module, proj).bias.grad[rows], what=proj)
        assert_close(g["params"]["out_proj.weight"], module.out_proj.weight.grad[:, rows], what="out_proj.weight")
        assert_close(g["params"]["out_proj.bias"], module.out_proj.bias.grad, what="out_proj.bias")


def test_tensor_parallel_shards_an_nn_multihead_attention(ranks):
    _, results = ranks
    module, x, _, _, _ = _tp_problem()
    with torch.no_grad():
        expected = module.to_torch()(x, x, x, need_weights=False)[0]
    for r in results:
        assert_close(r["tp"]["from torch"], expected)


@pytest.mark.parametrize(("name", "causal", "layout", "T_", "S_"), RING_CASES, ids=[c[0] for c in RING_CASES])
def test_ring_attention_equals_one_process(ranks, name, causal, layout, T_, S_):
    world_size, results = ranks
    q, k, v = _ring_problem(T_, S_)
    expected, _ = scaled_dot_product_attention(q, k, v, mask=causal_mask(T_) if causal else None)
    got = unshard_sequence([r["ring"][name][0] for r in results], layout)
    assert_close(got, expected, what=f"{name}, W={world_size}")
    for rank, r in enumerate(results):
        stats = r["ring"][name][1]
        assert [s.origin for s in stats.steps] == [(rank - s) % world_size for s in range(world_size)]
        model = comm_cost.ring_bytes(B, 2, S_, 4, 3, world_size, rank, 8, layout)
        assert stats.bytes_sent == model
        if stats.wire_bytes is not None:  # the sockets carry the tensors plus a little framing
            assert model <= stats.wire_bytes <= model * 1.05 + 2048 * world_size


def test_causal_ring_skips_future_blocks(ranks):
    world_size, results = ranks
    for rank, r in enumerate(results):
        steps = r["ring"]["causal"][1].steps
        skipped = [s.step for s in steps if s.scores == 0]
        assert skipped == [s for s in range(world_size) if (rank - s) % world_size > rank]  # keys of later ranks
        assert [s.scores for s in steps] == causal_work(T, world_size, "contiguous")[rank]


def test_bad_shards_and_mismatched_groups_raise_clear_errors_on_every_rank(ranks):
    world_size, results = ranks
    for r in results:
        wrong = r["errors"]["wrong lengths"]
        if world_size > 1:
            assert wrong.startswith("ValueError") and "layout 'contiguous'" in wrong, wrong
        assert r["errors"]["shard for another world"].startswith("ValueError")
        assert "rank 0 of 6" in r["errors"]["shard for another world"]


# --- the launcher ----------------------------------------------------------------------------------------


def test_a_failing_rank_stops_the_launch_with_its_error():
    start = time.monotonic()
    with pytest.raises(Exception, match="rank one says no"):
        run_ranks(fail_on_rank_one, 2, timeout_s=60)
    assert time.monotonic() - start < 25, "the other rank should have been stopped, not waited for"


def test_run_ranks_refuses_what_it_cannot_launch():
    with pytest.raises(TypeError, match="module level"):
        run_ranks(lambda rank, world_size: rank, 2)
    with pytest.raises(ValueError, match="world_size"):
        run_ranks(battery, 0)
    with pytest.raises(TypeError, match="world_size"):
        run_ranks(battery, 2.0)
    with pytest.raises(ValueError, match="backend"):
        run_ranks(battery, 2, backend="mpi")
    if torch.cuda.device_count() < 64:
        with pytest.raises(ValueError, match="nccl"):
            run_ranks(battery, 64, backend="nccl")


def test_demo_prints_equality_and_bytes_that_match_the_model(capsys):
    assert demo.main(["--world-size", "2", "--seq-len", "24", "--head-dim", "8", "--repeats", "1"]) == 0
    text = capsys.readouterr().out
    assert text.count("equal to one process: yes") == 4
    assert "per step, ms: compute | transfer" in text
    assert demo.main(["--world-size", "0"]) == 2
    assert demo.main(["--world-size", "3", "--heads", "4"]) == 2


# --- single-process: the merge, split-KV decoding, ring steps, layouts ----------------------------------------


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


# --- tensor parallelism in one process: world size 1 and the errors -------------------------------------------


def test_world_size_one_needs_no_process_group_and_equals_the_module():
    module, x, _, masks, _ = _tp_problem()
    shard = TensorParallelMultiHeadAttention.from_module(module, 0, 1)
    with torch.no_grad():
        assert_close(shard(x, mask=masks["causal"])[0], module(x, mask=masks["causal"])[0])


def test_bad_world_size_rank_or_head_count_raise_clear_errors():
    module = MultiHeadAttention(E, H)
    with pytest.raises(ValueError, match="num_heads=6, world_size=4"):
        TensorParallelMultiHeadAttention.from_module(module, 0, 4)
    with pytest.raises(ValueError, match="world_size must be a positive int, got 0"):
        TensorParallelMultiHeadAttention(E, H, 0, 0)
    with pytest.raises(TypeError, match="world_size must be an int, got str"):
        TensorParallelMultiHeadAttention(E, H, 0, "2")
    with pytest.raises(ValueError, match=r"rank must be in \[0, world_size=2\), got rank=2"):
        TensorParallelMultiHeadAttention(E, H, 2, 2)
    with pytest.raises(TypeError, match="MultiHeadAttention"):
        TensorParallelMultiHeadAttention.from_module(nn.Linear(E, E), 0, 1)
    from mha_course.model import RotaryMultiHeadAttention

    with pytest.raises(TypeError, match="RotaryMultiHeadAttention"):
        TensorParallelMultiHeadAttention.from_module(RotaryMultiHeadAttention(E, H), 0, 1)
    with pytest.raises(RuntimeError, match="not initialised"):
        TensorParallelMultiHeadAttention.from_module(module, 0, 2)(torch.randn(1, 3, E))
    with pytest.raises(ValueError, match="with E=24"):
        TensorParallelMultiHeadAttention.from_module(module, 0, 1)(torch.randn(1, 3, E + 1))


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
