"""One command for whoever has an NVIDIA GPU: test, benchmark and report the GPU path, and record it.

    make gpu-check          (or: python benchmarks/gpu_check.py)

On a machine with CUDA it runs, in order:

1. the CUDA-only tests (``pytest -m gpu``): the compiled forward and backward kernels against
   torch's flash backend;
2. the GPU benchmark, bf16, D = 128, T = 1024 .. 16384, non-causal and causal, forward and
   forward+backward, against every SDPA backend torch offers (``python -m mha_course.timing.bench``);
3. ``python -m mha_course.kernels.gpu_report`` for this GPU's architecture;

and appends a dated section to benchmarks/RESULTS.md with the device, driver, CUDA/cuDNN/torch/
Triton versions, each command and its output, and writes the JSON files beside it. Without a GPU
it says so and measures nothing: no GPU number in this repository is written by anything else.
"""

from __future__ import annotations

import datetime
import platform
import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent


def _run(command: list[str]) -> tuple[int, str]:
    print("$", " ".join(command), flush=True)
    proc = subprocess.run(command, cwd=ROOT, capture_output=True, text=True)
    output = proc.stdout + proc.stderr
    print(output[-4000:], flush=True)
    return proc.returncode, output


def main() -> int:
    import torch

    if not torch.cuda.is_available():
        print("no CUDA GPU here: nothing was measured and RESULTS.md is unchanged")
        return 2
    major, minor = torch.cuda.get_device_capability()
    arch = f"sm_{major}{minor}"
    stamp = datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%d %H:%M UTC")
    driver = (
        subprocess.run(
            ["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"], capture_output=True, text=True
        ).stdout.strip()
        or "unknown"
    )
    import triton

    header = (
        f"device {torch.cuda.get_device_name()} ({arch}), driver {driver}, CUDA {torch.version.cuda}, "
        f"cuDNN {torch.backends.cudnn.version()}, torch {torch.__version__}, triton {triton.__version__}, "
        f"python {platform.python_version()}"
    )
    steps = [
        [sys.executable, "-m", "pytest", "-q", "-m", "gpu", "tests/kernels/test_flash_triton.py"],
        [
            sys.executable,
            "-m",
            "mha_course.timing.bench",
            "--device",
            "cuda",
            "--dtype",
            "bfloat16",
            "--D",
            "128",
            "--T",
            "1024",
            "2048",
            "4096",
            "8192",
            "16384",
            "--json",
            "benchmarks/gpu_results.json",
            "--plot",
            "benchmarks/gpu_results.png",
        ],
        [
            sys.executable,
            "-m",
            "mha_course.timing.bench",
            "--device",
            "cuda",
            "--dtype",
            "bfloat16",
            "--D",
            "128",
            "--T",
            "1024",
            "4096",
            "16384",
            "--backward",
            "--json",
            "benchmarks/gpu_backward_results.json",
        ],
        [
            sys.executable,
            "-m",
            "mha_course.kernels.gpu_report",
            "--arch",
            arch if arch in ("sm_80", "sm_90", "sm_100") else "sm_90",
            "--json",
            "benchmarks/gpu_report.json",
            "--quiet",
        ],
    ]
    sections = [f"\n## GPU run, {stamp}\n\n{header}\n"]
    status = 0
    for command in steps:
        code, output = _run(command)
        status = status or code
        shown = " ".join(c if c != sys.executable else "python" for c in command)
        sections.append(f"\n`{shown}` (exit {code}):\n\n```\n{output.strip()[-6000:]}\n```\n")
    with open(HERE / "RESULTS.md", "a", encoding="utf-8") as handle:
        handle.write("".join(sections))
    print(f"recorded in {HERE / 'RESULTS.md'}")
    return status


if __name__ == "__main__":
    sys.exit(main())
