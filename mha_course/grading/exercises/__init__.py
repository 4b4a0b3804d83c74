"""One module per assignment; each defines ASSIGNMENT (see mha_course.grading.spec)."""
