"""Bugs of a17_newest_attention: realistic mistakes in its solution notebook, each one source edit (old -> new)."""

from __future__ import annotations

from bug_catalogue.bug import Bug

BUGS = [
    Bug(
        "gate_before_softmax",
        "a17_newest_attention",
        "the gate on the scores before the softmax",
        [
            (
                "    weights = torch.softmax(scores, dim=-1)                                  # (B, H, T, S)",
                "    weights = torch.softmax(scores * torch.sigmoid(gate_logits), dim=-1)",
            ),
            (
                "    return heads * torch.sigmoid(gate_logits)                                # after the attention",
                "    return heads",
            ),
        ],
    ),
    Bug(
        "gate_on_queries",
        "a17_newest_attention",
        "the gate on the queries",
        [
            (
                "    scores = q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1])              # (B, H, T, S)",
                "    scores = (q * torch.sigmoid(gate_logits)) @ k.transpose(-2, -1) / math.sqrt(q.shape[-1])",
            ),
            (
                "    return heads * torch.sigmoid(gate_logits)                                # after the attention",
                "    return heads",
            ),
        ],
    ),
    Bug(
        "gate_on_values",
        "a17_newest_attention",
        "the gate on the values before the weighted sum",
        [
            (
                "    heads = weights @ v                                                      # (B, H, T, Dv)",
                "    heads = weights @ (v * torch.sigmoid(gate_logits))",
            ),
            (
                "    return heads * torch.sigmoid(gate_logits)                                # after the attention",
                "    return heads",
            ),
        ],
    ),
    Bug(
        "gate_no_sigmoid",
        "a17_newest_attention",
        "the gate logits used as the gate",
        [
            (
                "    return heads * torch.sigmoid(gate_logits)                                # after the attention",
                "    return heads * gate_logits",
            ),
        ],
    ),
    Bug(
        "gate_one_minus",
        "a17_newest_attention",
        "one minus the sigmoid",
        [
            (
                "    return heads * torch.sigmoid(gate_logits)                                # after the attention",
                "    return heads * (1 - torch.sigmoid(gate_logits))",
            ),
        ],
    ),
    Bug(
        "gate_missing",
        "a17_newest_attention",
        "no gate",
        [
            (
                "    return heads * torch.sigmoid(gate_logits)                                # after the attention",
                "    return heads",
            ),
        ],
    ),
    Bug(
        "gate_mask_ignored",
        "a17_newest_attention",
        "the mask ignored",
        [
            ('        scores = scores.masked_fill(~mask, float("-inf"))', "        pass"),
        ],
    ),
    Bug(
        "delta_sign_plus",
        "a17_newest_attention",
        "adds what the state recalls instead of subtracting it",
        [
            ("    error = v - recalled", "    error = v + recalled"),
        ],
    ),
    Bug(
        "delta_no_gate",
        "a17_newest_attention",
        "the state never decayed",
        [
            (
                "    decayed = torch.exp(g)[..., None, None] * state                         # (B, H, Dk, Dv): alpha S",
                "    decayed = state",
            ),
        ],
    ),
    Bug(
        "delta_gate_is_g",
        "a17_newest_attention",
        "decays by g, not exp(g)",
        [
            (
                "    decayed = torch.exp(g)[..., None, None] * state                         # (B, H, Dk, Dv): alpha S",
                "    decayed = g[..., None, None] * state",
            ),
        ],
    ),
    Bug(
        "delta_read_undecayed",
        "a17_newest_attention",
        "reads the state before its decay",
        [
            ("(k.unsqueeze(-1) * decayed).sum(dim=-2)", "(k.unsqueeze(-1) * state).sum(dim=-2)"),
        ],
    ),
    Bug(
        "delta_decay_after_write",
        "a17_newest_attention",
        "decays after the write",
        [
            (
                "    decayed = torch.exp(g)[..., None, None] * state                         # (B, H, Dk, Dv): alpha S",
                "    decayed = state",
            ),
            (
                "    return decayed + beta[..., None, None] * k.unsqueeze(-1) * error.unsqueeze(-2)",
                "    return torch.exp(g)[..., None, None] * (decayed + beta[..., None, None] * k.unsqueeze(-1) * error.unsqueeze(-2))",
            ),
        ],
    ),
    Bug(
        "delta_no_beta",
        "a17_newest_attention",
        "the write not scaled by beta",
        [
            (
                "    return decayed + beta[..., None, None] * k.unsqueeze(-1) * error.unsqueeze(-2)",
                "    return decayed + k.unsqueeze(-1) * error.unsqueeze(-2)",
            ),
        ],
    ),
    Bug(
        "delta_no_readback",
        "a17_newest_attention",
        "gated linear attention: writes v, not the error",
        [
            ("    error = v - recalled", "    error = v"),
        ],
    ),
    Bug(
        "topk_future",
        "a17_newest_attention",
        "top k over the future too",
        [
            (
                '    masked = scores.masked_fill(~visible, float("-inf"))                     # the future is never chosen',
                "    masked = scores",
            ),
            (
                "    return chosen & visible                                                  # fewer visible than k: all of them",
                "    return chosen",
            ),
        ],
    ),
    Bug(
        "topk_mask_after",
        "a17_newest_attention",
        "the future removed after the top k",
        [
            (
                '    masked = scores.masked_fill(~visible, float("-inf"))                     # the future is never chosen',
                "    masked = scores",
            ),
        ],
    ),
    Bug(
        "topk_k_too_large",
        "a17_newest_attention",
        "future keys kept when k exceeds the visible count",
        [
            (
                "    return chosen & visible                                                  # fewer visible than k: all of them",
                "    return chosen",
            ),
        ],
    ),
    Bug(
        "topk_k_unclamped",
        "a17_newest_attention",
        "top k with k larger than S",
        [
            (
                "    top = masked.topk(min(k, S), dim=-1).indices                             # (B, T, K)",
                "    top = masked.topk(k, dim=-1).indices",
            ),
        ],
    ),
    Bug(
        "topk_smallest",
        "a17_newest_attention",
        "the k lowest scores",
        [
            (
                "    top = masked.topk(min(k, S), dim=-1).indices                             # (B, T, K)",
                "    top = masked.topk(min(k, S), dim=-1, largest=False).indices",
            ),
        ],
    ),
    Bug(
        "topk_own_position",
        "a17_newest_attention",
        "a query may not choose itself",
        [
            (
                "    visible = torch.ones(T, S, dtype=torch.bool).tril(S - T)                # (T, S)",
                "    visible = torch.ones(T, S, dtype=torch.bool).tril(S - T - 1)",
            ),
        ],
    ),
    Bug(
        "topk_top_left",
        "a17_newest_attention",
        "queries aligned with the first positions when decoding",
        [
            (
                "    visible = torch.ones(T, S, dtype=torch.bool).tril(S - T)                # (T, S)",
                "    visible = torch.ones(T, S, dtype=torch.bool).tril()",
            ),
        ],
    ),
    Bug(
        "chunk_shifted",
        "a17_newest_attention",
        "chunk borders one position late, (i + 1) // C",
        [
            (
                "    return (j <= i) & (j // chunk_size == i // chunk_size)",
                "    return (j <= i) & ((j + 1) // chunk_size == (i + 1) // chunk_size)",
            ),
        ],
    ),
    Bug(
        "chunk_first_missing",
        "a17_newest_attention",
        "chunk start compared with < instead of <=",
        [
            (
                "    return (j <= i) & (j // chunk_size == i // chunk_size)",
                "    return (j <= i) & (j > i - i % chunk_size)",
            ),
        ],
    ),
    Bug(
        "chunk_strict",
        "a17_newest_attention",
        "the diagonal left out",
        [
            (
                "    return (j <= i) & (j // chunk_size == i // chunk_size)",
                "    return (j < i) & (j // chunk_size == i // chunk_size)",
            ),
        ],
    ),
    Bug(
        "chunk_no_causal",
        "a17_newest_attention",
        "the whole chunk visible",
        [
            (
                "    return (j <= i) & (j // chunk_size == i // chunk_size)",
                "    return j // chunk_size == i // chunk_size",
            ),
        ],
    ),
    Bug(
        "chunk_sliding",
        "a17_newest_attention",
        "a sliding window of C",
        [
            (
                "    return (j <= i) & (j // chunk_size == i // chunk_size)",
                "    return (j <= i) & (i - j < chunk_size)",
            ),
        ],
    ),
    Bug(
        "chunk_sliding_wide",
        "a17_newest_attention",
        "a sliding window of C + 1",
        [
            (
                "    return (j <= i) & (j // chunk_size == i // chunk_size)",
                "    return (j <= i) & (i - j <= chunk_size)",
            ),
        ],
    ),
    Bug(
        "chunk_inverted",
        "a17_newest_attention",
        "True where blocked",
        [
            (
                "    return (j <= i) & (j // chunk_size == i // chunk_size)",
                "    return ~((j <= i) & (j // chunk_size == i // chunk_size))",
            ),
        ],
    ),
]
