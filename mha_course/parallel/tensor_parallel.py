"""Tensor parallelism (Megatron-LM style): the heads of one attention layer split over W ranks.

Heads are independent until the output projection, and the output projection is a sum over heads:

    out = Concat(head_1, ..., head_H) W_O^T + b_O = sum_r Concat(heads of rank r) (W_O^r)^T + b_O

where W_O^r is the block of W_O's columns that multiplies rank r's heads. So rank r keeps

    W_Q^r, W_K^r, W_V^r   the rows of W_Q, W_K, W_V (columns of the maths' X W) for its H / W heads
    W_O^r                 the matching columns of W_O

computes its heads and its share of the output with no communication at all, and one all-reduce
(a sum over ranks) gives every rank the full (B, T, E) output, to which b_O is added once. Each
rank stores and computes 1/W of the layer (the biases b_O and the inputs are replicated).

In the backward pass the two ends swap roles (Shoeybi et al., 2019, the "f" and "g" operators): the
all-reduce of the output passes the gradient through unchanged, since every rank already holds the
same dL/d(out); the input, used by every rank's heads, gets the sum of the ranks' gradients, so an
all-reduce runs there instead. Communication per forward: one all-reduce of B * T * E numbers
(:func:`mha_course.parallel.comm_cost.allreduce_bytes`).
"""

from __future__ import annotations

import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch import nn

from ..core.attention import scaled_dot_product_attention
from ..core.heads import gate_heads, merge_heads, split_heads
from ..core.mha import MultiHeadAttention
from ..validation import require_positive_int
from .comm import group_rank_and_size
from .layout import check_rank


