"""Bugs of a04_masks: realistic mistakes in its solution notebook, each one source edit (old -> new)."""

from __future__ import annotations

from bug_catalogue.bug import Bug

BUGS = [
    Bug(
        "causal_upper",
        "a04_masks",
        "upper triangle",
        [("    return cols <= rows  # (T, S)", "    return cols >= rows")],
    ),
    Bug(
        "causal_strict",
        "a04_masks",
        "diagonal excluded (off by one)",
        [("    return cols <= rows  # (T, S)", "    return cols < rows")],
    ),
    Bug(
        "causal_inverted",
        "a04_masks",
        "True = blocked",
        [("    return cols <= rows  # (T, S)", "    return cols > rows")],
    ),
    Bug(
        "causal_float",
        "a04_masks",
        "float 0/1 mask",
        [("    return cols <= rows  # (T, S)", "    return (cols <= rows).float()")],
    ),
    Bug(
        "causal_square_only",
        "a04_masks",
        "ignores S",
        [("    S = T if S is None else S\n    rows", "    S = T\n    rows")],
    ),
    Bug(
        "padding_2d",
        "a04_masks",
        "returns (B, S)",
        [("    return real[:, None, None, :]  # (B, 1, 1, S)", "    return real")],
    ),
    Bug(
        "padding_inverted",
        "a04_masks",
        "True = padding",
        [
            (
                "    real = torch.arange(S).unsqueeze(0) < lengths.unsqueeze(1)  # (B, S)",
                "    real = torch.arange(S).unsqueeze(0) >= lengths.unsqueeze(1)",
            )
        ],
    ),
    Bug(
        "padding_off_by_one",
        "a04_masks",
        "<= instead of <",
        [
            (
                "    real = torch.arange(S).unsqueeze(0) < lengths.unsqueeze(1)  # (B, S)",
                "    real = torch.arange(S).unsqueeze(0) <= lengths.unsqueeze(1)",
            )
        ],
    ),
    Bug(
        "padding_wrong_axis",
        "a04_masks",
        "keys on the query axis",
        [("    return real[:, None, None, :]  # (B, 1, 1, S)", "    return real[:, None, :, None]")],
    ),
    Bug(
        "mask_ignored",
        "a04_masks",
        "mask ignored",
        [
            (
                '        if mask.dtype == torch.bool:\n            scores = scores.masked_fill(~mask, float("-inf"))\n        else:\n            scores = scores + mask',
                "        pass",
            )
        ],
    ),
    Bug(
        "mask_inverted",
        "a04_masks",
        "bool mask inverted",
        [('scores.masked_fill(~mask, float("-inf"))', 'scores.masked_fill(mask, float("-inf"))')],
    ),
    Bug(
        "mask_after_softmax",
        "a04_masks",
        "mask applied after softmax",
        [
            (
                "    weights = softmax(scores, dim=-1)  # (..., T, S); an all -inf row gives zeros",
                "    weights = softmax(scores, dim=-1)\n    if mask is not None and mask.dtype == torch.bool:\n        weights = weights.masked_fill(~mask, 0.0)",
            ),
            ('            scores = scores.masked_fill(~mask, float("-inf"))', "            pass"),
        ],
    ),
    Bug(
        "mask_float_multiplied",
        "a04_masks",
        "float mask multiplied",
        [("            scores = scores + mask", "            scores = scores * mask")],
    ),
    Bug(
        "mask_minus_1e9",
        "a04_masks",
        "-1e9 fill in the input dtype",
        [
            (
                "    work = torch.promote_types(q.dtype, torch.float32)  # float16 scores overflow: compute in float32",
                "    work = q.dtype",
            ),
            ('scores.masked_fill(~mask, float("-inf"))', "scores.masked_fill(~mask, -1e9)"),
        ],
    ),
    Bug(
        "mask_finfo_min",
        "a04_masks",
        "finfo.min fill: fully masked rows uniform",
        [('scores.masked_fill(~mask, float("-inf"))', "scores.masked_fill(~mask, torch.finfo(scores.dtype).min)")],
    ),
    Bug(
        "mask_torch_softmax_nan",
        "a04_masks",
        "NaN for fully masked rows",
        [
            (
                "    weights = softmax(scores, dim=-1)  # (..., T, S); an all -inf row gives zeros",
                "    weights = torch.exp(scores - scores.amax(-1, keepdim=True))\n    weights = weights / weights.sum(-1, keepdim=True)",
            )
        ],
    ),
    Bug(
        "mask_no_scale",
        "a04_masks",
        "no 1/sqrt(D) by default (an explicit scale honoured)",
        [
            (
                "        scale = 1.0 / math.sqrt(q.shape[-1])\n    work = torch.promote_types",
                "        scale = 1.0\n    work = torch.promote_types",
            )
        ],
    ),
    Bug(
        "mask_inplace",
        "a04_masks",
        "inverts the caller's mask in place",
        [
            (
                'scores = scores.masked_fill(~mask, float("-inf"))',
                'scores = scores.masked_fill(mask.logical_not_(), float("-inf"))',
            )
        ],
    ),
]
