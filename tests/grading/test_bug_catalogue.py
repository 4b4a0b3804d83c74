"""The bug catalogue: realistic buggy implementations, injected into copies of the solution notebooks.

Each bug is a source edit of a solution notebook (old -> new, checked to apply). Every bug must
lose points:

* all of them through the self-check logic in this process (fast: one exec per bug);
* a representative subset (``GRADED``) through the real grader, ``python -m mha_course.grading.grade``, in
  ONE invocation over a folder that also holds the untouched solutions (full marks in the same run:
  a lost point means the bug, not the run). That every unedited exercise gets zero is checked by
  tests/notebooks/test_assign_sync.py, which grades all of them once already.
"""

from __future__ import annotations

import contextlib
import csv
import io
import os
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import nbformat
import pytest

from mha_course.grading.engine import fresh_draws, registry
from mha_course.grading.engine.notebook import code_cells
from mha_course.grading.learner import selfcheck

ROOT = Path(__file__).resolve().parents[2]
pytestmark = pytest.mark.filterwarnings("ignore::RuntimeWarning")  # buggy softmaxes overflow on purpose


@dataclass(frozen=True)
class Bug:
    id: str
    notebook: str  # assignment key = solution notebook stem
    what: str
    edits: list  # [(old, new)]: each old must occur in exactly one code cell


