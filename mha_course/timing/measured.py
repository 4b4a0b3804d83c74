"""The course's own GPU run, shipped with the package, so a chapter can show it on a machine without a GPU.

:func:`gpu_run` reads ``gpu_run_h100_2026-11-26.json`` beside this module: the records that
``python -m mha_course.bench --device cuda`` wrote to ``benchmarks/gpu_results.json`` on one H100
(copied unchanged; ``tests/timing/test_measured.py`` keeps the two equal), with the GPU, the date and
the command. ``benchmarks/RESULTS.md`` ("GPU run, 2026-11-26 11:24 UTC") describes that run.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

RUN_FILE = Path(__file__).with_name("gpu_run_h100_2026-11-26.json")


@dataclass(frozen=True)
class MeasuredRun:
    """One recorded benchmark run: where, when and how it was measured, and its records (one dict per timing)."""

    gpu: str
    measured: str
    command: str
    source: str
    records: tuple[dict, ...]

    def series(self, impl: str, causal: bool, key: str = "tflops") -> tuple[list[int], list[float]]:
        """(T values, ``key`` of each) of the forward records of ``impl`` at ``causal``, sorted by T.

        Raises:
            ValueError: no record of ``impl`` at ``causal``, or ``key`` is not a field of the records.
        """
        rows = sorted(
            (r for r in self.records if r["impl"] == impl and r["causal"] == causal and r["pass"] == "forward"),
            key=lambda r: r["T"],
        )
        if not rows:
            impls = sorted({r["impl"] for r in self.records})
            raise ValueError(f"no forward record of {impl!r} with causal={causal}; the run has {impls}")
        if key not in rows[0]:
            raise ValueError(f"records have no field {key!r}; they have {sorted(rows[0])}")
        return [r["T"] for r in rows], [r[key] for r in rows]


def gpu_run(path: Path = RUN_FILE) -> MeasuredRun:
    """The H100 run of 2026-11-26 (forward, bf16, B = 4, H = 16, D = 128), read from the JSON shipped here."""
    data = json.loads(Path(path).read_text(encoding="utf-8"))
    return MeasuredRun(data["gpu"], data["measured"], data["command"], data["source"], tuple(data["records"]))


__all__ = ["MeasuredRun", "RUN_FILE", "gpu_run"]
