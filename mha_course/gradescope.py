"""``python -m mha_course.gradescope``: build or simulate the Gradescope autograder bundle (the command lives in :mod:`mha_course.grading.gradescope`).

One of the course's documented entry points, kept at this short name; ``--help`` explains it.
"""

import sys

from mha_course.grading.gradescope import main

if __name__ == "__main__":
    sys.exit(main())