BUGS = [
    Bug(
        "dot_elementwise",
        "a01_dot_products",
        "element-wise products, not summed",
        [("return float(np.sum(a * b))", "return a * b")],
    ),
    Bug(
        "scores_kqT",
        "a01_dot_products",
        "k q^T instead of q k^T",
        [("    return q @ np.swapaxes(k, -1, -2)  # (..., T, S)", "    return k @ np.swapaxes(q, -1, -2)")],
    ),
    Bug(
        "scores_no_batch",
        "a01_dot_products",
        "k.T reverses all axes: no batch dims",
        [("    return q @ np.swapaxes(k, -1, -2)  # (..., T, S)", "    return q @ k.T")],
    ),
    Bug(
        "scale_by_D",
        "a01_dot_products",
        "1/D instead of 1/sqrt(D)",
        [("/ math.sqrt(D)  # (..., T, S)\n    ### END", "/ D  # (..., T, S)\n    ### END")],
    ),
    Bug(
        "scale_np_sqrt_dtype",
        "a01_dot_products",
        "np.sqrt promotes float32 to float64",
        [("/ math.sqrt(D)  # (..., T, S)\n    ### END", "/ np.sqrt(D)  # (..., T, S)\n    ### END")],
    ),
    Bug(
        "scale_hardcoded",
        "a01_dot_products",
        "hard-coded sqrt(16)",
        [("/ math.sqrt(D)  # (..., T, S)\n    ### END", "/ 4.0  # (..., T, S)\n    ### END")],
    ),
    Bug(
        "softmax_no_max",
        "a02_softmax",
        "no max subtraction (NumPy)",
        [("    exps = np.exp(x - row_max)", "    exps = np.exp(x)")],
    ),
    Bug(
        "softmax_axis0",
        "a02_softmax",
        "softmax over axis 0",
        [
            (
                "    row_max = np.max(x, axis=axis, keepdims=True)\n    row_max = np.where(np.isneginf(row_max), 0.0, row_max)  # all -inf row: shift by 0, not -inf\n    exps = np.exp(x - row_max)\n    total = np.sum(exps, axis=axis, keepdims=True)",
                "    row_max = np.max(x, axis=0, keepdims=True)\n    row_max = np.where(np.isneginf(row_max), 0.0, row_max)\n    exps = np.exp(x - row_max)\n    total = np.sum(exps, axis=0, keepdims=True)",
            )
        ],
    ),
    Bug(
        "softmax_global_max",
        "a02_softmax",
        "global instead of per-row max",
        [("    row_max = np.max(x, axis=axis, keepdims=True)", "    row_max = np.max(x)")],
    ),
    Bug(
        "softmax_no_keepdims",
        "a02_softmax",
        "missing keepdims",
        [("    row_max = np.max(x, axis=axis, keepdims=True)", "    row_max = np.max(x, axis=axis)")],
    ),
    Bug(
        "softmax_inplace",
        "a02_softmax",
        "mutates its input",
        [("    exps = np.exp(x - row_max)\n", "    x -= row_max\n    exps = np.exp(x)\n")],
    ),
    Bug(
        "softmax_neginf_nan",
        "a02_softmax",
        "textbook stable softmax: NaN on all -inf rows",
        [("    row_max = np.where(np.isneginf(row_max), 0.0, row_max)  # all -inf row: shift by 0, not -inf\n", "")],
    ),
    Bug(
        "softmax_torch_no_max",
        "a02_softmax",
        "no max subtraction (torch)",
        [("    exps = torch.exp(work - row_max)", "    exps = torch.exp(work)")],
    ),
    Bug(
        "softmax_torch_downcast",
        "a02_softmax",
        "computes float64 input in float32",
        [("    work = x.float() if x.dtype in (torch.float16, torch.bfloat16) else x", "    work = x.float()")],
    ),
    Bug(
        "softmax_torch_dtype",
        "a02_softmax",
        "float16 input returns float32",
        [
            (
                "    return (exps / torch.where(total == 0, torch.ones_like(total), total)).to(x.dtype)",
                "    return exps / torch.where(total == 0, torch.ones_like(total), total)",
            )
        ],
    ),
    Bug(
        "softmax_torch_dim_ignored",
        "a02_softmax",
        "dim argument ignored",
        [
            ("    row_max = work.amax(dim=dim, keepdim=True)", "    row_max = work.amax(dim=-1, keepdim=True)"),
            ("    total = exps.sum(dim=dim, keepdim=True)", "    total = exps.sum(dim=-1, keepdim=True)"),
        ],
    ),
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
    Bug(
        "debug_seed_unfixed",
        "a06_debug_mha",
        "the seed, unrepaired",
        [
            (
                '        B, T, E = queries.shape\n        S = keys.shape[1]\n        H = self.num_heads\n        q = self.query(queries).view(B, T, H, E).transpose(1, 2)  # (B, H, T, E)\n        k = self.key(keys).view(B, S, H, E).transpose(1, 2)  # (B, H, S, E)\n        v = self.value(values).view(B, S, H, E).transpose(1, 2)  # (B, H, S, E)\n        scores = q @ k.transpose(-1, -2) / math.sqrt(E)  # (B, H, T, S); each head has D = E features\n        if mask is not None:\n            scores = scores.masked_fill(~mask, float("-inf")) if mask.dtype == torch.bool else scores + mask\n        attention = self.softmax(scores)  # (B, H, T, S)\n        heads = attention @ v  # (B, H, T, E)\n        heads = heads.transpose(1, 2).contiguous().view(B, T, H * E)  # (B, T, H*E)\n        return self.combine(heads)  # (B, T, E)',
                "        queries = self.query(queries).view(queries.size(0), self.num_heads, -1).transpose(1, 2)\n        keys = self.key(keys).view(keys.size(0), self.num_heads, -1)\n        values = self.value(values).view(values.size(0), self.num_heads, -1)\n        attention = self.softmax(queries @ keys.transpose(-1, -2) / torch.sqrt(torch.tensor(self.embed_dim)))\n        attention = attention @ values\n        attention = attention.transpose(1, 2).contiguous().view(attention.size(0), -1)\n        return self.combine(attention)",
            )
        ],
    ),
    Bug(
        "debug_scale_per_head",
        "a06_debug_mha",
        "'fixes' the scale to sqrt(E/H)",
        [
            (
                "        scores = q @ k.transpose(-1, -2) / math.sqrt(E)",
                "        scores = q @ k.transpose(-1, -2) / math.sqrt(E // H)",
            )
        ],
    ),
    Bug(
        "debug_split_no_transpose",
        "a06_debug_mha",
        "view(B, H, T, E) without transpose",
        [
            (
                "        q = self.query(queries).view(B, T, H, E).transpose(1, 2)  # (B, H, T, E)",
                "        q = self.query(queries).view(B, H, T, E)",
            ),
            (
                "        k = self.key(keys).view(B, S, H, E).transpose(1, 2)  # (B, H, S, E)",
                "        k = self.key(keys).view(B, H, S, E)",
            ),
            (
                "        v = self.value(values).view(B, S, H, E).transpose(1, 2)  # (B, H, S, E)",
                "        v = self.value(values).view(B, H, S, E)",
            ),
        ],
    ),
    Bug(
        "debug_kv_not_transposed",
        "a06_debug_mha",
        "only queries transposed",
        [
            (
                "        k = self.key(keys).view(B, S, H, E).transpose(1, 2)  # (B, H, S, E)",
                "        k = self.key(keys).view(B, H, S, E)",
            ),
            (
                "        v = self.value(values).view(B, S, H, E).transpose(1, 2)  # (B, H, S, E)",
                "        v = self.value(values).view(B, H, S, E)",
            ),
        ],
    ),
    Bug(
        "debug_merge_no_transpose",
        "a06_debug_mha",
        "merge without transpose",
        [
            (
                "        heads = heads.transpose(1, 2).contiguous().view(B, T, H * E)",
                "        heads = heads.contiguous().view(B, T, H * E)",
            )
        ],
    ),
    Bug(
        "debug_mask_ignored",
        "a06_debug_mha",
        "mask accepted but ignored",
        [
            (
                '        if mask is not None:\n            scores = scores.masked_fill(~mask, float("-inf")) if mask.dtype == torch.bool else scores + mask\n',
                "",
            )
        ],
    ),
    Bug(
        "debug_mask_inverted",
        "a06_debug_mha",
        "mask inverted",
        [('scores.masked_fill(~mask, float("-inf"))', 'scores.masked_fill(mask, float("-inf"))')],
    ),
    Bug("debug_T_for_S", "a06_debug_mha", "assumes S == T", [("        S = keys.shape[1]", "        S = T")]),
    Bug(
        "debug_value_from_keys",
        "a06_debug_mha",
        "values from the keys input",
        [("        v = self.value(values)", "        v = self.value(keys)")],
    ),
    Bug(
        "debug_layers_EE",
        "a06_debug_mha",
        "rewrites to the standard E/H layout",
        [
            (
                "        self.query = nn.Linear(embed_dim, embed_dim * num_heads)\n        self.key = nn.Linear(embed_dim, embed_dim * num_heads)\n        self.value = nn.Linear(embed_dim, embed_dim * num_heads)\n        self.combine = nn.Linear(embed_dim * num_heads, embed_dim)\n        self.softmax = nn.Softmax(dim=-1)\n\n    def forward(self, queries, keys, values, mask=None):",
                "        self.query = nn.Linear(embed_dim, embed_dim)\n        self.key = nn.Linear(embed_dim, embed_dim)\n        self.value = nn.Linear(embed_dim, embed_dim)\n        self.combine = nn.Linear(embed_dim, embed_dim)\n        self.softmax = nn.Softmax(dim=-1)\n\n    def forward(self, queries, keys, values, mask=None):",
            )
        ],
    ),
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
    Bug(
        "kv_new_first",
        "a11_kv_cache",
        "the new token put at the start of the caches (out stays right)",
        [
            ("torch.cat([k_cache, k_new], dim=2)", "torch.cat([k_new, k_cache], dim=2)"),
            ("torch.cat([v_cache, v_new], dim=2)", "torch.cat([v_new, v_cache], dim=2)"),
        ],
    ),
    Bug(
        "kv_caches_not_returned_grown",
        "a11_kv_cache",
        "the old caches returned (out stays right)",
        [
            (
                "    return weights @ values, k_cache, v_cache",
                "    return weights @ values, k_cache[:, :, :-1], v_cache[:, :, :-1]",
            )
        ],
    ),
    Bug(
        "kv_attend_old_cache_only",
        "a11_kv_cache",
        "attends before appending: the token does not see itself",
        [
            (
                "    scores = q @ keys.transpose(-2, -1) / math.sqrt(q.shape[-1])",
                "    keys, values = keys[:, :, :-1], values[:, :, :-1]\n    scores = q @ keys.transpose(-2, -1) / math.sqrt(q.shape[-1])",
            )
        ],
    ),
    Bug(
        "online_two_values",
        "a12_tiled_attention",
        "the update returns (m_new, l_new) without the correction",
        [("    return m_new, l_new, correction\n", "    return m_new, l_new\n")],
    ),
    Bug(
        "kv_no_scale",
        "a11_kv_cache",
        "no 1/sqrt(D)",
        [
            (
                "    scores = q @ keys.transpose(-2, -1) / math.sqrt(q.shape[-1])",
                "    scores = q @ keys.transpose(-2, -1)",
            )
        ],
    ),
    Bug(
        "kv_gqa_repeat",
        "a11_kv_cache",
        "repeat instead of repeat_interleave: query head h reads the wrong kv head",
        [
            ("keys = k_cache.repeat_interleave(H // G, dim=1)", "keys = k_cache.repeat(1, H // G, 1, 1)"),
            ("values = v_cache.repeat_interleave(H // G, dim=1)", "values = v_cache.repeat(1, H // G, 1, 1)"),
        ],
    ),
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

# Through the real grader: one bug per classic mistake named in the course's issue and design.
GRADED = {
    "scores_kqT",
    "scale_by_D",
    "scale_np_sqrt_dtype",
    "softmax_no_max",
    "softmax_axis0",
    "softmax_global_max",
    "softmax_inplace",
    "attn_np_wrong_order",
    "attn_np_transposed_weights",
    "sdpa_scale_ignored",
    "sdpa_only_square",
    "causal_upper",
    "causal_strict",
    "padding_wrong_axis",
    "mask_ignored",
    "mask_inverted",
    "mask_after_softmax",
    "mask_float_multiplied",
    "mask_minus_1e9",
    "split_no_transpose",
    "merge_wrong_transpose",
    "mha_no_out_proj",
    "mha_qk_swapped",
    "mha_value_from_key",
    "mha_no_bias",
    "mha_scale_sqrt_E",
    "debug_seed_unfixed",
    "debug_scale_per_head",
    "debug_kv_not_transposed",
    "debug_mask_inverted",
    "xmask_query_axis",
    "xmask_causal",
    "cross_no_mask",
    "ablate_one_feature",
    "ablate_after_out_proj",
    "ablate_no_bias",
    "ablate_zero_queries",
    "ablate_head_gate",
    "alibi_h_from_zero",
    "rope_inverse",
    "paged_no_table",
    "merge_average",
    "merge_nan_empty_rows",
    "ring_local_positions",
    "ring_no_merge",
    "gate_before_softmax",
    "delta_sign_plus",
    "topk_future",
    "chunk_shifted",
}


def _mutated(bug: Bug) -> nbformat.NotebookNode:
    nb = nbformat.read(ROOT / "solutions" / f"{bug.notebook}.ipynb", as_version=4)
    for old, new in bug.edits:
        cells = [c for c in nb.cells if c.cell_type == "code" and old in c.source]
        assert len(cells) == 1, f"{bug.id}: edit does not apply to exactly one cell: {old[:60]!r}"
        cells[0].source = cells[0].source.replace(old, new)
    return nb


def _targets(nb) -> dict:
    """Execute a notebook's code cells here (self-check disabled) and return its namespace."""
    import matplotlib

    matplotlib.use("Agg")
    namespace: dict = {}
    for _, source in code_cells(nb):
        if "check(" in source and "def " not in source and "class " not in source:
            continue  # check cells
        with contextlib.redirect_stdout(io.StringIO()), contextlib.suppress(Exception):
            exec(compile(source, "<cell>", "exec"), namespace)  # noqa: S102 - course files and their edits
        namespace["check"] = lambda *a, **k: None
    return namespace


def test_catalogue_is_large_and_edits_apply():
    assert len(BUGS) >= 15 and len({b.id for b in BUGS}) == len(BUGS)
    assert GRADED <= {b.id for b in BUGS}
    for bug in BUGS:
        _mutated(bug)


@pytest.mark.parametrize("bug", BUGS, ids=lambda b: b.id)
def test_every_bug_loses_points_in_the_self_check(bug):
    assignment = registry.get_assignment(bug.notebook)
    namespace = _targets(_mutated(bug))
    score = 0.0
    for exercise in assignment.exercises:
        target = namespace.get(exercise.target)
        if target is None:
            continue
        score += selfcheck.check(exercise.key, target, include_hidden=True, show=False).score
    assert score < assignment.max_points, f"{bug.id} ({bug.what}) got full marks"


def _read_grades(path: Path) -> dict[str, tuple[float, float]]:
    """submission file stem -> (score, max_score) from the grader's class CSV."""
    rows = list(csv.DictReader(path.read_text().splitlines()))
    assert rows, "empty grades CSV"
    columns = {c.lower().strip(): c for c in rows[0]}
    score_col = next(columns[c] for c in ("score", "total", "points") if c in columns)
    max_col = next(columns[c] for c in ("max_score", "max", "max_points", "out_of") if c in columns)
    grades = {}
    for row in rows:
        name = next((v for v in row.values() if isinstance(v, str) and v.endswith(".ipynb")), None)
        assert name is not None, f"no submission file name in row {row}"
        grades[Path(name).stem] = (float(row[score_col]), float(row[max_col]))
    return grades


@pytest.mark.slow
def test_grader_catches_bugs_and_scores_solutions_in_full(tmp_path):
    from grading_fake import require_sandbox

    require_sandbox()
    submissions = tmp_path / "submissions"
    submissions.mkdir()
    expected_full, expected_loss = [], []
    for bug in BUGS:
        if bug.id in GRADED:
            nbformat.write(_mutated(bug), submissions / f"bug__{bug.id}.ipynb")
            expected_loss.append(f"bug__{bug.id}")
    for name in sorted({b.notebook for b in BUGS}):
        (submissions / f"solution__{name}.ipynb").write_bytes((ROOT / "solutions" / f"{name}.ipynb").read_bytes())
        expected_full.append(f"solution__{name}")
    grades_csv = tmp_path / "grades.csv"
    files = sorted(str(p) for p in submissions.glob("*.ipynb"))
    done = subprocess.run(
        [sys.executable, "-m", "mha_course.grading.grade", *files, "--csv", str(grades_csv)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=900,
    )
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    grades = _read_grades(grades_csv)
    problems = []
    for stem in expected_full:
        score, top = grades[stem]
        if not (top > 0 and score == top):
            problems.append(f"{stem}: {score}/{top}, expected full marks")
    for stem in expected_loss:
        score, top = grades[stem]
        if not (top > 0 and score < top):
            problems.append(f"{stem}: {score}/{top}, expected to lose points")
    assert problems == []


# Fresh draws per bug: a regrade draws new inputs, and a bug must lose the same points on each. CI takes 6
# (about a minute on 2 cores); `MHA_COURSE_BUG_DRAWS=50 pytest -k same_cases` is the full check (RESULTS.md).
DRAWS = int(os.environ.get("MHA_COURSE_BUG_DRAWS", "6"))


def _draw_verdicts(assignment, namespace, salts, expected_cache):
    """(exercise, case) -> the salts on which ``namespace``'s targets pass it, on the grader's fresh inputs
    (:func:`~mha_course.grading.engine.fresh_draws.fresh_inputs`; the reference computed once per draw)."""
    import dataclasses

    passed: dict[tuple[str, str], list] = {}
    for exercise in assignment.exercises:
        target = namespace.get(exercise.target)
        if target is None:
            continue
        for case in exercise.cases:
            for salt in salts:
                key = (exercise.key, case.name, salt)
                inputs = fresh_draws.fresh_inputs(case, salt)

                def reference(inputs, key=key, compute=case.reference):
                    if key not in expected_cache:
                        expected_cache[key] = compute(inputs)
                    return expected_cache[key]

                row, _, _ = selfcheck.run_case(dataclasses.replace(case, reference=reference), target, inputs=inputs)
                if row.passed:
                    passed.setdefault((exercise.key, case.name), []).append(salt)
    return passed


@pytest.mark.slow
@pytest.mark.parametrize("key", sorted({b.notebook for b in BUGS}))
def test_every_bug_loses_the_same_cases_on_every_draw(key):
    """A grade is a promise: a catalogued bug fails each case it fails on every one of DRAWS fresh draws
    (regrades, and students given different inputs, get the same score), and the solution passes every draw."""
    assignment = registry.get_assignment(key)
    salts = list(range(1, DRAWS + 1))
    cache: dict = {}
    solution = _targets(nbformat.read(ROOT / "solutions" / f"{key}.ipynb", as_version=4))
    everything = {(e.key, c.name) for e in assignment.exercises for c in e.cases}
    solved = _draw_verdicts(assignment, solution, salts, cache)
    unsteady = {case: len(s) for case, s in solved.items() if len(s) != len(salts)}
    assert set(solved) == everything and not unsteady, f"the solution fails some draws: {unsteady}"
    for bug in (b for b in BUGS if b.notebook == key):
        verdicts = _draw_verdicts(assignment, _targets(_mutated(bug)), salts, cache)
        lucky = {case: f"{len(s)}/{len(salts)} draws" for case, s in verdicts.items() if len(s) != len(salts)}
        assert not lucky, f"{bug.id} ({bug.what}) passes these cases on some draws only: {lucky}"
