"""The operating system's walls around a submission: tiers A, B, C, the view, resources."""
