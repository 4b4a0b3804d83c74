"""A paged KV cache (vLLM's PagedAttention idea, Kwon et al., 2023).

A server decodes many requests at once, each of a length nobody knows in advance. A contiguous
cache must reserve max_len positions per request up front; most of that reservation stays empty.
A paged cache cuts memory into fixed-size physical *blocks* of P positions, shared by all requests,
and gives each request a *block table*: its logical block b lives in physical block table[b].

    position s of a request  ->  physical block table[s // P], slot s % P

A request takes a new block only when its last one is full, so at most P - 1 slots per request
are ever wasted, and a finished request's blocks go straight back to the free list.

Two ways to attend over the pages, with equal results:

* :func:`paged_attention` *copies*: ``k_pool[block_tables]`` gathers every request's blocks into one
  contiguous (B, G, n*P, D) tensor (and the same for V), then runs ordinary attention. Simple, but it
  allocates the contiguous K/V the paging was meant to avoid, on every decoding step.
* :func:`paged_attention_blockwise` reads the pages where they lie, as a paged kernel does: a loop over
  the table's logical blocks that reads block b of every request from the pool *inside* the loop
  (``k_pool[block_tables[:, b]]``, P positions each), scores it and folds it into a running max, sum
  and weighted sum (the online softmax): it never holds more than one block of K/V per request. This
  one-pass loop is what the paged FlashAttention and FlashInfer kernels (vLLM's current backends) do.
  vLLM's original PagedAttention kernel reads the blocks in two passes instead: it keeps the whole
  context's scores in on-chip shared memory, takes their max and sum, then goes over the blocks again
  for V (its second version splits a long context into partitions and merges their results).
"""

from __future__ import annotations

import math
from collections import deque

import torch

from ..validation import (
    require_int,
    require_non_negative_int,
    require_positive_int,
    require_positive_ints,
    require_rank,
    require_tensor,
    resolve_scale,
)
from .variants import grouped_query_attention


