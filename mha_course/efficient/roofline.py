"""A roofline model of attention on GPUs the learner may not have. A *model*: it predicts, it measures nothing.

A kernel is bound by whichever runs out first: arithmetic (FLOPs / peak FLOP/s) or memory traffic
(bytes / peak bandwidth). Its *arithmetic intensity* I = FLOPs / byte decides which; the GPU's
*ridge point* peak_flops / peak_bandwidth is where the two meet::

    time >= max(FLOPs / peak_flops, bytes / peak_bandwidth)
    compute-bound when I > ridge, memory-bound when I < ridge

For fused (FlashAttention-style) attention the (T, S) matrix never reaches memory. Its *ideal* bytes
are the inputs and the output once each:

    prefill (T queries, S keys):  FLOPs = 4 B H T S D (halved when causal)
                                  bytes >= (B H T D + 2 B H_kv S D + B H T D) * element size

That is a lower bound. The kernel holds one block of ``block_m`` queries on chip and streams all of K and
V past it, so each query block reads K and V again: ceil(T / block_m) passes, Theta(T^2 D^2 / M) HBM
traffic for on-chip memory M (Dao et al., 2022, Theorem 2). The ideal figure assumes the GPU's L2 cache
serves every reload; with no reuse at all (``block_m=...``) the intensity of a long prefill tends to
``block_m`` FLOPs per byte (2-byte elements), and T / 2 is the upper bound.
    one decoding step (T = 1):    FLOPs = 4 B H S D,  bytes ~ 2 B H_kv S D * element size (the KV cache)

A materialised (unfused) attention also writes the (T, S) scores, reads them back for the softmax, writes
the weights and reads them again for the product with V: 4 B H T S more elements, so its intensity stays
near D / 2 FLOPs per byte (2-byte elements) however long the sequence, while the fused kernel's grows with T.
A decoding step does about 1 FLOP per byte of cache in MHA (H_kv = H, 2-byte elements): far below any GPU's
ridge (hundreds of FLOPs per byte), which is why decoding is memory-bound and why multi-query and
grouped-query attention (fewer K/V heads, H_kv < H) make it faster in proportion. Peak figures are the
vendors' datasheet numbers for dense bf16 tensor-core math and memory bandwidth; kernels reach a fraction.
"""

from __future__ import annotations

from dataclasses import dataclass

from ..validation import require_positive_ints
from .cost import attention_flops


@dataclass(frozen=True)
class GPU:
    """Datasheet peaks of one GPU (dense bf16 tensor-core FLOP/s, memory bandwidth in bytes/s)."""

    name: str
    bf16_flops: float
    bandwidth: float
    source: str

    @property
    def ridge(self) -> float:
        """FLOPs per byte above which a kernel is compute-bound on this GPU."""
        return self.bf16_flops / self.bandwidth


# Each GPU the chapters predict for: its dense bf16 FLOP/s and memory bandwidth, with the datasheet they come from.
GPUS = {
    "H100 SXM": GPU(
        "H100 SXM",
        989.4e12,
        3.35e12,
        "NVIDIA H100 Tensor Core GPU datasheet: 989 TFLOP/s bf16 dense (1979 with sparsity), 3.35 TB/s HBM3",
    ),
    "A100 SXM 80GB": GPU(
        "A100 SXM 80GB",
        312e12,
        2.039e12,
        "NVIDIA A100 Tensor Core GPU datasheet: 312 TFLOP/s bf16 dense (624 with sparsity), 2039 GB/s HBM2e",
    ),
    "L4": GPU(
        "L4",
        121e12,
        300e9,
        "NVIDIA L4 Tensor Core GPU datasheet: 242 TFLOP/s bf16 with sparsity (121 dense), 300 GB/s GDDR6",
    ),
}


@dataclass(frozen=True)
class Prediction:
    """What the roofline says about one attention call on one GPU."""

    gpu: str
    phase: str  # "prefill" | "prefill, materialised" | "decode"
    flops: float
    bytes: float
    intensity: float  # FLOPs per byte
    ridge: float
    bound: str  # "compute" | "memory"
    time_ms: float  # the roofline's lower bound on the time

    @property
    def compute_ms(self) -> float:
        return self.flops / GPUS[self.gpu].bf16_flops * 1e3

    @property
    def memory_ms(self) -> float:
        return self.bytes / GPUS[self.gpu].bandwidth * 1e3