class TensorParallelMultiHeadAttention(nn.Module):
    """This rank's share of a multi-head attention layer: H / W heads, outputs summed by one all-reduce.

        q, k, v = split_heads(X W_Q^r + b_Q^r), ...          (B, H/W, T, D), (B, H/W, S, D)
        partial = merge_heads(attention(q, k, v)) (W_O^r)^T   (B, T, E), this rank's heads only
        out = all_reduce_sum(partial) + b_O                    (B, T, E), the same on every rank

    Parameters: ``q_proj``, ``k_proj``, ``v_proj`` are ``nn.Linear(E, E / W)``; ``out_proj`` is
    ``nn.Linear(E / W, E)`` whose bias is the full b_O, added after the sum. Build one from a whole
    module with :meth:`from_module`.

    Args:
        embed_dim: E; num_heads: H, the whole layer's head count; rank, world_size: this rank and W.
        bias, dropout: as :class:`mha_course.MultiHeadAttention`.
        group: the torch.distributed process group of the W ranks (default: the world).

    Raises:
        TypeError: a size or rank is not an int.
        ValueError: world_size < 1, rank outside [0, world_size), H not divisible by world_size,
            or E not divisible by H.
    """

    def __init__(
        self,
        embed_dim: int,
        num_heads: int,
        rank: int,
        world_size: int,
        bias: bool = True,
        dropout: float = 0.0,
        group=None,
    ):
        super().__init__()
        embed_dim, num_heads = (
            require_positive_int(embed_dim, "embed_dim"),
            require_positive_int(num_heads, "num_heads"),
        )
        world_size = require_positive_int(world_size, "world_size")
        rank = check_rank(rank, world_size)
        if embed_dim % num_heads:
            raise ValueError(
                f"embed_dim must be a multiple of num_heads, got embed_dim={embed_dim}, num_heads={num_heads}"
            )
        if num_heads % world_size:
            raise ValueError(
                f"num_heads must be divisible by world_size (every rank holds the same whole number of heads), "
                f"got num_heads={num_heads}, world_size={world_size}"
            )
        self.embed_dim, self.num_heads, self.head_dim = embed_dim, num_heads, embed_dim // num_heads
        self.rank, self.world_size, self.group = rank, world_size, group
        self.local_heads = num_heads // world_size
        local = self.local_heads * self.head_dim  # E / W features: this rank's heads side by side
        self.q_proj = nn.Linear(embed_dim, local, bias=bias)
        self.k_proj = nn.Linear(embed_dim, local, bias=bias)
        self.v_proj = nn.Linear(embed_dim, local, bias=bias)
        self.out_proj = nn.Linear(local, embed_dim, bias=bias)
        self.dropout = nn.Dropout(dropout)
        self.register_buffer("head_gate", torch.ones(self.local_heads), persistent=False)

    # The input checks of the whole module: types, ranks, E, and masks against (B, H, T, S) with the global H.
    _check_inputs = MultiHeadAttention._check_inputs
    _check_mask = MultiHeadAttention._check_mask

    @property
    def head_range(self) -> range:
        """The global indices of this rank's heads: rank r holds heads r*H/W .. (r+1)*H/W - 1."""
        return range(self.rank * self.local_heads, (self.rank + 1) * self.local_heads)

    def forward(self, query, key=None, value=None, mask=None):
        """As :meth:`mha_course.MultiHeadAttention.forward`, on every rank of the group at once.

        Args:
            query: (B, T, E); key, value: (B, S, E), defaulting as there; mask: course convention,
                broadcastable to (B, H, T, S) with the global H (a per-head mask is sliced to this
                rank's heads).

        Returns:
            out (B, T, E), the whole layer's output (the same on every rank), and weights
            (B, H / W, T, S) of this rank's heads only.

        Raises:
            TypeError / ValueError: as MultiHeadAttention; RuntimeError / ValueError when W > 1 and
                the process group is missing or does not have this rank and world size.
        """
        key, value, mask = self._check_inputs(query, key, value, mask)
        if self.world_size > 1:
            self._check_group()
        if mask is not None and mask.dim() == 4 and mask.shape[1] == self.num_heads > 1:
            mask = mask[:, self.head_range.start : self.head_range.stop]  # (B, H/W, T, S): this rank's heads
        shared = {}  # one "f" per distinct input tensor, so self-attention reduces dX once
        query, key, value = (shared.setdefault(id(x), _copy_to_ranks(x, self)) for x in (query, key, value))
        q = split_heads(self.q_proj(query), self.local_heads)  # (B, H/W, T, D)
        k = split_heads(self.k_proj(key), self.local_heads)  # (B, H/W, S, D)
        v = split_heads(self.v_proj(value), self.local_heads)  # (B, H/W, S, D)
        heads, weights = scaled_dot_product_attention(q, k, v, mask=mask)  # (B, H/W, T, D), (B, H/W, T, S)
        if self.training and self.dropout.p > 0:
            heads = torch.matmul(self.dropout(weights), v)  # (B, H/W, T, D)
        heads = gate_heads(heads, self.head_gate)
        partial = F.linear(merge_heads(heads), self.out_proj.weight)  # (B, T, E): this rank's heads' share
        out = _sum_over_ranks(partial, self)  # (B, T, E): every head's share
        if self.out_proj.bias is not None:
            out = out + self.out_proj.bias  # once, after the sum (added on every rank it would count W times)
        return out, weights

    @classmethod
    def from_module(cls, module, rank: int, world_size: int, group=None) -> TensorParallelMultiHeadAttention:
        """Rank ``rank``'s shard of a whole :class:`mha_course.MultiHeadAttention` (or ``nn.MultiheadAttention``).

        Copies the rows of q/k/v_proj and the columns of out_proj that belong to heads
        rank*H/W .. (rank+1)*H/W - 1, the whole output bias, the dropout and the head gate.

        Raises:
            TypeError: ``module`` is neither (a subclass of MultiHeadAttention that changes its
                forward, e.g. rotary attention, is refused: the shard would not compute the same).
            ValueError: as the constructor (world_size, rank, heads not divisible), or as
                ``MultiHeadAttention.from_torch``.
        """
        if isinstance(module, nn.MultiheadAttention):
            module = MultiHeadAttention.from_torch(module)
        if type(module) is not MultiHeadAttention:
            raise TypeError(
                f"module must be a mha_course.MultiHeadAttention or a torch.nn.MultiheadAttention, "
                f"got {type(module).__name__}"
            )
        weight = module.q_proj.weight
        shard = cls(
            module.embed_dim,
            module.num_heads,
            rank,
            world_size,
            bias=module.q_proj.bias is not None,
            dropout=module.dropout.p,
            group=group,
        ).to(device=weight.device, dtype=weight.dtype)
        features = slice(shard.head_range.start * shard.head_dim, shard.head_range.stop * shard.head_dim)
        with torch.no_grad():
            for name in ("q_proj", "k_proj", "v_proj"):
                getattr(shard, name).weight.copy_(getattr(module, name).weight[features])  # (E/W, E)
                if getattr(module, name).bias is not None:
                    getattr(shard, name).bias.copy_(getattr(module, name).bias[features])  # (E/W,)
            shard.out_proj.weight.copy_(module.out_proj.weight[:, features])  # (E, E/W)
            if module.out_proj.bias is not None:
                shard.out_proj.bias.copy_(module.out_proj.bias)  # (E,), replicated
            shard.head_gate.copy_(module.head_gate[shard.head_range.start : shard.head_range.stop])
        return shard

    def _check_group(self) -> None:
        rank, world_size = group_rank_and_size(self.group)
        if (rank, world_size) != (self.rank, self.world_size):
            raise ValueError(
                f"this shard was built for rank {self.rank} of {self.world_size}, but the process group "
                f"has this process as rank {rank} of {world_size}"
            )

    def extra_repr(self) -> str:
        return (
            f"embed_dim={self.embed_dim}, num_heads={self.num_heads}, rank={self.rank}, "
            f"world_size={self.world_size}, local_heads={self.local_heads}"
        )


class _CopyToRanks(torch.autograd.Function):
    """Megatron's f: identity forward; backward all-reduces the input's gradient (every rank used it)."""

    @staticmethod
    def forward(ctx, x, group):
        ctx.group = group
        return x.view_as(x)

    @staticmethod
    def backward(ctx, grad):
        grad = grad.contiguous().clone()
        dist.all_reduce(grad, group=ctx.group)
        return grad, None


class _SumOverRanks(torch.autograd.Function):
    """Megatron's g: forward all-reduces the partial outputs; backward passes the gradient through."""

    @staticmethod
    def forward(ctx, x, group):
        x = x.contiguous().clone()
        dist.all_reduce(x, group=group)
        return x

    @staticmethod
    def backward(ctx, grad):
        return grad, None


def _copy_to_ranks(x: torch.Tensor, shard: TensorParallelMultiHeadAttention) -> torch.Tensor:
    return _CopyToRanks.apply(x, shard.group) if shard.world_size > 1 and x.requires_grad else x


def _sum_over_ranks(x: torch.Tensor, shard: TensorParallelMultiHeadAttention) -> torch.Tensor:
    return _SumOverRanks.apply(x, shard.group) if shard.world_size > 1 else x
