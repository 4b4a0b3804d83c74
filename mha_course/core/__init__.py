"""Attention itself: softmax, masks, scaled dot-product attention, heads, MultiHeadAttention, positions."""