def physical_slot(block_table, position: int, block_size: int) -> tuple[int, int]:
    """Where logical ``position`` of a request is stored: (table[position // P], position % P).

    Raises:
        TypeError: position or block_size is not an int.
        ValueError: block_size < 1, or position is negative or beyond the table's blocks.
    """
    require_non_negative_int(position, "position")
    require_positive_int(block_size, "block_size")
    table = torch.as_tensor(block_table)
    if position >= table.numel() * block_size:
        raise ValueError(f"position {position} is beyond the {table.numel()} blocks of {block_size} in the table")
    return int(table.reshape(-1)[position // block_size]), position % block_size


def gather_pages(pool: torch.Tensor, block_table: torch.Tensor, length: int) -> torch.Tensor:
    """Read one request's first ``length`` positions out of a block pool, as a contiguous tensor.

        out[:, s] = pool[block_table[s // P], :, s % P]

    Args:
        pool: (N, G, P, D): N physical blocks of P positions, G key/value heads, D features.
        block_table: (n,) long: the physical block of each of the request's logical blocks.
        length: S, the number of positions written (S <= n * P).

    Returns:
        (G, S, D).

    Raises:
        TypeError: pool or block_table is not a tensor, block_table not integer, length not an int.
        ValueError: pool is not 4-D, block_table not 1-D, an entry outside [0, N), or S > n * P.
    """
    require_tensor(pool, "pool")
    require_rank(pool, 4, "pool", "(N, G, P, D)")
    require_tensor(block_table, "block_table")
    require_rank(block_table, 1, "block_table", "(n,)")
    if block_table.is_floating_point() or block_table.dtype == torch.bool:
        raise TypeError(f"block_table must hold integer block ids, got dtype {block_table.dtype}")
    require_non_negative_int(length, "length")
    N, G, P, D = pool.shape
    n = block_table.numel()
    if length > n * P:
        raise ValueError(f"length {length} needs {math.ceil(length / P)} blocks of {P}, the table has {n}")
    if n and (int(block_table.min()) < 0 or int(block_table.max()) >= N):
        raise ValueError(f"block ids must be in [0, {N}), got {block_table.tolist()}")
    pages = pool[block_table.long()]  # (n, G, P, D)
    return pages.transpose(0, 1).reshape(G, n * P, D)[:, :length]  # (G, n*P, D) -> (G, S, D)


def _check_paged_inputs(q, k_pool, v_pool, block_tables, lengths, scale) -> tuple[torch.Tensor, float]:
    """Validate paged_attention's arguments; return lengths as a (B,) long tensor and the scale."""
    require_tensor(q, "q")
    require_rank(q, 4, "q", "(B, H, T, D)")
    for name, pool in (("k_pool", k_pool), ("v_pool", v_pool)):
        require_tensor(pool, name)
        require_rank(pool, 4, name, "(N, G, P, D)")
    require_tensor(block_tables, "block_tables")
    require_rank(block_tables, 2, "block_tables", "(B, n)")
    B, H, T, D = q.shape
    G, P = k_pool.shape[1], k_pool.shape[2]
    if v_pool.shape[:3] != k_pool.shape[:3] or k_pool.shape[3] != D:
        raise ValueError(
            f"need k_pool (N, G, P, D={D}) and v_pool (N, G, P, Dv) of one (N, G, P), got "
            f"{tuple(k_pool.shape)} and {tuple(v_pool.shape)}"
        )
    if G == 0 or H % G:
        raise ValueError(f"the pools' G={G} key/value heads must divide the H={H} query heads")
    if block_tables.shape[0] != B:
        raise ValueError(f"block_tables must have one row per request (B={B}), got {tuple(block_tables.shape)}")
    if block_tables.is_floating_point() or block_tables.dtype == torch.bool:
        raise TypeError(f"block_tables must hold integer block ids, got dtype {block_tables.dtype}")
    N = k_pool.shape[0]
    if block_tables.numel() and (int(block_tables.min()) < 0 or int(block_tables.max()) >= N):
        raise ValueError(f"block ids must be in [0, N={N}), got {block_tables.tolist()}")
    lengths = torch.as_tensor(lengths)
    if lengths.shape != (B,) or lengths.is_floating_point() or lengths.dtype == torch.bool:
        raise ValueError(f"lengths must be (B,) = ({B},) ints, got {lengths.tolist()}")
    n = block_tables.shape[1]
    if B and (int(lengths.min()) < T or int(lengths.max()) > n * P):
        raise ValueError(f"every length must be in [T={T}, n*P={n * P}], got {lengths.tolist()}")
    return lengths.long(), resolve_scale(scale, D)


def paged_attention(
    q: torch.Tensor,
    k_pool: torch.Tensor,
    v_pool: torch.Tensor,
    block_tables: torch.Tensor,
    lengths,
    scale: float | None = None,
) -> torch.Tensor:
    """Attention of each request's newest T queries over its keys and values stored in pages, by copying.

    Request b has ``lengths[b]`` positions; its queries are the last T of them (T = 1 when decoding),
    so query i sees keys j <= lengths[b] - T + i. Equal to attention over the contiguous cache, because
    it builds one: ``k_pool[block_tables]`` copies every request's n blocks into a contiguous
    (B, G, n*P, D) tensor (V too), masks the unwritten slots and runs ordinary attention.
    :func:`paged_attention_blockwise` computes the same without that copy.

    Args:
        q: (B, H, T, D).
        k_pool: (N, G, P, D); v_pool: (N, G, P, Dv), with G dividing H.
        block_tables: (B, n) long, each row a request's table (rows padded with any valid id).
        lengths: (B,) ints, each in [T, n * P].
        scale: default 1/sqrt(D).

    Returns:
        (B, H, T, Dv).

    Raises:
        TypeError / ValueError: shapes that disagree, or lengths out of range.
    """
    lengths, scale = _check_paged_inputs(q, k_pool, v_pool, block_tables, lengths, scale)
    B, H, T, D = q.shape
    G, P = k_pool.shape[1], k_pool.shape[2]
    n = block_tables.shape[1]
    k = k_pool[block_tables.long()].permute(0, 2, 1, 3, 4).reshape(B, G, n * P, D)  # (B, G, S_max, D): a copy
    v = v_pool[block_tables.long()].permute(0, 2, 1, 3, 4).reshape(B, G, n * P, -1)  # (B, G, S_max, Dv)
    key_pos = torch.arange(n * P, device=q.device)  # (S_max,)
    query_pos = lengths.to(q.device)[:, None] - T + torch.arange(T, device=q.device)[None, :]  # (B, T)
    mask = key_pos[None, None, :] <= query_pos[:, :, None]  # (B, T, S_max): causal, and unwritten slots out
    return grouped_query_attention(q, k.to(q.dtype), v.to(q.dtype), mask=mask[:, None], scale=scale)[0]


def paged_attention_blockwise(
    q: torch.Tensor,
    k_pool: torch.Tensor,
    v_pool: torch.Tensor,
    block_tables: torch.Tensor,
    lengths,
    scale: float | None = None,
) -> torch.Tensor:
    """:func:`paged_attention` as a one-pass paged kernel computes it: block by block through the tables, no copy.

    This is the loop of the paged FlashAttention and FlashInfer kernels (vLLM's current backends);
    vLLM's original PagedAttention kernel instead keeps all the scores of a context in shared memory and
    makes a second pass over the blocks for V.

    For each logical block b (up to the longest request's last), the loop reads physical block
    ``block_tables[:, b]`` of every request from the pool, scores its P keys, and folds them into a
    running max m, sum l and weighted sum of values (the online softmax of chapter 12):

        m' = max(m, max_j s_j),  l' = l e^(m - m') + sum_j e^(s_j - m'),  acc' = acc e^(m - m') + sum_j e^(s_j - m') v_j

    and returns acc / l. Extra memory: one block of K and V per request, plus (B, H, T) statistics and
    the (B, H, T, Dv) accumulator, whatever the requests' lengths. Same arguments, result and errors as
    :func:`paged_attention`; block 0 holds position 0, which every query sees, so no row is ever empty.
    """
    lengths, scale = _check_paged_inputs(q, k_pool, v_pool, block_tables, lengths, scale)
    B, H, T, D = q.shape
    G, P, Dv = k_pool.shape[1], k_pool.shape[2], v_pool.shape[3]
    groups = q.reshape(B, G, H // G, T, D)  # (B, G, H/G, T, D): each key/value head serves H/G query heads
    query_pos = (lengths.to(q.device)[:, None] - T + torch.arange(T, device=q.device))[:, None, None, :, None]
    m = torch.full((B, G, H // G, T, 1), float("-inf"), dtype=q.dtype, device=q.device)
    l = torch.zeros_like(m)
    acc = torch.zeros(B, G, H // G, T, Dv, dtype=q.dtype, device=q.device)
    tables = block_tables.long().to(k_pool.device)
    for b in range(math.ceil(int(lengths.max()) / P) if B else 0):
        k_block = k_pool[tables[:, b]].to(q.dtype)[:, :, None]  # (B, G, 1, P, D): block b of each request
        v_block = v_pool[tables[:, b]].to(q.dtype)[:, :, None]  # (B, G, 1, P, Dv)
        scores = groups @ k_block.transpose(-2, -1) * scale  # (B, G, H/G, T, P)
        key_pos = b * P + torch.arange(P, device=q.device)  # (P,)
        scores = scores.masked_fill(key_pos > query_pos, float("-inf"))  # causal, and unwritten slots out
        m_new = torch.maximum(m, scores.amax(-1, keepdim=True))  # finite from block 0 on (position 0 is seen)
        p = torch.exp(scores - m_new)  # (B, G, H/G, T, P)
        rescale = torch.exp(m - m_new)  # 0 on block 0 (m = -inf)
        l = l * rescale + p.sum(-1, keepdim=True)
        acc = acc * rescale + p @ v_block
        m = m_new
    return (acc / l).reshape(B, H, T, Dv)


class PagedKVCache:
    """Keys and values of many requests in one pool of fixed-size blocks, with a block table per request.

    Args:
        num_blocks: N, the blocks in the pool. block_size: P, positions per block.
        num_kv_heads, head_dim: G and D; ``value_dim`` defaults to D. dtype, device: of the pools.

    ``k_pool`` (N, G, P, D) and ``v_pool`` (N, G, P, Dv) hold every request's entries;
    ``tables[r]`` lists request r's physical blocks and ``lengths[r]`` its positions.

    Raises:
        TypeError / ValueError: sizes that are not positive ints.
    """

    def __init__(
        self,
        num_blocks: int,
        block_size: int,
        num_kv_heads: int,
        head_dim: int,
        value_dim: int | None = None,
        dtype: torch.dtype = torch.float32,
        device: torch.device | str | None = None,
    ):
        value_dim = head_dim if value_dim is None else value_dim
        require_positive_ints(
            num_blocks=num_blocks,
            block_size=block_size,
            num_kv_heads=num_kv_heads,
            head_dim=head_dim,
            value_dim=value_dim,
        )
        self.block_size = block_size
        self.k_pool = torch.zeros(num_blocks, num_kv_heads, block_size, head_dim, dtype=dtype, device=device)
        self.v_pool = torch.zeros(num_blocks, num_kv_heads, block_size, value_dim, dtype=dtype, device=device)
        self.free_blocks: deque[int] = deque(range(num_blocks))
        self.tables: dict[int, list[int]] = {}
        self.lengths: dict[int, int] = {}
        self._next_id = 0

    def add_request(self) -> int:
        """Register a new, empty request and return its id (no block is taken until it has entries)."""
        request = self._next_id
        self._next_id += 1
        self.tables[request], self.lengths[request] = [], 0
        return request

    def append(self, request: int, k: torch.Tensor, v: torch.Tensor) -> None:
        """Write k (G, T, D) and v (G, T, Dv) at the request's next T positions, taking blocks as needed.

        Raises:
            KeyError: unknown request.
            ValueError: shapes that do not match the pools, or the pool has too few free blocks.
        """
        self._check_request(request)
        G, P = self.k_pool.shape[1], self.block_size
        for name, x, pool in (("k", k, self.k_pool), ("v", v, self.v_pool)):
            require_tensor(x, name)
            require_rank(x, 3, name, "(G, T, D)")
            if x.shape[0] != G or x.shape[2] != pool.shape[3]:
                raise ValueError(f"{name} must have shape (G={G}, T, {pool.shape[3]}), got {tuple(x.shape)}")
        if k.shape[1] != v.shape[1]:
            raise ValueError(f"k and v must add the same T positions, got {tuple(k.shape)} and {tuple(v.shape)}")
        start, T = self.lengths[request], k.shape[1]
        needed = math.ceil((start + T) / P) - len(self.tables[request])
        if needed > len(self.free_blocks):
            raise ValueError(f"out of blocks: request {request} needs {needed} more, {len(self.free_blocks)} free")
        for _ in range(needed):
            self.tables[request].append(self.free_blocks.popleft())
        for s in range(start, start + T):  # one slot at a time: positions may cross block boundaries
            block, slot = physical_slot(self.tables[request], s, P)
            self.k_pool[block, :, slot] = k[:, s - start]
            self.v_pool[block, :, slot] = v[:, s - start]
        self.lengths[request] = start + T

    def release(self, request: int) -> None:
        """Forget a finished request and return its blocks to the free list.

        Raises:
            KeyError: unknown request.
        """
        self._check_request(request)
        self.free_blocks.extend(self.tables.pop(request))
        del self.lengths[request]

    def keys(self, request: int) -> torch.Tensor:
        """(G, S, D): the request's keys, read through its block table."""
        self._check_request(request)
        return gather_pages(self.k_pool, torch.tensor(self.tables[request], dtype=torch.long), self.lengths[request])

    def values(self, request: int) -> torch.Tensor:
        """(G, S, Dv): the request's values."""
        self._check_request(request)
        return gather_pages(self.v_pool, torch.tensor(self.tables[request], dtype=torch.long), self.lengths[request])

    def batch_tables(self, requests) -> tuple[torch.Tensor, torch.Tensor]:
        """Block tables (B, n) padded with block 0, and lengths (B,), for :func:`paged_attention`."""
        requests = list(requests)
        for r in requests:
            self._check_request(r)
        n = max((len(self.tables[r]) for r in requests), default=0)
        tables = torch.zeros(len(requests), n, dtype=torch.long)
        for row, r in enumerate(requests):
            tables[row, : len(self.tables[r])] = torch.tensor(self.tables[r], dtype=torch.long)
        return tables, torch.tensor([self.lengths[r] for r in requests], dtype=torch.long)

    def slots_reserved(self) -> int:
        """Positions held by the requests' blocks (used or not): blocks taken * P."""
        return sum(len(t) for t in self.tables.values()) * self.block_size

    def _check_request(self, request: int) -> None:
        require_int(request, "request")
        if request not in self.tables:
            raise KeyError(f"unknown request {request}; known: {sorted(self.tables)}")


def memory_report(lengths, max_len: int, block_size: int) -> dict[str, float]:
    """Positions reserved by a contiguous cache (max_len per request) and by a paged one, for ``lengths``.

    Returns a dict: ``used`` = sum(lengths); ``contiguous`` = B * max_len; ``paged`` =
    sum(ceil(length / P)) * P; ``contiguous_waste`` and ``paged_waste`` = 1 - used / reserved.

    Raises:
        TypeError / ValueError: lengths not non-negative ints <= max_len, or sizes not positive.
    """
    require_positive_int(max_len, "max_len")
    require_positive_int(block_size, "block_size")
    lengths = torch.as_tensor(lengths)
    if lengths.is_floating_point() or lengths.dtype == torch.bool:
        raise TypeError(f"lengths must hold integers, got dtype {lengths.dtype}")
    require_rank(lengths, 1, "lengths", "(B,)")
    lengths = lengths.tolist()
    if any(n < 0 or n > max_len for n in lengths):
        raise ValueError(f"every length must be in [0, max_len={max_len}], got {lengths}")
    used = sum(lengths)
    contiguous = len(lengths) * max_len
    paged = sum(math.ceil(n / block_size) for n in lengths) * block_size
    return {
        "used": used,
        "contiguous": contiguous,
        "paged": paged,
        "contiguous_waste": 1 - used / contiguous if contiguous else 0.0,
        "paged_waste": 1 - used / paged if paged else 0.0,
    }


__all__ = [
    "physical_slot",
    "gather_pages",
    "paged_attention",
    "paged_attention_blockwise",
    "PagedKVCache",
    "memory_report",
]
