"""Bugs of a16_modern_attention: realistic mistakes in its solution notebook, each one source edit (old -> new)."""

from __future__ import annotations

from bug_catalogue.bug import Bug

BUGS = [
    Bug(
        "alibi_h_from_zero",
        "a16_modern_attention",
        "slopes counted from h = 0 (first slope 1)",
        [
            (
                "        return [2.0 ** (-8.0 * (h + 1) / n) for h in range(n)]",
                "        return [2.0 ** (-8.0 * h / n) for h in range(n)]",
            )
        ],
    ),
    Bug(
        "alibi_plain_formula",
        "a16_modern_attention",
        "the power-of-two formula for every H",
        [("    slopes = geometric(n) + geometric(2 * n)[0::2][: num_heads - n]", "    slopes = geometric(num_heads)")],
    ),
    Bug(
        "alibi_odd_extra_slopes",
        "a16_modern_attention",
        "the extra slopes taken at odd positions",
        [("geometric(2 * n)[0::2]", "geometric(2 * n)[1::2]")],
    ),
    Bug(
        "alibi_reversed",
        "a16_modern_attention",
        "slopes in reverse order",
        [
            (
                "    return torch.tensor(slopes, dtype=torch.float32)",
                "    return torch.tensor(slopes[::-1], dtype=torch.float32)",
            )
        ],
    ),
    Bug(
        "alibi_list",
        "a16_modern_attention",
        "returns a Python list",
        [("    return torch.tensor(slopes, dtype=torch.float32)", "    return slopes")],
    ),
    Bug(
        "rope_inverse",
        "a16_modern_attention",
        "converts rotate-half -> interleaved",
        [
            (
                "    perm = torch.cat([torch.arange(0, D, 2), torch.arange(1, D, 2)])",
                "    perm = torch.argsort(torch.cat([torch.arange(0, D, 2), torch.arange(1, D, 2)]))",
            )
        ],
    ),
    Bug(
        "rope_all_rows",
        "a16_modern_attention",
        "evens-then-odds across all H*D rows",
        [
            (
                "    heads = weight.reshape(num_heads, D, *weight.shape[1:])",
                "    heads = weight.reshape(1, num_heads * D, *weight.shape[1:])\n    perm = torch.cat([torch.arange(0, num_heads * D, 2), torch.arange(1, num_heads * D, 2)])",
            )
        ],
    ),
    Bug(
        "rope_odds_first",
        "a16_modern_attention",
        "odds before evens",
        [
            (
                "    perm = torch.cat([torch.arange(0, D, 2), torch.arange(1, D, 2)])",
                "    perm = torch.cat([torch.arange(1, D, 2), torch.arange(0, D, 2)])",
            )
        ],
    ),
    Bug(
        "rope_in_place",
        "a16_modern_attention",
        "overwrites the caller's weight",
        [
            (
                "    return heads[:, perm].reshape(weight.shape)",
                "    weight.copy_(heads[:, perm].reshape(weight.shape))\n    return weight",
            )
        ],
    ),
    Bug(
        "rope_unchanged",
        "a16_modern_attention",
        "returns the weight as it is",
        [("    return heads[:, perm].reshape(weight.shape)", "    return weight.clone()")],
    ),
    Bug(
        "paged_no_table",
        "a16_modern_attention",
        "block table ignored",
        [("    pages = pool[block_table]", "    pages = pool[: len(block_table)]")],
    ),
    Bug(
        "paged_no_transpose",
        "a16_modern_attention",
        "pages merged without moving G first",
        [
            (
                "    return pages.transpose(0, 1).reshape(G, -1, D)[:, :length]",
                "    return pages.reshape(G, -1, D)[:, :length]",
            )
        ],
    ),
    Bug(
        "paged_no_truncate",
        "a16_modern_attention",
        "the last block not cut to length",
        [
            (
                "    return pages.transpose(0, 1).reshape(G, -1, D)[:, :length]",
                "    return pages.transpose(0, 1).reshape(G, -1, D)",
            )
        ],
    ),
    Bug(
        "paged_slot_swapped",
        "a16_modern_attention",
        "block s % n, slot s // n",
        [
            (
                "    pages = pool[block_table]",
                "    n = len(block_table)\n    return torch.stack([pool[block_table[s % n], :, s // n] for s in range(length)], dim=1)",
            )
        ],
    ),
]
