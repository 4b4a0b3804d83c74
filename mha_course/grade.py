"""``python -m mha_course.grade``: grade one submission or a whole class, each in its own sandbox (the command lives in :mod:`mha_course.grading.grade`).

One of the course's documented entry points, kept at this short name; ``--help`` explains it.
"""

import sys

from mha_course.grading.grade import main

if __name__ == "__main__":
    sys.exit(main())
