"""Timing every implementation side by side (python -m mha_course.timing.bench)."""
