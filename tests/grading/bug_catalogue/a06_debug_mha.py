"""Bugs of a06_debug_mha: realistic mistakes in its solution notebook, each one source edit (old -> new)."""

from __future__ import annotations

from bug_catalogue.bug import Bug

BUGS = [
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
]
