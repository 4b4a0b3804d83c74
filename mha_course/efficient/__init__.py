"""Memory-efficient attention: online softmax, tiled attention, gradients by hand, cost models."""
