"""Grading: assignments, the self-check and the sandboxed grader."""
