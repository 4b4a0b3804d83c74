"""The learner's progress through the course, kept in one plain JSON file (see :mod:`.store`)."""
