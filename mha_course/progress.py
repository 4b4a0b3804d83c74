"""``python -m mha_course.progress``: list your progress (the command lives in :mod:`mha_course.grading.learner.progress`).

One of the course's documented entry points, kept at this short name; ``--help`` explains it. In a
notebook, ``mha_course.progress()`` gives the same listing. Importing this module would rebind the
package's ``progress`` to a module, which cannot be called; so, imported, the module puts in its own
place an object that can: ``mha_course.progress()`` lists, ``mha_course.progress.main`` is the command.
"""

import sys

from mha_course.grading.learner.progress import main, progress


class _Command:
    """``mha_course.progress``: call it for the listing (see ``main`` for the command line)."""

    main = staticmethod(main)
    __doc__ = progress.__doc__

    def __call__(self, reset=None):
        return progress(reset)


if __name__ == "__main__":
    sys.exit(main())
else:  # the import system binds the package's attribute to what sys.modules holds once this has run
    sys.modules[__name__] = _Command()  # type: ignore[assignment]
