"""A model to train: tasks, the tiny transformer, training, and what its heads learned."""
