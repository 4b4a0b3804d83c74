"""mha_course.parallel: tensor-parallel heads and ring attention under gloo, against one process.

Multi-process checks start each world size (1, 2, 3) ONCE per module: every rank runs
:func:`battery`, which does all the distributed work and returns plain results; the tests below
compare them with the single-process library. Shapes are tiny and awkward on purpose: T = 7 is
no multiple of 2 or 3, Dv != D, cross-attention with S != T. The launcher, the demo and the
tensor-parallel errors are here too; what needs no process group (the merge, split-KV decoding,
ring steps, layouts, the cost model) is in test_merge_and_layout.py.
"""

from __future__ import annotations

import json
import time

import pytest
import torch
import torch.distributed as dist
from torch import nn

from mha_course import MultiHeadAttention, causal_mask, padding_mask, scaled_dot_product_attention
from mha_course.parallel import (
    TensorParallelMultiHeadAttention,
    causal_work,
    comm_cost,
    demo,
    ring_attention,
    run_ranks,
    shard_sequence,
    ulysses_attention,
    unshard_sequence,
)
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


def _ulysses_problem(T_, G):
    g = torch.Generator().manual_seed(3)
    return (
        torch.randn(B, 6, T_, 4, generator=g, dtype=torch.float64),
        torch.randn(B, G, T_, 4, generator=g, dtype=torch.float64),
        torch.randn(B, G, T_, 3, generator=g, dtype=torch.float64),
    )


def _ulysses_cases(world_size):  # (name, causal, T, G): 6 query heads; G key/value heads divisible by W
    gqa = {1: 3, 2: 2, 3: 3}[world_size]
    return [("plain", False, 7, 6), ("causal", True, 7, 6), (f"grouped G={gqa}", True, 8, gqa)]


def battery(rank: int, world_size: int) -> dict:
    """All distributed checks of this module, in one launch; returns plain results for the tests."""
    results = {"tp": {}, "ring": {}, "ulysses": {}, "errors": {}}
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
    for name, causal, T_, G in _ulysses_cases(world_size):
        q, k, v = (shard_sequence(t, world_size, rank, "contiguous") for t in _ulysses_problem(T_, G))
        with torch.no_grad():
            results["ulysses"][name] = ulysses_attention(q, k, v, causal=causal, return_stats=True)
    if world_size > 1:
        q, k, v = (shard_sequence(t, world_size, rank, "contiguous") for t in _ulysses_problem(7, 1))
        with torch.no_grad():
            results["errors"]["ulysses, one kv head"] = _error_of(lambda: ulysses_attention(q, k, v))
    if world_size == 3:  # a subgroup: global ranks 1 and 2 form a group of two, with ranks 0 and 1 in it
        group = dist.new_group([1, 2])  # every rank of the world must take part in creating it
        if rank in (1, 2):
            q, k, v = (shard_sequence(t, 2, rank - 1, "zigzag") for t in _ring_problem(T, T))
            with torch.no_grad():
                ring = ring_attention(q, k, v, causal=True, group=group, layout="zigzag")
                shard = TensorParallelMultiHeadAttention.from_module(module, rank - 1, 2, group=group)
                results["subgroup"] = {"ring": ring, "tp": shard(x)[0]}
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
    time.sleep(3600)  # far past the launch's timeout_s: only a stop ends this rank in time


@pytest.fixture(scope="module", params=[1, 2, 3], ids=lambda w: f"W={w}")
def ranks(request):
    return request.param, run_ranks(battery, request.param, timeout_s=240)


# --- equality with one process ----------------------------------------------------------------------------


@pytest.mark.slow
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


@pytest.mark.slow
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


@pytest.mark.slow
def test_tensor_parallel_shards_an_nn_multihead_attention(ranks):
    _, results = ranks
    module, x, _, _, _ = _tp_problem()
    with torch.no_grad():
        expected = module.to_torch()(x, x, x, need_weights=False)[0]
    for r in results:
        assert_close(r["tp"]["from torch"], expected)


@pytest.mark.slow
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


