"""Attention in today's models: KV cache, GQA, MLA, paged KV, sinks, RoPE layouts, ALiBi, flex.

Names are imported when first used, so ``import mha_course.inference`` costs nothing until one is."""

from __future__ import annotations

from mha_course import _lazy_package

# public name -> module that defines it (the course's API: docs/ARCHITECTURE.md, "The course's API")
_EXPORTS = {
    "alibi_bias": "alibi",
    "alibi_slopes": "alibi",
    "use_alibi": "alibi",
    "chunked_causal_mask": "chunked_attention",
    "chunked_visible_counts": "chunked_attention",
    "alibi_score_mod": "flex",
    "causal_conventions": "flex",
    "causal_mod": "flex",
    "compile_support": "flex",
    "document_mod": "flex",
    "flex_attention": "flex",
    "make_block_mask": "flex",
    "mask_from_mod": "flex",
    "padding_mod": "flex",
    "sliding_window_mod": "flex",
    "KVCache": "kv_cache",
    "decode_self_attention": "kv_cache",
    "decode_step": "kv_cache",
    "causal_top_k": "lightning_indexer",
    "indexer_kl_loss": "lightning_indexer",
    "selection_mask": "lightning_indexer",
    "LatentCache": "mla",
    "MultiHeadLatentAttention": "mla",
    "cache_numbers_per_token": "mla",
    "decode_cost_per_token": "mla",
    "nope_query_scale": "nope_layers",
    "rope_layers": "nope_layers",
    "PagedKVCache": "paged_kv",
    "memory_report": "paged_kv",
    "paged_attention": "paged_kv",
    "paged_attention_blockwise": "paged_kv",
    "qk_norm": "qk_norm",
    "qk_norm_heads": "qk_norm",
    "score_bound": "qk_norm",
    "apply_rotary_half": "rope_layouts",
    "interleaved_to_half_permutation": "rope_layouts",
    "with_rope_layout": "rope_layouts",
    "StreamingKVCache": "sinks",
    "attention_with_sink_logits": "sinks",
    "sink_mass": "sinks",
    "streaming_decode": "sinks",
    "streaming_mask": "sinks",
    "SparseLatentAttention": "sparse_mla",
    "GroupedQueryAttention": "variants",
    "grouped_query_attention": "variants",
    "interleaved_kv_cache_numbers": "variants",
    "kv_cache_bytes": "variants",
    "linformer_attention": "variants",
    "linformer_projections": "variants",
    "repeat_kv": "variants",
    "sliding_window_attention": "variants",
    "sliding_window_mask": "variants",
}
_MODULES: tuple[str, ...] = ()

__all__ = sorted([*_EXPORTS, *_MODULES])
__getattr__, __dir__ = _lazy_package(__name__, _EXPORTS, _MODULES)
