"""Bugs of a12_tiled_attention: realistic mistakes in its solution notebook, each one source edit (old -> new)."""

from __future__ import annotations

from bug_catalogue.bug import Bug

BUGS = [
    Bug(
        "online_two_values",
        "a12_tiled_attention",
        "the update returns (m_new, l_new) without the correction",
        [("    return m_new, l_new, correction\n", "    return m_new, l_new\n")],
    ),
]
