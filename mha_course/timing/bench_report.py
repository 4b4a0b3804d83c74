"""The benchmark's records as a table, as quiet-against-loaded ratios side by side, and as a plot."""

from __future__ import annotations

import platform

import torch

#: Every record gets vs_<baseline> = baseline ms / ms for each of these that ran in the same run.
BASELINES = {
    "cpu": ("torch.sdpa[FLASH_ATTENTION]",),
    "cuda": ("torch.sdpa[FLASH_ATTENTION]", "torch.sdpa[CUDNN_ATTENTION]"),
}


def add_ratios(records: list[dict], device: str) -> None:
    """Add ``vs_<baseline>`` = baseline_ms / ms to each record (same T, causal, background load); above 1 is faster."""
    for base in BASELINES[device]:
        times = {(r["T"], r["causal"], r.get("background_load", 0)): r["ms"] for r in records if r["impl"] == base}
        for r in records:
            key = (r["T"], r["causal"], r.get("background_load", 0))
            r[f"vs_{base}"] = round(times[key] / r["ms"], 3) if key in times else None


def format_table(records: list[dict], device: str) -> str:
    """A plain-text table, one row per record, with the ratio columns."""
    bases = [b for b in BASELINES[device] if any(r["impl"] == b for r in records)]
    loaded = any(r.get("background_load") for r in records)  # then two more columns: load and other load
    head = ["T", "causal", "impl", "ms", "TFLOP/s", "peak MiB", "max|err|"] + [
        f"x {b.split('[')[-1].rstrip(']')}" for b in bases
    ]
    head[2:2] = ["load", "other"] if loaded else []
    rows = [head]
    for r in records:
        peak = "n/a" if r["peak_mib"] is None else f"{r['peak_mib']:.1f}"
        ratios = ["-" if r.get(f"vs_{b}") is None else f"{r[f'vs_{b}']:.2f}" for b in bases]
        other = "n/a" if r.get("other_load") is None else f"{r['other_load']:.2f}"
        rows.append(
            [
                str(r["T"]),
                str(r["causal"]),
                *([str(r.get("background_load", 0)), other] if loaded else []),
                r["impl"],
                f"{r['ms']:.2f}",
                f"{r['tflops']:.3f}",
                peak,
                f"{r['max_abs_err']:.1e}",
                *ratios,
            ]
        )
    name_col = head.index("impl")
    widths = [max(len(row[i]) for row in rows) for i in range(len(head))]
    lines = [
        "  ".join(
            cell.ljust(w) if i == name_col else cell.rjust(w)
            for i, (cell, w) in enumerate(zip(row, widths, strict=True))
        )
        for row in rows
    ]
    lines.insert(1, "-" * len(lines[0]))
    note = "x BASELINE = baseline ms / ms (above 1: faster than torch's SDPA with that backend, same run)"
    if loaded:
        note += (
            "\nload = busy processes started beside the benchmark; other = cores busy with other work "
            "while it was timed"
        )
    return "\n".join(lines + [note])


def format_load_summary(records: list[dict], device: str) -> str:
    """Each implementation's ratio to the first baseline at every background load, side by side.

    One row per (impl, T, causal); "" when the records hold a single load (nothing to compare).
    """
    loads = sorted({r.get("background_load", 0) for r in records})
    base = next((b for b in BASELINES[device] if any(r["impl"] == b for r in records)), None)
    if len(loads) < 2 or base is None:
        return ""
    ratio = {(r["impl"], r["T"], r["causal"], r.get("background_load", 0)): r.get(f"vs_{base}") for r in records}
    keys = list(dict.fromkeys((r["impl"], r["T"], r["causal"]) for r in records if r["impl"] != base))
    head = ["impl", "T", "causal"] + [("quiet" if n == 0 else f"load {n}") for n in loads]
    rows = [head] + [
        [name, str(T), str(causal)]
        + ["-" if ratio.get((name, T, causal, n)) is None else f"{ratio[(name, T, causal, n)]:.2f}" for n in loads]
        for name, T, causal in keys
    ]
    widths = [max(len(row[i]) for row in rows) for i in range(len(head))]
    lines = [
        "  ".join(
            cell.ljust(w) if i == 0 else cell.rjust(w) for i, (cell, w) in enumerate(zip(row, widths, strict=True))
        )
        for row in rows
    ]
    lines.insert(1, "-" * len(lines[0]))
    others = []
    for n in loads:  # how quiet the machine was apart from the benchmark and its helpers
        seen = [
            r["other_load"] for r in records if r.get("background_load", 0) == n and r.get("other_load") is not None
        ]
        others.append(f"{'quiet' if n == 0 else f'load {n}'} {max(seen):.2f}" if seen else "")
    others = [o for o in others if o]
    return "\n".join(
        [f"x {base.split('[')[-1].rstrip(']')} at each background load (busy processes), same run:"]
        + lines
        + (["most cores busy with other work while timed: " + ", ".join(others)] if others else [])
    )


def plot_records(records: list[dict], path: str, title: str = "") -> None:
    """Save time and peak memory against T (log-log), one line per implementation and causal mode."""
    import matplotlib

    if matplotlib.get_backend().lower() not in ("agg", "pdf", "svg"):
        matplotlib.use("Agg")  # the CLI draws straight to a file
    import matplotlib.pyplot as plt

    fig, (ax_t, ax_m) = plt.subplots(1, 2, figsize=(12, 4.5))
    names = sorted({r["impl"] for r in records})
    colors = {name: f"C{i % 10}" for i, name in enumerate(names)}  # one colour per implementation
    for name, causal in sorted({(r["impl"], r["causal"]) for r in records}):
        rows = sorted((r for r in records if r["impl"] == name and r["causal"] == causal), key=lambda r: r["T"])
        style = dict(ls="--" if causal else "-", marker="s" if causal else "o", color=colors[name])
        label = f"{name}{' causal' if causal else ''}"
        ax_t.plot([r["T"] for r in rows], [r["ms"] for r in rows], label=label, **style)
        mem = [(r["T"], r["peak_mib"]) for r in rows if r["peak_mib"]]
        if mem:
            ax_m.plot(*zip(*mem, strict=True), label=label, **style)
    for ax, ylabel in ((ax_t, "median time (ms)"), (ax_m, "peak extra memory (MiB)")):
        ax.set_xscale("log", base=2)
        ax.set_yscale("log")
        ax.set_xlabel("sequence length T")
        ax.set_ylabel(ylabel)
        ax.grid(True, which="both", alpha=0.3)
    ax_t.legend(fontsize=7)
    fig.suptitle(title, fontsize=9)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def environment(device: str) -> dict[str, str]:
    """Versions and hardware named in the header of every run."""
    import numpy as np

    env = {
        "python": platform.python_version(),
        "torch": torch.__version__,
        "numpy": np.__version__,
        "platform": platform.platform(),
        "device": device,
        "torch threads": str(torch.get_num_threads()),
    }
    if device == "cuda":
        env["gpu"] = torch.cuda.get_device_name()
        env["cuda"] = str(torch.version.cuda)
        env["cudnn"] = str(torch.backends.cudnn.version())
    else:
        env["cpu"] = _cpu_name()
        # The widest vector instructions torch's CPU kernels use (AVX2, AVX512, ...): ratios against
        # torch's fused kernel differ between them.
        env["cpu capability"] = torch.backends.cpu.get_cpu_capability()
    try:
        import triton

        env["triton"] = triton.__version__
    except ImportError:
        pass
    return env


def dtype_name(dtype: torch.dtype) -> str:
    return str(dtype).removeprefix("torch.")


def _cpu_name() -> str:
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown"
