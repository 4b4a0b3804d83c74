"""What attention costs: FLOPs, bytes, and honest measurements of time and peak memory.

Counting. Scaled dot-product attention is two matrix products per head, each 2*T*S*D FLOPs
(a multiply and an add per term):

    scores  = Q K^T   (T, D) @ (D, S)  -> 2*T*S*D
    out     = P V     (T, S) @ (S, D)  -> 2*T*S*D
    forward FLOPs = 4 * B * H * T * S * D     (= 4*B*H*T^2*D in self-attention)

The softmax adds O(B*H*T*S) exponentials and divisions, which are not counted (as in FlashAttention's
papers); causal attention computes about half the pairs and is counted as half.

Memory. A naive implementation materializes the (B, H, T, S) score and weight matrices, so its extra
memory grows like T*S; a tiled (FlashAttention-style) one keeps O(T) running statistics instead.

Measuring.
- :func:`time_ms` runs warm-up calls, then times ``repeats`` calls and returns the *median* in
  milliseconds (the median ignores the odd run slowed by another process); on CUDA it synchronizes.
- :func:`peak_memory_mib` measures the peak memory a call adds on top of what was allocated before it
  (its output included). On CUDA: ``torch.cuda.max_memory_allocated`` after resetting the peak. On a
  Linux CPU: the process's peak resident set size (``VmHWM``), reset to the current size through
  ``/proc/self/clear_refs`` just before the call, minus the resident size before the call. Memory
  that the C allocator (glibc) keeps after a free would be reused without growing the resident size
  and so hide allocations; this module therefore fixes glibc's mmap threshold at 128 KiB when it is
  imported (large buffers then go straight back to the OS when freed) and calls ``malloc_trim``
  before each measurement. Elsewhere (macOS, Windows) it returns ``None``.
"""

from __future__ import annotations

import ctypes
import math
import statistics
import time
from collections.abc import Callable, Sequence

import torch

from ..validation import require_non_negative_ints

MIB = 2**20
_MMAP_THRESHOLD_FIXED = False


def attention_flops(B: int, H: int, T: int, D: int, S: int | None = None, causal: bool = False) -> float:
    """Forward FLOPs of attention, 4*B*H*T*S*D (two matmuls of 2*T*S*D per head), halved when causal.

    Args:
        B, H, T, D: batch, heads, queries, head dim; S: keys (default T).
        causal: count only the (about) half of the pairs a causal mask keeps.

    Raises:
        ValueError: a size is negative or not an int.
    """
    S = T if S is None else S
    require_non_negative_ints(B=B, H=H, T=T, S=S, D=D)
    total = 4.0 * B * H * T * S * D
    return total / 2 if causal else total


def attention_memory_bytes(
    B: int, H: int, T: int, D: int, S: int | None = None, dtype: torch.dtype = torch.float32
) -> dict[str, int]:
    """Analytic memory of one attention call, in bytes.

    Returns a dict with:
        ``inputs``: q (B, H, T, D) + k, v (B, H, S, D);
        ``output``: out (B, H, T, D);
        ``weights``: one (B, H, T, S) matrix, what a naive implementation must hold (it holds a few:
        scores, exponentials, weights);
        ``tiled_stats``: the running max and sum, 2 * (B, H, T) float32, what a tiled one holds
        beyond its output (plus one block of scores per worker, independent of T).

    Raises:
        ValueError: a size is negative or not an int.
    """
    S = T if S is None else S
    require_non_negative_ints(B=B, H=H, T=T, S=S, D=D)
    item = torch.empty((), dtype=dtype).element_size()
    return {
        "inputs": (B * H * T * D + 2 * B * H * S * D) * item,
        "output": B * H * T * D * item,
        "weights": B * H * T * S * item,
        "tiled_stats": 2 * B * H * T * 4,
    }


def time_ms(
    fn: Callable[[], object], repeats: int = 5, warmup: int = 1, device: torch.device | str | None = None
) -> float:
    """Median wall time of ``fn()`` in milliseconds, after ``warmup`` untimed calls.

    Args:
        fn: a callable with no arguments (wrap the call in a lambda).
        repeats: timed calls (>= 1); the median is returned.
        warmup: untimed calls first (first calls pay for allocation, autotuning, compilation).
        device: when it is a CUDA device, the GPU is synchronized around each call.

    Raises:
        ValueError: repeats < 1 or warmup < 0.
    """
    if repeats < 1 or warmup < 0:
        raise ValueError(f"need repeats >= 1 and warmup >= 0, got repeats={repeats}, warmup={warmup}")
    cuda = device is not None and torch.device(device).type == "cuda"
    for _ in range(warmup):
        fn()
    times = []
    for _ in range(repeats):
        if cuda:
            torch.cuda.synchronize(device)
        start = time.perf_counter()
        fn()
        if cuda:
            torch.cuda.synchronize(device)
        times.append((time.perf_counter() - start) * 1e3)
    return statistics.median(times)


