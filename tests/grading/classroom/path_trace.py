"""Trace one submission's way through the grader: ``python -m mha_course.grade CLASS/ --csv g.csv`` to its CSV row.

Runs the command in this process on a class of one student (the fake assignment of ``grading_fake.py``,
graded behind the walls) under a profiler that records every call into a grader module, and prints:

* **stops**: the modules the command (``grading/grade.py``) calls into, in order, a run of calls into one
  module counted once; **returns**: stops at a module already stopped at;
* **modules** and **folders**: every grader module (and folder) that ran in the grader's process;
* **classroom <-> engine edges**: distinct caller -> callee module pairs between ``classroom/`` and ``engine/``
  (either way), and from the command straight into ``engine/``;
* **metadata reads**: how often the notebook's assignment metadata was read (``notebook.metadata``, which
  ``registry.identify`` and ``class_files.peek_metadata`` call), and how often its file was parsed (``notebook.parse_json``).

Run from the repository root: ``PYTHONPATH=$PWD python tests/grading/classroom/path_trace.py``.
"""

from __future__ import annotations

import contextlib
import io
import sys
import tempfile
import threading
from collections import Counter
from pathlib import Path

HERE = Path(__file__).resolve().parent
GRADING_TESTS = HERE.parent
PACKAGE = GRADING_TESTS.parents[1] / "mha_course" / "grading"
METADATA_READERS = {"engine.notebook.metadata"}


def module_of(filename: str) -> str | None:
    """``classroom.collect`` for a file of the grader (``grade`` for grading/grade.py), None elsewhere."""
    path = Path(filename)
    if PACKAGE not in path.parents:
        return None
    parts = path.relative_to(PACKAGE).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts) or "grading"


def trace(argv: list[str]) -> dict:
    """Run ``grade.main(argv)`` under the profiler; the figures of the module docstring as a dictionary."""
    from mha_course.grading import grade

    calls: list[tuple[str, str, str]] = []  # (caller module, callee module, function), in order
    lock = threading.Lock()

    def profile(frame, event, arg):
        if event != "call":
            return
        callee = module_of(frame.f_code.co_filename)
        if callee is None or frame.f_code.co_name == "<module>":  # an import, not a step of the way
            return
        caller = module_of(frame.f_back.f_code.co_filename) if frame.f_back else None
        with lock:
            calls.append((caller or "", callee, frame.f_code.co_name))

    threading.setprofile(profile)
    sys.setprofile(profile)
    try:
        with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
            status = grade.main(argv)
    finally:
        sys.setprofile(None)
        threading.setprofile(None)  # type: ignore[arg-type]
    stops: list[str] = []
    for caller, callee, _ in calls:
        if caller == "grade" and callee != "grade" and (not stops or stops[-1] != callee):
            stops.append(callee)
    returns = sum(1 for i, s in enumerate(stops) if s in stops[:i])
    modules = sorted({callee for _, callee, _ in calls})
    folders = sorted({m.split(".")[0] for m in modules if "." in m})
    edges = sorted(
        {
            f"{a} -> {b}"
            for a, b, _ in calls
            if {a.split(".")[0], b.split(".")[0]} == {"classroom", "engine"}
            or (a == "grade" and b.startswith("engine."))
        }
    )
    functions = Counter(f"{callee}.{name}" for _, callee, name in calls)
    reads = {k: v for k, v in functions.items() if k in METADATA_READERS}
    return {
        "status": status,
        "stops": stops,
        "returns": returns,
        "modules": modules,
        "folders": folders,
        "edges": edges,
        "metadata_reads": reads,
        "parses": functions.get("engine.notebook.parse_json", 0),
    }


def one_student_class(root: Path) -> list[str]:
    """A class folder of one student (a good fake submission) and the command's arguments for it."""
    from grading_fake import GOOD_ADD, GOOD_DOUBLE, write_submission

    folder = root / "class" / "Alice Martin_1234_assignsubmission_file_"
    folder.mkdir(parents=True)
    write_submission(folder / "zz_fake.ipynb", GOOD_ADD, GOOD_DOUBLE)
    return [str(root / "class"), "--csv", str(root / "g.csv"), "--quiet"]


def main() -> int:
    sys.path.insert(0, str(GRADING_TESTS))
    from mha_course.grading.engine import registry

    with registry.registered("grading_fake"), tempfile.TemporaryDirectory() as tmp:
        found = trace(one_student_class(Path(tmp)))
    print(f"exit status {found['status']}")
    print(f"stops ({len(found['stops'])}, {found['returns']} returns): {' -> '.join(found['stops'])}")
    print(f"modules ({len(found['modules'])} in {len(found['folders'])} folders): {', '.join(found['modules'])}")
    print(f"classroom <-> engine edges ({len(found['edges'])}): {'; '.join(found['edges'])}")
    print(f"metadata reads: {dict(found['metadata_reads'])}; notebook parses: {found['parses']}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
