"""Bugs of a11_kv_cache: realistic mistakes in its solution notebook, each one source edit (old -> new)."""

from __future__ import annotations

from bug_catalogue.bug import Bug

BUGS = [
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
]
