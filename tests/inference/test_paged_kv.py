"""The paged KV cache: lookups through the block table, attention over pages equal to attention over
a contiguous cache (by copying, and block by block as a paged kernel reads them), blocks returned on
release, and the memory report."""

import pytest
import torch

from mha_course import attention_loop_reference, causal_mask
from mha_course.inference.paged_kv import (
    PagedKVCache,
    gather_pages,
    memory_report,
    paged_attention,
    paged_attention_blockwise,
    physical_slot,
)
from mha_course.testing import assert_close


def test_gather_pages_against_a_loop_over_positions():
    torch.manual_seed(0)
    pool = torch.randn(7, 2, 4, 3)  # (N, G, P, D)
    table = torch.tensor([5, 0, 3])
    out = gather_pages(pool, table, 10)
    assert out.shape == (2, 10, 3)
    for s in range(10):
        block, slot = physical_slot(table, s, 4)
        assert (block, slot) == (int(table[s // 4]), s % 4)
        assert torch.equal(out[:, s], pool[block, :, slot])


def test_requests_of_different_lengths_share_one_pool_and_attend_exactly():
    torch.manual_seed(1)
    B, H, G, D, P = 3, 4, 2, 8, 4
    cache = PagedKVCache(num_blocks=12, block_size=P, num_kv_heads=G, head_dim=D, dtype=torch.float64)
    lengths, contiguous = [6, 11, 1], []
    requests = [cache.add_request() for _ in lengths]
    for t in range(max(lengths)):  # interleaved decoding: blocks of different requests alternate in the pool
        for r, n in zip(requests, lengths, strict=True):
            if t < n:
                cache.append(r, torch.randn(G, 1, D, dtype=torch.float64), torch.randn(G, 1, D, dtype=torch.float64))
    for r, n in zip(requests, lengths, strict=True):
        keys, values = cache.keys(r), cache.values(r)
        assert keys.shape == (G, n, D)
        contiguous.append((keys, values))
    tables, lens = cache.batch_tables(requests)
    assert lens.tolist() == lengths and tables.shape == (3, 3)
    assert cache.slots_reserved() == (2 + 3 + 1) * P
    q = torch.randn(B, H, 1, D, dtype=torch.float64)
    out = paged_attention(q, cache.k_pool, cache.v_pool, tables, lens)
    for b, (keys, values) in enumerate(contiguous):
        ref, _ = attention_loop_reference(q[b], keys.repeat_interleave(2, 0), values.repeat_interleave(2, 0))
        assert_close(out[b], ref)
    # the last T = 2 queries of request 1 see keys causally, aligned to its end
    q2 = torch.randn(1, H, 2, D, dtype=torch.float64)
    out2 = paged_attention(q2, cache.k_pool, cache.v_pool, tables[1:2], lens[1:2])
    keys, values = contiguous[1]
    ref2, _ = attention_loop_reference(
        q2[0], keys.repeat_interleave(2, 0), values.repeat_interleave(2, 0), mask=causal_mask(2, 11, diagonal=9)
    )
    assert_close(out2[0], ref2)


def _scattered_pool(lengths, G, P, D, Dv, seed, dtype=torch.float64):
    """Pools holding each request's blocks at shuffled places, tables padded with block 0."""
    generator = torch.Generator().manual_seed(seed)
    blocks = [-(-n // P) for n in lengths]
    order = torch.randperm(sum(blocks) + 3, generator=generator).tolist()  # 3 blocks nobody owns
    tables = torch.zeros(len(lengths), max(blocks), dtype=torch.long)
    for b, n_b in enumerate(blocks):
        tables[b, :n_b], order = torch.tensor(order[:n_b]), order[n_b:]
    k_pool = torch.randn(sum(blocks) + 3, G, P, D, generator=generator, dtype=dtype)
    v_pool = torch.randn(sum(blocks) + 3, G, P, Dv, generator=generator, dtype=dtype)
    return k_pool, v_pool, tables, torch.tensor(lengths)


@pytest.mark.parametrize(("T", "G", "Dv"), [(1, 2, 8), (1, 1, 5), (3, 4, 8), (2, 2, 3)])
def test_the_blockwise_loop_equals_the_copy_and_the_reference(T, G, Dv):
    B, H, D, P = 4, 4, 8, 4
    lengths = [T, 4, 13, 16]  # shorter than a block, exactly one block, across blocks, exactly four blocks
    k_pool, v_pool, tables, lens = _scattered_pool(lengths, G, P, D, Dv, seed=T + G)
    q = torch.randn(B, H, T, D, dtype=torch.float64)
    blockwise = paged_attention_blockwise(q, k_pool, v_pool, tables, lens)
    assert blockwise.shape == (B, H, T, Dv)
    assert_close(blockwise, paged_attention(q, k_pool, v_pool, tables, lens))
    for b, n in enumerate(lengths):
        keys, values = gather_pages(k_pool, tables[b], n), gather_pages(v_pool, tables[b], n)  # (G, S, D)
        ref, _ = attention_loop_reference(
            q[b],
            keys.repeat_interleave(H // G, 0),
            values.repeat_interleave(H // G, 0),
            mask=causal_mask(T, n, diagonal=n - T),  # the last T of n positions
        )
        assert_close(blockwise[b], ref)
    assert_close(
        paged_attention_blockwise(q, k_pool, v_pool, tables, lens, scale=0.3),
        paged_attention(q, k_pool, v_pool, tables, lens, scale=0.3),
    )


class _PoolReads(torch.Tensor):
    """A pool that notes the shape of every read out of it by indexing (and of reads of those reads)."""

    reads: list[tuple[int, ...]] = []

    @classmethod
    def __torch_function__(cls, func, types, args=(), kwargs=None):
        out = super().__torch_function__(func, types, args, kwargs or {})
        if func is torch.Tensor.__getitem__ and isinstance(out, torch.Tensor):
            cls.reads.append(tuple(out.shape))
        return out


def test_the_blockwise_loop_reads_one_block_per_request_at_a_time_and_the_copy_reads_all():
    B, H, G, D, P = 3, 2, 1, 4, 2
    k_pool, v_pool, tables, lens = _scattered_pool([5, 8, 3], G, P, D, D, seed=7)
    q = torch.randn(B, H, 1, D, dtype=torch.float64)
    k_seen, v_seen = k_pool.as_subclass(_PoolReads), v_pool.as_subclass(_PoolReads)
    _PoolReads.reads = []
    paged_attention_blockwise(q, k_seen, v_seen, tables, lens)
    largest = max(torch.Size(shape).numel() for shape in _PoolReads.reads)
    assert _PoolReads.reads and largest == B * G * P * D  # one block of every request, never the whole table
    _PoolReads.reads = []
    paged_attention(q, k_seen, v_seen, tables, lens)
    assert (B, tables.shape[1], G, P, D) in _PoolReads.reads  # the copy: every block of every request at once


def test_release_returns_blocks_and_a_full_pool_says_so():
    cache = PagedKVCache(num_blocks=3, block_size=2, num_kv_heads=1, head_dim=2)
    a, b = cache.add_request(), cache.add_request()
    cache.append(a, torch.ones(1, 4, 2), torch.ones(1, 4, 2))  # two blocks
    with pytest.raises(ValueError, match="out of blocks"):
        cache.append(b, torch.ones(1, 3, 2), torch.ones(1, 3, 2))
    cache.release(a)
    assert len(cache.free_blocks) == 3
    cache.append(b, torch.ones(1, 3, 2), torch.ones(1, 3, 2))
    assert cache.lengths[b] == 3 and len(cache.tables[b]) == 2
    with pytest.raises(KeyError, match="unknown request"):
        cache.keys(a)


def test_memory_report_counts_reserved_positions():
    report = memory_report([5, 9, 3], max_len=16, block_size=4)
    assert report["used"] == 17 and report["contiguous"] == 48 and report["paged"] == (2 + 3 + 1) * 4
    assert report["contiguous_waste"] == pytest.approx(1 - 17 / 48)
    assert report["paged_waste"] == pytest.approx(1 - 17 / 24)


def test_bad_inputs_name_what_was_expected():
    pool = torch.zeros(4, 1, 2, 3)
    with pytest.raises(ValueError, match="needs 3 blocks of 2, the table has 2"):
        gather_pages(pool, torch.tensor([0, 1]), 5)
    with pytest.raises(ValueError, match=r"block ids must be in \[0, 4\)"):
        gather_pages(pool, torch.tensor([0, 4]), 3)
    with pytest.raises(TypeError, match="integer block ids"):
        gather_pages(pool, torch.tensor([0.0, 1.0]), 3)
    with pytest.raises(ValueError, match=r"\(N, G, P, D\)"):
        gather_pages(torch.zeros(4, 2, 3), torch.tensor([0]), 1)
    with pytest.raises(ValueError, match="beyond"):
        physical_slot([0, 1], 4, 2)
    with pytest.raises(ValueError, match=r"in \[T=1"):
        paged_attention(torch.zeros(1, 1, 1, 3), pool, pool, torch.tensor([[0]]), [3])
    for attend in (paged_attention, paged_attention_blockwise):
        with pytest.raises(ValueError, match=r"in \[T=1"):
            attend(torch.zeros(1, 1, 1, 3), pool, pool, torch.tensor([[0]]), [3])
        with pytest.raises(ValueError, match=r"block ids must be in \[0, N=4\)"):
            attend(torch.zeros(1, 1, 1, 3), pool, pool, torch.tensor([[4]]), [1])
        with pytest.raises(ValueError, match="must divide the H=3"):
            attend(torch.zeros(1, 3, 1, 3), torch.zeros(4, 2, 2, 3), torch.zeros(4, 2, 2, 3), torch.tensor([[0]]), [1])
        with pytest.raises(TypeError, match="integer block ids"):
            attend(torch.zeros(1, 1, 1, 3), pool, pool, torch.tensor([[0.0]]), [1])
    with pytest.raises(ValueError, match="max_len"):
        memory_report([5, 20], 16, 4)
    with pytest.raises(TypeError, match="integers"):
        memory_report([5.0], 16, 4)
    cache = PagedKVCache(2, 2, 1, 3)
    r = cache.add_request()
    with pytest.raises(ValueError, match=r"\(G=1, T, 3\)"):
        cache.append(r, torch.zeros(2, 1, 3), torch.zeros(2, 1, 3))
