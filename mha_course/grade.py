"""``python -m mha_course.grade``: grade one submission or a whole class, each in its own sandbox (the command lives in :mod:`mha_course.grading.grade`).

One of the course's documented entry points, kept at this short name; ``--help`` explains it.
"""

import sys

from mha_course.grading.hidden_argv import hide_command_line

if __name__ == "__main__":  # before the grader's imports (a second): its arguments leave the command line at once
    hide_command_line()

from mha_course.grading.grade import main  # noqa: E402

if __name__ == "__main__":
    sys.exit(main())
