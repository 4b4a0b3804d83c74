"""Bugs of a15_ring_attention: realistic mistakes in its solution notebook, each one source edit (old -> new)."""

from __future__ import annotations

from bug_catalogue.bug import Bug

BUGS = [
    Bug(
        "merge_average",
        "a15_ring_attention",
        "plain average of the blocks' outputs",
        [
            (
                "    out = (weights.unsqueeze(-1) * torch.stack(list(outs))).sum(dim=0)     # (..., T, Dv)",
                "    out = torch.stack(list(outs)).mean(dim=0)",
            )
        ],
    ),
    Bug(
        "merge_lse_max",
        "a15_ring_attention",
        "lse = the largest lse_b",
        [
            (
                "    lse = torch.logsumexp(lse_blocks, dim=0)                               # (..., T); -inf if every block is empty",
                "    lse = lse_blocks.amax(dim=0)",
            )
        ],
    ),
    Bug(
        "merge_lse_sum",
        "a15_ring_attention",
        "lse = the sum of the lse_b",
        [("    return out, lse\n", "    return out, lse_blocks.sum(dim=0)\n")],
    ),
    Bug(
        "merge_nan_empty_rows",
        "a15_ring_attention",
        "shift by lse even where it is -inf (NaN rows)",
        [
            (
                "    shift = torch.where(torch.isneginf(lse), torch.zeros_like(lse), lse)   # never -inf: no -inf - (-inf) = NaN",
                "    shift = lse",
            )
        ],
    ),
    Bug(
        "merge_naive_exp",
        "a15_ring_attention",
        "exp(lse_b) / sum exp(lse_b): overflows, NaN for empty rows",
        [
            (
                "    weights = torch.exp(lse_blocks - shift)                                # (n, ..., T); 0 for an empty block",
                "    weights = torch.exp(lse_blocks) / torch.exp(lse_blocks).sum(dim=0)",
            )
        ],
    ),
    Bug(
        "merge_unnormalised",
        "a15_ring_attention",
        "weights exp(lse_b - max), not divided by their sum",
        [
            (
                "    shift = torch.where(torch.isneginf(lse), torch.zeros_like(lse), lse)   # never -inf: no -inf - (-inf) = NaN",
                "    shift = lse_blocks.amax(dim=0)\n    shift = torch.where(torch.isneginf(shift), torch.zeros_like(shift), shift)",
            )
        ],
    ),
    Bug(
        "ring_local_positions",
        "a15_ring_attention",
        "causal mask in local indices (offsets ignored)",
        [
            (
                "        visible = torch.arange(k_offset, k_offset + S) <= torch.arange(q_offset, q_offset + T)[:, None]  # (T, S)",
                "        visible = torch.arange(S) <= torch.arange(T)[:, None]",
            )
        ],
    ),
    Bug(
        "ring_no_merge",
        "a15_ring_attention",
        "returns the block's own result",
        [("    return merge_partial_attention([out, out_b], [lse, lse_b])", "    return out_b, lse_b")],
    ),
    Bug(
        "ring_strict_mask",
        "a15_ring_attention",
        "causal mask j < i hides the diagonal",
        [
            (
                "        visible = torch.arange(k_offset, k_offset + S) <= torch.arange(q_offset, q_offset + T)[:, None]  # (T, S)",
                "        visible = torch.arange(k_offset, k_offset + S) < torch.arange(q_offset, q_offset + T)[:, None]",
            )
        ],
    ),
    Bug(
        "ring_mask_ignored",
        "a15_ring_attention",
        "causal flag ignored",
        [
            (
                "    if causal:\n        visible = torch.arange(k_offset, k_offset + S) <= torch.arange(q_offset, q_offset + T)[:, None]  # (T, S)\n        scores = scores.masked_fill(~visible, -math.inf)\n",
                "",
            )
        ],
    ),
    Bug(
        "ring_no_scale",
        "a15_ring_attention",
        "no 1/sqrt(D)",
        [
            (
                "    scores = q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1])                        # (..., T, S)",
                "    scores = q @ k.transpose(-2, -1)",
            )
        ],
    ),
    Bug(
        "ring_nan_rows",
        "a15_ring_attention",
        "NaN where a query sees no key of the block",
        [("    shift = torch.where(torch.isneginf(lse_b), torch.zeros_like(lse_b), lse_b)", "    shift = lse_b")],
    ),
]
