"""Attention in today's models: KV cache, GQA, MLA, paged KV, sinks, RoPE layouts, ALiBi, flex."""
