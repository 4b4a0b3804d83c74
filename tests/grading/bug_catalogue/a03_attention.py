"""Bugs of a03_attention: realistic mistakes in its solution notebook, each one source edit (old -> new)."""

from __future__ import annotations

from bug_catalogue.bug import Bug

BUGS = [
    Bug(
        "attn_np_no_scale",
        "a03_attention",
        "no scale",
        [
            (
                "    scores = (q @ np.swapaxes(k, -1, -2)) / math.sqrt(D)  # (..., T, S)",
                "    scores = q @ np.swapaxes(k, -1, -2)",
            )
        ],
    ),
    Bug(
        "attn_np_softmax_axis",
        "a03_attention",
        "softmax over queries",
        [("    weights = softmax_np(scores, axis=-1)  # (..., T, S)", "    weights = softmax_np(scores, axis=-2)")],
    ),
    Bug(
        "attn_np_wrong_order",
        "a03_attention",
        "returns (weights, out)",
        [("    return out, weights\n", "    return weights, out\n")],
    ),
    Bug(
        "attn_np_keys_as_values",
        "a03_attention",
        "uses keys as values",
        [("    out = weights @ v  # (..., T, Dv)", "    out = weights @ k")],
    ),
    Bug(
        "attn_np_transposed_weights",
        "a03_attention",
        "weights returned transposed",
        [
            (
                "    out = weights @ v  # (..., T, Dv)\n    return out, weights",
                "    out = weights @ v  # (..., T, Dv)\n    return out, np.swapaxes(weights, -1, -2)",
            )
        ],
    ),
    Bug(
        "attn_np_inplace_scale",
        "a03_attention",
        "scales q in place",
        [
            (
                "    scores = (q @ np.swapaxes(k, -1, -2)) / math.sqrt(D)  # (..., T, S)",
                "    q /= math.sqrt(D)\n    scores = q @ np.swapaxes(k, -1, -2)",
            )
        ],
    ),
    Bug(
        "sdpa_scale_ignored",
        "a03_attention",
        "scale argument ignored",
        [
            (
                "    if scale is None:\n        scale = 1.0 / math.sqrt(q.shape[-1])\n    scores = (q @ k.transpose(-2, -1)) * scale",
                "    scale = 1.0 / math.sqrt(q.shape[-1])\n    scores = (q @ k.transpose(-2, -1)) * scale",
            )
        ],
    ),
    Bug(
        "sdpa_divide_by_scale",
        "a03_attention",
        "divides by scale (default then multiplies by sqrt D)",
        [
            (
                "    scores = (q @ k.transpose(-2, -1)) * scale  # (..., T, S)",
                "    scores = (q @ k.transpose(-2, -1)) / scale",
            )
        ],
    ),
    Bug(
        "sdpa_transpose_T",
        "a03_attention",
        "k.T: no batch dims",
        [("    scores = (q @ k.transpose(-2, -1)) * scale  # (..., T, S)", "    scores = (q @ k.T) * scale")],
    ),
    Bug(
        "sdpa_only_square",
        "a03_attention",
        "hard-codes S == T",
        [
            (
                "    return weights @ v, weights  # (..., T, Dv), (..., T, S)",
                "    return weights @ v, weights[..., : q.shape[-2]]",
            )
        ],
    ),
    Bug(
        "sdpa_float32_always",
        "a03_attention",
        "casts to float32 (float64 in -> float32 out)",
        [
            (
                "    scores = (q @ k.transpose(-2, -1)) * scale  # (..., T, S)",
                "    scores = (q.float() @ k.float().transpose(-2, -1)) * scale\n    v = v.float()",
            )
        ],
    ),
]
