"""``python -m mha_course.gpu_report``: compile the Triton kernels for real GPUs on the CPU and report them (the command lives in :mod:`mha_course.kernels.gpu_report`).

One of the course's documented entry points, kept at this short name; ``--help`` explains it.
"""

import sys

from mha_course.kernels.gpu_report import main

if __name__ == "__main__":
    sys.exit(main())
