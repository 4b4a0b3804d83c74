"""``python -m mha_course.assign``: regenerate exercises/ from solutions/ (the command lives in :mod:`mha_course.grading.assign`).

One of the course's documented entry points, kept at this short name; ``--help`` explains it.
"""

import sys

from mha_course.grading.assign import main

if __name__ == "__main__":
    sys.exit(main())