@pytest.mark.slow
def test_ulysses_equals_one_process_and_sends_the_models_bytes(ranks):
    world_size, results = ranks
    for name, causal, T_, G in _ulysses_cases(world_size):
        q, k, v = _ulysses_problem(T_, G)
        k, v = (x.repeat_interleave(6 // G, 1) for x in (k, v))  # grouped-query: head h reads h // (H / G)
        expected, _ = scaled_dot_product_attention(q, k, v, mask=causal_mask(T_) if causal else None)
        got = unshard_sequence([r["ulysses"][name][0] for r in results], "contiguous")
        assert_close(got, expected, what=f"Ulysses {name}, W={world_size}")
        for rank, r in enumerate(results):
            stats = r["ulysses"][name][1]
            assert stats.bytes_sent == comm_cost.ulysses_bytes(B, 6, G, T_, T_, 4, 3, world_size, rank, 8)
            if world_size == 1:
                assert stats.bytes_sent == 0
            if stats.wire_bytes is not None and world_size > 1:
                assert stats.bytes_sent <= stats.wire_bytes <= stats.bytes_sent * 1.1 + 4096 * world_size


@pytest.mark.slow
def test_ulysses_refuses_fewer_kv_heads_than_ranks_on_every_rank(ranks):
    world_size, results = ranks
    if world_size > 1:
        for r in results:
            assert "ValueError" in r["errors"]["ulysses, one kv head"]
            assert f"G = 1 must be divisible by {world_size}" in r["errors"]["ulysses, one kv head"]


@pytest.mark.slow
def test_causal_ring_skips_future_blocks(ranks):
    world_size, results = ranks
    for rank, r in enumerate(results):
        steps = r["ring"]["causal"][1].steps
        skipped = [s.step for s in steps if s.scores == 0]
        assert skipped == [s for s in range(world_size) if (rank - s) % world_size > rank]  # keys of later ranks
        assert [s.scores for s in steps] == causal_work(T, world_size, "contiguous")[rank]


@pytest.mark.slow
def test_a_subgroup_runs_its_own_ring_and_heads(ranks):
    world_size, results = ranks
    if world_size != 3:
        pytest.skip("a subgroup of two ranks beside a third needs three ranks")
    q, k, v = _ring_problem(T, T)
    expected, _ = scaled_dot_product_attention(q, k, v, mask=causal_mask(T))
    assert_close(unshard_sequence([results[r]["subgroup"]["ring"] for r in (1, 2)], "zigzag"), expected)
    module, x, _, _, _ = _tp_problem()
    with torch.no_grad():
        whole, _ = module(x)
    for r in (1, 2):
        assert_close(results[r]["subgroup"]["tp"], whole, what=f"global rank {r}")
    assert "subgroup" not in results[0]


@pytest.mark.slow
def test_bad_shards_and_mismatched_groups_raise_clear_errors_on_every_rank(ranks):
    world_size, results = ranks
    for r in results:
        wrong = r["errors"]["wrong lengths"]
        if world_size > 1:
            assert wrong.startswith("ValueError") and "layout 'contiguous'" in wrong, wrong
        assert r["errors"]["shard for another world"].startswith("ValueError")
        assert "rank 0 of 6" in r["errors"]["shard for another world"]


# --- the launcher ----------------------------------------------------------------------------------------


@pytest.mark.slow
def test_a_failing_rank_stops_the_launch_with_its_error():
    # Had the launch waited for rank 0 (asleep for an hour), it would have raised TimeoutError after timeout_s, not
    # rank 1's error: the error proves the stop, whatever the time the two ranks took to start on a busy machine.
    timeout_s = 240
    start = time.monotonic()
    with pytest.raises(torch.multiprocessing.ProcessRaisedException, match="rank one says no"):
        run_ranks(fail_on_rank_one, 2, timeout_s=timeout_s)
    assert time.monotonic() - start < timeout_s, "the other rank should have been stopped, not waited for"


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


@pytest.mark.slow
def test_demo_prints_equality_and_bytes_that_match_the_model(capsys, tmp_path):
    args = ["--world-size", "2", "--seq-len", "24", "--head-dim", "8", "--repeats", "1"]
    assert demo.main([*args, "--json", str(tmp_path / "report.json")]) == 0
    text = capsys.readouterr().out
    assert text.count("equal to one process: yes") == 5  # tensor parallel, three rings, Ulysses
    assert "per step, ms: compute | transfer" in text
    report = json.loads((tmp_path / "report.json").read_text())
    for name, scheme in report["schemes"].items():
        for r in scheme["ranks"]:
            if "bytes_sent" in r:  # ring and Ulysses: the tensors handed to send are exactly the model's bytes
                assert r["bytes_sent"] == r["model_bytes"], name
            if "steps" in r:
                assert [s["step"] for s in r["steps"]] == [0, 1] and r["steps"][-1]["transfer_ms"] is None
                first = r["steps"][0]  # the part of its transfer not hidden is a part of it
                assert 0 <= first["not_hidden_ms"] <= first["transfer_ms"] + 1e-6, name
                assert r["steps"][-1]["not_hidden_ms"] is None
            if r["wire_bytes"] is not None:  # the sockets: the model's bytes and gloo's framing
                assert r["model_bytes"] <= r["wire_bytes"] <= 1.05 * r["model_bytes"] + 4096, name


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--world-size", "0"], "--world-size must be a positive int, got 0"),
        (["--world-size", "3", "--heads", "4"], "--heads 4 is not divisible by --world-size 3"),
        (["--seq-len", "0"], "--seq-len must be a positive int"),
        (["--heads", "0"], "--heads must be a positive int"),
    ],
)
def test_demo_refuses_bad_arguments_with_a_clear_message(capsys, args, message):
    assert demo.main(args) == 2
    assert message in capsys.readouterr().err


@pytest.mark.skipif(torch.cuda.device_count() >= 2, reason="this machine could run NCCL on 2 GPUs")
def test_demo_with_nccl_but_no_gpus_says_to_use_gloo(capsys):
    assert demo.main(["--world-size", "2", "--backend", "nccl"]) == 2
    assert "backend 'nccl' needs one CUDA device per rank" in capsys.readouterr().err


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
    from mha_course.models.model import RotaryMultiHeadAttention

    with pytest.raises(TypeError, match="RotaryMultiHeadAttention"):
        TensorParallelMultiHeadAttention.from_module(RotaryMultiHeadAttention(E, H), 0, 1)
    with pytest.raises(RuntimeError, match="not initialised"):
        TensorParallelMultiHeadAttention.from_module(module, 0, 2)(torch.randn(1, 3, E))
    with pytest.raises(ValueError, match="with E=24"):
        TensorParallelMultiHeadAttention.from_module(module, 0, 1)(torch.randn(1, 3, E + 1))


@pytest.mark.slow
def test_ring_rank_reports_the_same_repeat_on_every_rank_for_its_timeline():
    from mha_course.parallel.workloads import Problem, ring_rank

    results = run_ranks(ring_rank, 2, Problem(B=1, H=2, T=64, D=8), False, "contiguous", "gloo", 3, timeout_s=120)
    assert results[0]["repeat"] == results[1]["repeat"] and 0 <= results[0]["repeat"] < 3
    for r in results:  # the chosen repeat's record is a whole ring: one step per rank
        assert [s.step for s in r["stats"].steps] == [0, 1]
