"""Bugs of a08_cross_attention: realistic mistakes in its solution notebook, each one source edit (old -> new)."""

from __future__ import annotations

from bug_catalogue.bug import Bug

BUGS = [
    Bug(
        "xmask_query_axis",
        "a08_cross_attention",
        "padding on the query axis",
        [
            (
                "    real = torch.arange(S)[None, :] < lengths[:, None]  # (B, S): True at real source tokens",
                "    real = torch.arange(T)[None, :] < lengths[:, None]",
            ),
            (
                "    return real[:, None, None, :].expand(len(lengths), 1, T, S)  # (B, 1, T, S)",
                "    return real[:, None, :, None].expand(len(lengths), 1, T, S)",
            ),
        ],
    ),
    Bug(
        "xmask_inverted",
        "a08_cross_attention",
        "True = padding",
        [
            (
                "    real = torch.arange(S)[None, :] < lengths[:, None]  # (B, S): True at real source tokens",
                "    real = torch.arange(S)[None, :] >= lengths[:, None]",
            )
        ],
    ),
    Bug(
        "xmask_off_by_one",
        "a08_cross_attention",
        "<= instead of <",
        [
            (
                "    real = torch.arange(S)[None, :] < lengths[:, None]  # (B, S): True at real source tokens",
                "    real = torch.arange(S)[None, :] <= lengths[:, None]",
            )
        ],
    ),
    Bug(
        "xmask_causal",
        "a08_cross_attention",
        "a causal mask added to cross-attention",
        [
            (
                "    return real[:, None, None, :].expand(len(lengths), 1, T, S)  # (B, 1, T, S)",
                "    return real[:, None, None, :].expand(len(lengths), 1, T, S) & torch.ones(T, S, dtype=torch.bool).tril()",
            )
        ],
    ),
    Bug(
        "xmask_broadcast_only",
        "a08_cross_attention",
        "returns the (B, 1, 1, S) padding mask",
        [
            (
                "    return real[:, None, None, :].expand(len(lengths), 1, T, S)  # (B, 1, T, S)",
                "    return real[:, None, None, :]",
            )
        ],
    ),
    Bug(
        "xmask_no_padding",
        "a08_cross_attention",
        "padding not masked",
        [
            (
                "    real = torch.arange(S)[None, :] < lengths[:, None]  # (B, S): True at real source tokens",
                "    real = torch.ones(len(lengths), S, dtype=torch.bool)",
            )
        ],
    ),
    Bug(
        "cross_no_mask",
        "a08_cross_attention",
        "mask built but not passed",
        [
            (
                "    return attention(decoder_states, memory, memory, mask=mask)",
                "    return attention(decoder_states, memory, memory)",
            )
        ],
    ),
    Bug(
        "cross_query_from_memory",
        "a08_cross_attention",
        "memory as the query",
        [
            (
                "    return attention(decoder_states, memory, memory, mask=mask)",
                "    return attention(memory, decoder_states, decoder_states, mask=cross_attention_mask(source_lengths, S, T))",
            )
        ],
    ),
    Bug(
        "cross_T_S_swapped",
        "a08_cross_attention",
        "mask built (S, T)",
        [
            (
                "    mask = cross_attention_mask(source_lengths, T, S)",
                "    mask = cross_attention_mask(source_lengths, S, T)",
            )
        ],
    ),
    Bug(
        "ablate_one_feature",
        "a08_cross_attention",
        "zeroes feature h, not head h's D features",
        [
            (
                "    heads = heads * gate[:, None, None]  # (B, H, T, D): head `head` is all zeros, the others untouched\n    return mha.out_proj(merge_heads(heads))  # (B, T, E)",
                "    merged = merge_heads(heads).clone()\n    merged[..., head] = 0.0\n    return mha.out_proj(merged)",
            )
        ],
    ),
    Bug(
        "ablate_after_out_proj",
        "a08_cross_attention",
        "zeroes head h's slice of the output after W_O",
        [
            (
                "    heads = heads * gate[:, None, None]  # (B, H, T, D): head `head` is all zeros, the others untouched\n    return mha.out_proj(merge_heads(heads))  # (B, T, E)",
                "    out = mha.out_proj(merge_heads(heads))\n    D = out.shape[-1] // H\n    out[..., head * D:(head + 1) * D] = 0.0\n    return out",
            )
        ],
    ),
    Bug(
        "ablate_no_bias",
        "a08_cross_attention",
        "W_O without its bias",
        [
            (
                "    heads = heads * gate[:, None, None]  # (B, H, T, D): head `head` is all zeros, the others untouched\n    return mha.out_proj(merge_heads(heads))  # (B, T, E)",
                "    heads = heads * gate[:, None, None]  # (B, H, T, D): head `head` is all zeros, the others untouched\n    return merge_heads(heads) @ mha.out_proj.weight.T",
            )
        ],
    ),
    Bug(
        "ablate_subtract_with_bias",
        "a08_cross_attention",
        "out - out_proj(head h alone) subtracts b_O too",
        [
            (
                "    heads = heads * gate[:, None, None]  # (B, H, T, D): head `head` is all zeros, the others untouched\n    return mha.out_proj(merge_heads(heads))  # (B, T, E)",
                "    full = mha.out_proj(merge_heads(heads))\n    only = heads * (1 - gate)[:, None, None]\n    return full - mha.out_proj(merge_heads(only))",
            )
        ],
    ),
    Bug(
        "ablate_zero_queries",
        "a08_cross_attention",
        "zeroes head h's queries: it attends uniformly",
        [
            (
                "    heads, _ = scaled_dot_product_attention(q, k, v)  # (B, H, T, D)\n    gate = torch.ones(H, dtype=heads.dtype)\n    gate[head] = 0.0\n    heads = heads * gate[:, None, None]  # (B, H, T, D): head `head` is all zeros, the others untouched",
                "    gate = torch.ones(H, dtype=q.dtype)\n    gate[head] = 0.0\n    q = q * gate[:, None, None]\n    heads, _ = scaled_dot_product_attention(q, k, v)",
            )
        ],
    ),
    Bug(
        "ablate_head_gate",
        "a08_cross_attention",
        "uses the library's head_gate",
        [
            (
                "    heads = heads * gate[:, None, None]  # (B, H, T, D): head `head` is all zeros, the others untouched\n    return mha.out_proj(merge_heads(heads))  # (B, T, E)",
                "    mha.head_gate[head] = 0.0\n    out, _ = mha(query, key, value)\n    mha.head_gate[head] = 1.0\n    return out",
            )
        ],
    ),
    Bug(
        "ablate_fresh_module",
        "a08_cross_attention",
        "a copy of the module with its head_gate set",
        [
            (
                "    heads = heads * gate[:, None, None]  # (B, H, T, D): head `head` is all zeros, the others untouched\n    return mha.out_proj(merge_heads(heads))  # (B, T, E)",
                "    copy = MultiHeadAttention(mha.embed_dim, H).eval()\n    copy.load_state_dict(mha.state_dict())\n    copy.head_gate[head] = 0.0\n    return copy(query, key, value)[0]",
            )
        ],
    ),
    Bug(
        "ablate_weights_in_place",
        "a08_cross_attention",
        "zeroes W_O's columns in place",
        [
            (
                "    heads = heads * gate[:, None, None]  # (B, H, T, D): head `head` is all zeros, the others untouched\n    return mha.out_proj(merge_heads(heads))  # (B, T, E)",
                "    D = mha.out_proj.weight.shape[1] // H\n    with torch.no_grad():\n        mha.out_proj.weight[:, head * D:(head + 1) * D] = 0.0\n    return mha.out_proj(merge_heads(heads))",
            )
        ],
    ),
    Bug(
        "ablate_counts_from_one",
        "a08_cross_attention",
        "heads counted from 1",
        [("    gate[head] = 0.0", "    gate[head - 1] = 0.0")],
    ),
]
