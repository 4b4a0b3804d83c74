"""Tiled attention on the CPU: the forward, its backward from the lse, the tile plan, the workers."""
