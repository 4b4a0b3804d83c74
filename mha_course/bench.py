"""``python -m mha_course.bench``: time every attention implementation side by side (the command lives in :mod:`mha_course.timing.bench`).

One of the course's documented entry points, kept at this short name; ``--help`` explains it.
"""

import sys

from mha_course.timing.bench import main

if __name__ == "__main__":
    sys.exit(main())