def _predict(gpu: str, phase: str, flops: float, nbytes: float) -> Prediction:
    if gpu not in GPUS:
        raise ValueError(f"unknown GPU {gpu!r}; known: {', '.join(GPUS)}")
    device = GPUS[gpu]
    intensity = flops / nbytes
    time_s = max(flops / device.bf16_flops, nbytes / device.bandwidth)
    return Prediction(
        gpu,
        phase,
        flops,
        nbytes,
        intensity,
        device.ridge,
        "compute" if intensity > device.ridge else "memory",
        time_s * 1e3,
    )


def prefill(
    gpu: str,
    B: int,
    H: int,
    T: int,
    D: int,
    S: int | None = None,
    num_kv_heads: int | None = None,
    causal: bool = False,
    element_bytes: int = 2,
    fused: bool = True,
    block_m: int | None = None,
) -> Prediction:
    """Attention over T queries and S keys (S = T by default), H query heads, ``num_kv_heads`` K/V heads.

    Bytes: Q and O (B, H, T, D) once each, K and V (B, num_kv_heads, S, D) once each (perfect reuse of
    K and V through the L2 cache); with ``block_m`` (fused only) K and V once per block of ``block_m``
    queries, ceil(T / block_m) times, as a FlashAttention kernel reads them when no reload hits the
    cache; with ``fused=False`` also the (B, H, T, S) scores and weights, each written once and read once.
    FLOPs: 4 B H T S D, halved when causal, but only when fused (a materialised version computes the
    whole (T, S) matrix). Causal with ``block_m``: K/V reads are halved too (blocks above the diagonal
    are skipped).

    Raises:
        ValueError: unknown GPU, a size that is not positive, or ``block_m`` with ``fused=False``.
        TypeError: a size that is not an int.
    """
    S = T if S is None else S
    num_kv_heads = H if num_kv_heads is None else num_kv_heads
    require_positive_ints(B=B, H=H, T=T, D=D, S=S, num_kv_heads=num_kv_heads, element_bytes=element_bytes)
    if block_m is not None:
        require_positive_ints(block_m=block_m)
        if not fused:
            raise ValueError("block_m describes a fused kernel's K/V reloads; got fused=False")
    flops = attention_flops(B, H, T, D, S=S, causal=causal and fused)
    kv_passes = 1 if block_m is None else -(-T // block_m) * (0.5 if causal else 1.0)
    kv_elements = 2 * B * num_kv_heads * S * D * max(kv_passes, 1)  # (B, H_kv, S, D) twice, per pass
    elements = 2 * B * H * T * D + kv_elements + (0 if fused else 4 * B * H * T * S)
    phase = "prefill" if block_m is None else f"prefill, K/V reloaded per {block_m} queries"
    return _predict(gpu, phase if fused else "prefill, materialised", flops, elements * element_bytes)


def decode_step(
    gpu: str, B: int, H: int, S: int, D: int, num_kv_heads: int | None = None, element_bytes: int = 2
) -> Prediction:
    """One new token per sequence attending to a KV cache of S positions (the cache is read once).

    Bytes: the new query and output (B, H, 1, D), and K and V of the cache (B, num_kv_heads, S, D).
    FLOPs: 4 B H S D. With ``num_kv_heads`` = G < H each cached key serves H / G query heads, so the
    intensity is about H / G FLOPs per byte (2-byte elements).

    Raises:
        ValueError: unknown GPU, or a size that is not positive.
        TypeError: a size that is not an int.
    """
    num_kv_heads = H if num_kv_heads is None else num_kv_heads
    require_positive_ints(B=B, H=H, S=S, D=D, num_kv_heads=num_kv_heads, element_bytes=element_bytes)
    flops = attention_flops(B, H, 1, D, S=S)
    nbytes = (2 * B * H * D + 2 * B * num_kv_heads * S * D) * element_bytes
    return _predict(gpu, "decode", flops, nbytes)
