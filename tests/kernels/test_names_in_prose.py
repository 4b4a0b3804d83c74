"""Every ``mha_course.kernels.x.y`` the docs and notebooks name exists: a module, or a name in one.

CONTRIBUTING once sent contributors to ``gpu_report.kernels()`` after it was gone; this finds such a name.
"""

from __future__ import annotations

import importlib
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PROSE = [ROOT / "CONTRIBUTING.md", ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
PROSE += [ROOT / "benchmarks" / "RESULTS.md", *sorted((ROOT / "notebooks").glob("*.ipynb"))]
DOTTED = re.compile(r"\bmha_course\.kernels(?:\.[A-Za-z_]\w*)+")


def named() -> list[str]:
    return sorted({m for path in PROSE if path.exists() for m in DOTTED.findall(path.read_text(encoding="utf-8"))})


def resolves(dotted: str) -> bool:
    """Import the longest module prefix of ``dotted``, then read the rest as attributes."""
    parts = dotted.split(".")
    for cut in range(len(parts), 1, -1):
        try:
            found = importlib.import_module(".".join(parts[:cut]))
        except ModuleNotFoundError:
            continue
        for attribute in parts[cut:]:
            if not hasattr(found, attribute):
                return False
            found = getattr(found, attribute)
        return True
    return False


def test_the_prose_names_some_kernel_names():
    assert "mha_course.kernels.gpu_report" in named()  # the pattern reads the files


@pytest.mark.parametrize("dotted", named())
def test_a_kernel_name_in_the_prose_exists(dotted):
    pytest.importorskip("triton")  # the registry and its entries exist only with Triton
    assert resolves(dotted), f"{dotted} is named in the docs or notebooks but does not exist"


def test_a_name_that_is_gone_does_not_resolve():
    assert not resolves("mha_course.kernels.gpu_report.kernels")
    assert not resolves("mha_course.kernels.no_such_module")
