"""Call functions: the part of each case that runs inside the submission sandbox.

A case's ``call(target, inputs)`` turns the grader's plain inputs (NumPy arrays and Python
scalars) into what the learner's target expects (tensors, a module holding the grader's weights),
calls it, and converts the result back to plain NumPy data. Nothing else of the grading content
runs there: the sandbox's copy of ``mha_course`` holds this package, not the exercise modules,
``hints``, ``spec`` or any reference implementation.

One module here per exercise module, with the same name: ``mha_course.grading.exercises.a02_softmax``
takes its calls from ``mha_course.grading.calls.a02_softmax``. Each call function is public,
module-level, and named after what it calls (``softmax_np``, ``softmax_np_unchanged``, ...).

What these modules may import (``tests/grading/calls/test_call_imports.py`` checks it):

- ``numpy``; ``torch`` (inside functions, so importing the module stays cheap);
- :mod:`mha_course.grading.inside.convert` and other ``mha_course.grading.calls`` modules;
- small standard-library modules (``math``, ``typing``, ``collections.abc``, ``contextlib``,
  ``inspect``, ``os``, ``sys``), and ``triton`` inside a13's kernel launchers;
- inside a function, a building block its own assignment lists in ``provided`` (a08 builds the
  library ``MultiHeadAttention`` the learner is given);

never ``mha_course``'s reference modules, never ``hints``, ``spec`` or ``exercises``. A call that
watches its inputs returns :func:`~mha_course.grading.inside.convert.with_inputs_after`'s pair; whether
they changed is judged in the grader (:func:`mha_course.grading.engine.case_inputs.unchanged_case`).
"""
