"""A case process imports nothing the broker could have imported once: each such import is paid by every case.

torch's lazy ``import sympy`` (through ``torch.broadcast_shapes`` or autograd given output gradients)
was half a second in each of a submission's case processes; benchmarks/case_process_cost.py plays
the broker outside the sandbox and lists what each notebook's case processes import anew.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[3]


@pytest.mark.slow
def test_no_solutions_case_process_imports_a_module_anew():
    solutions = sorted(str(p) for p in (ROOT / "solutions").glob("*.ipynb"))
    done = subprocess.run(
        [sys.executable, str(ROOT / "benchmarks" / "case_process_cost.py"), "--imports", *solutions],
        capture_output=True,
        text=True,
        timeout=600,
        cwd=ROOT,
    )
    assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-2000:]
    lines = done.stdout.splitlines()
    assert len(lines) == len(solutions) and all(line.endswith("(0 not ok) imported nothing") for line in lines), lines
