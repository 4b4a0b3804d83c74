"""``python -m mha_course.train``: train the course's tiny transformer on a synthetic task (the command lives in :mod:`mha_course.models.train`).

One of the course's documented entry points, kept at this short name; ``--help`` explains it.
"""

import sys

from mha_course.models.train import main

if __name__ == "__main__":
    sys.exit(main())
