"""Bugs of a05_multi_head: realistic mistakes in its solution notebook, each one source edit (old -> new)."""

from __future__ import annotations

from bug_catalogue.bug import Bug

BUGS = [
    Bug(
        "split_no_transpose",
        "a05_multi_head",
        "view without transpose",
        [
            (
                "    return x.view(B, T, num_heads, D).transpose(1, 2)  # (B, H, T, D)",
                "    return x.view(B, num_heads, T, D)",
            )
        ],
    ),
    Bug(
        "split_strided",
        "a05_multi_head",
        "heads take every H-th feature",
        [
            (
                "    return x.view(B, T, num_heads, D).transpose(1, 2)  # (B, H, T, D)",
                "    return x.view(B, T, D, num_heads).permute(0, 3, 1, 2)",
            )
        ],
    ),
    Bug(
        "split_missing_transpose",
        "a05_multi_head",
        "(B, T, H, D)",
        [
            (
                "    return x.view(B, T, num_heads, D).transpose(1, 2)  # (B, H, T, D)",
                "    return x.view(B, T, num_heads, D)",
            )
        ],
    ),
    Bug(
        "merge_no_transpose",
        "a05_multi_head",
        "reshape without transpose",
        [("    return x.transpose(1, 2).reshape(B, T, H * D)  # (B, T, E)", "    return x.reshape(B, T, H * D)")],
    ),
    Bug(
        "merge_wrong_transpose",
        "a05_multi_head",
        "transpose(2, 3)",
        [
            (
                "    return x.transpose(1, 2).reshape(B, T, H * D)  # (B, T, E)",
                "    return x.transpose(2, 3).reshape(B, T, H * D)",
            )
        ],
    ),
    Bug(
        "mha_no_out_proj",
        "a05_multi_head",
        "missing W_O",
        [("        return self.out_proj(merge_heads(heads)), weights", "        return merge_heads(heads), weights")],
    ),
    Bug(
        "mha_qk_swapped",
        "a05_multi_head",
        "q/k projections swapped",
        [
            (
                "        q = split_heads(self.q_proj(query), self.num_heads)",
                "        q = split_heads(self.k_proj(query), self.num_heads)",
            ),
            (
                "        k = split_heads(self.k_proj(key), self.num_heads)",
                "        k = split_heads(self.q_proj(key), self.num_heads)",
            ),
        ],
    ),
    Bug(
        "mha_value_from_key",
        "a05_multi_head",
        "values from the key input",
        [
            (
                "        v = split_heads(self.v_proj(value), self.num_heads)",
                "        v = split_heads(self.v_proj(key), self.num_heads)",
            )
        ],
    ),
    Bug(
        "mha_no_bias",
        "a05_multi_head",
        "q_proj without bias",
        [
            (
                "        self.q_proj = nn.Linear(embed_dim, embed_dim)",
                "        self.q_proj = nn.Linear(embed_dim, embed_dim, bias=False)",
            )
        ],
    ),
    Bug(
        "mha_scale_sqrt_E",
        "a05_multi_head",
        "scale by sqrt(E) not sqrt(D)",
        [
            (
                "        heads, weights = scaled_dot_product_attention(q, k, v, mask=mask)",
                "        heads, weights = scaled_dot_product_attention(q, k, v, mask=mask, scale=1 / math.sqrt(self.embed_dim))",
            )
        ],
    ),
    Bug(
        "mha_mask_dropped",
        "a05_multi_head",
        "mask not passed on",
        [
            (
                "        heads, weights = scaled_dot_product_attention(q, k, v, mask=mask)",
                "        heads, weights = scaled_dot_product_attention(q, k, v)",
            )
        ],
    ),
    Bug(
        "mha_split_view",
        "a05_multi_head",
        "split bug propagates into the module",
        [
            (
                "    return x.view(B, T, num_heads, D).transpose(1, 2)  # (B, H, T, D)",
                "    return x.reshape(B, num_heads, T, D)",
            )
        ],
    ),
    Bug(
        "mha_extra_params",
        "a05_multi_head",
        "extra parameters",
        [
            (
                "        self.out_proj = nn.Linear(embed_dim, embed_dim)\n",
                "        self.out_proj = nn.Linear(embed_dim, embed_dim)\n        self.extra = nn.Linear(embed_dim, embed_dim)\n",
            )
        ],
    ),
]
