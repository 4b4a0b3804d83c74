"""``python -m mha_course.progress``: list your progress (the command lives in :mod:`mha_course.grading.learner.progress`).

One of the course's documented entry points, kept at this short name; ``--help`` explains it. In a
notebook, ``mha_course.progress()`` gives the same listing: the package keeps that name for the
function even once this module is imported (``mha_course._LazyPackage``).
"""

import sys

from mha_course.grading.learner.progress import main

if __name__ == "__main__":
    sys.exit(main())