def cpu_peak_memory_supported() -> bool:
    """True where :func:`peak_memory_mib` can measure CPU memory (Linux with a writable clear_refs)."""
    try:
        with open("/proc/self/clear_refs", "w") as f:
            f.write("5")
        return _status_kib("VmHWM:") is not None
    except OSError:
        return False


def peak_memory_mib(fn: Callable[[], object], device: torch.device | str = "cpu", *, repeats: int = 1) -> float | None:
    """Peak memory that one call of ``fn()`` adds, in MiB (its output counts; freed temporaries too).

    Call ``fn`` once before (a warm-up) so one-time allocations are not counted. See the module
    docstring for how CPU memory is measured; returns ``None`` where that is not possible.
    CPU figures have a resolution of a page (4 KiB) and include other threads' allocations
    made during the call.

    Args:
        repeats: measured calls (>= 1); the smallest reading is returned. Another thread's
            allocations during a call add to its reading, so the smallest is nearest the call's own
            peak (memory another thread frees during a call would lower a reading instead).

    Raises:
        TypeError: repeats is not an int.
        ValueError: repeats < 1.
    """
    if isinstance(repeats, bool) or not isinstance(repeats, int):
        raise TypeError(f"repeats must be an int, got {type(repeats).__name__} {repeats!r}")
    if repeats < 1:
        raise ValueError(f"need repeats >= 1, got repeats={repeats}")
    device = torch.device(device)
    if device.type != "cuda" and (device.type != "cpu" or not cpu_peak_memory_supported()):
        return None
    return min(_one_peak_mib(fn, device) for _ in range(repeats))


def _one_peak_mib(fn: Callable[[], object], device: torch.device) -> float:
    """One reading of :func:`peak_memory_mib` on a device where it can be measured."""
    if device.type == "cuda":
        torch.cuda.synchronize(device)
        before = torch.cuda.memory_allocated(device)
        torch.cuda.reset_peak_memory_stats(device)
        fn()
        torch.cuda.synchronize(device)
        return (torch.cuda.max_memory_allocated(device) - before) / MIB
    _fix_mmap_threshold()
    _release_free_heap()
    before = _status_kib("VmRSS:")
    with open("/proc/self/clear_refs", "w") as f:
        f.write("5")  # "5" resets the peak RSS (VmHWM) to the current RSS
    fn()
    peak = _status_kib("VmHWM:")
    return max(0, peak - before) / 1024


def loglog_slope(xs: Sequence[float], ys: Sequence[float]) -> float:
    """Least-squares slope of log(y) against log(x): the exponent p in y ~ c * x^p.

    Raises:
        ValueError: fewer than two points, lengths differ, or a value is not positive.
    """
    if len(xs) != len(ys) or len(xs) < 2:
        raise ValueError(f"need two or more (x, y) pairs of equal length, got {len(xs)} xs and {len(ys)} ys")
    if min(xs) <= 0 or min(ys) <= 0:
        raise ValueError("log-log slope needs positive values")
    lx = [math.log(x) for x in xs]
    ly = [math.log(y) for y in ys]
    mx, my = statistics.fmean(lx), statistics.fmean(ly)
    sxx = sum((a - mx) ** 2 for a in lx)
    if sxx == 0:
        raise ValueError("all x values are equal; the slope is undefined")
    return sum((a - mx) * (b - my) for a, b in zip(lx, ly, strict=True)) / sxx


def _status_kib(field: str) -> int | None:
    try:
        with open("/proc/self/status") as f:
            for line in f:
                if line.startswith(field):
                    return int(line.split()[1])
    except OSError:
        return None
    return None


def _libc():
    try:
        return ctypes.CDLL("libc.so.6")
    except OSError:
        return None  # not glibc: measurements may undercount reused blocks


def _fix_mmap_threshold() -> None:
    """Pin glibc's mmap threshold (M_MMAP_THRESHOLD = -3) so freed large blocks leave the RSS."""
    global _MMAP_THRESHOLD_FIXED
    libc = _libc()
    if not _MMAP_THRESHOLD_FIXED and libc is not None and hasattr(libc, "mallopt"):
        libc.mallopt(-3, 128 * 1024)
    _MMAP_THRESHOLD_FIXED = True


def _release_free_heap() -> None:
    """Give free heap pages back to the OS (malloc_trim), so reusing them shows up in the RSS again."""
    libc = _libc()
    if libc is not None and hasattr(libc, "malloc_trim"):
        libc.malloc_trim(0)


_fix_mmap_threshold()  # at import, before large tensors come and go

__all__ = [
    "attention_flops",
    "attention_memory_bytes",
    "time_ms",
    "peak_memory_mib",
    "cpu_peak_memory_supported",
    "loglog_slope",
    "MIB",
]
