"""The course's Triton kernels by name: the jitted function, its autotune configs per GPU, its launch arguments.

The launchers (:mod:`.forward`, :mod:`.backward`) and :mod:`mha_course.kernels.gpu_report` read the same
entries, so the report compiles exactly the kernels, configs and arguments a launch uses::

    name      kernel                   tile of one loop iteration     matmuls per tile
    forward   _flash_forward_kernel    BLOCK_M queries x BLOCK_N keys  2 (QK^T, PV)
    dkdv      _dkdv_kernel             BLOCK_N keys x BLOCK_M queries  4 (K Q^T, P^T dO, V dO^T, dS^T Q)
    dq        _dq_kernel               BLOCK_M queries x BLOCK_N keys  3 (Q K^T, dO V^T, dS K)

Each module registers its kernels when imported (``import mha_course.kernels`` registers all three).
:func:`compile_as_launched` compiles an entry for any GPU target, on a CPU, exactly as a contiguous
launch specialises it (Triton's own binder on the launcher's own arguments).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch

from .runtime import ON_GPU, triton


@dataclass(frozen=True)
class KernelSpec:
    """One kernel as its launcher calls it."""

    name: str
    kernel: Any  # the triton.jit function
    configs: Callable[[int, int, bool], list]  # (compute capability, e.g. 90; head dim; causal) -> the Configs shipped
    example: Callable[..., tuple[tuple, dict]]  # (q4, k4, v4, causal) -> (positional args, constexprs) of a launch
    products: int  # matmuls per tile of scores, each BLOCK_M * BLOCK_N * D multiply-adds

    def tile(self, config) -> tuple[int, int]:
        """(BLOCK_M, BLOCK_N) of a config: the scores one iteration of the kernel's loop handles."""
        return config.kwargs["BLOCK_M"], config.kwargs["BLOCK_N"]


# Each kernel by name (its configs per GPU, its launch arguments), filled in as the kernel modules are imported.
REGISTRY: dict[str, KernelSpec] = {}
# The example launch of :func:`compile_as_launched`: contiguous (B, H, T, D) tensors. Sizes matter only through
# Triton's specialisation (divisible by 16, equal to 1); T = S = 1024 and H = 16 look like a training launch.
EXAMPLE_B, EXAMPLE_H, EXAMPLE_T = 2, 16, 1024


def register(spec: KernelSpec) -> KernelSpec:
    REGISTRY[spec.name] = spec
    return spec


def constexprs(D: int, Dv: int, causal: bool, dtype: torch.dtype) -> dict[str, Any]:
    """The constexpr arguments every kernel takes, from the problem: head dims padded to a power of two >= 16,
    the mask, and the matmul precision (float32 inputs: exact "ieee"; fp16/bf16 inputs ignore it)."""
    return dict(
        D=D,
        DV=Dv,
        BLOCK_D=max(16, triton.next_power_of_2(D)),
        BLOCK_DV=max(16, triton.next_power_of_2(Dv)),
        CAUSAL=causal,
        PRECISION="ieee" if dtype == torch.float32 else "tf32",
    )


def capability() -> int:
    """This machine's GPU as 80, 90, ... (0 without a GPU)."""
    if not ON_GPU:
        return 0
    major, minor = torch.cuda.get_device_capability()
    return 10 * major + minor


def shipped(spec: KernelSpec, gpu: int) -> list:
    """Every config of ``spec`` shipped for GPU ``gpu`` (e.g. 90), any head dim and mask, without repeats."""
    every = {describe(c): c for d in (64, 128) for m in (False, True) for c in spec.configs(gpu, d, m)}
    return list(every.values())


def pruner(spec: KernelSpec, gpu: int):
    """The autotuner's early prune: of the configs, those shipped for the launch's head dim and mask on ``gpu``."""

    def prune(configs, named_args, **kwargs):
        launch = {**named_args, **kwargs}
        wanted = {describe(c) for c in spec.configs(gpu, max(launch["D"], launch["DV"]), bool(launch["CAUSAL"]))}
        return [c for c in configs if describe(c) in wanted] or configs

    return prune


def autotuned(spec: KernelSpec, key: list[str]):
    """The spec's kernel behind Triton's autotuner, with this GPU's configs, pruned to the launch's head dim and mask."""
    gpu = capability()
    return triton.autotune(
        configs=shipped(spec, gpu), key=key, prune_configs_by={"early_config_prune": pruner(spec, gpu)}
    )(spec.kernel)


def describe(config) -> tuple:
    """A config as a hashable key: (sorted constexprs, warps, stages)."""
    return (tuple(sorted(config.kwargs.items())), config.num_warps, config.num_stages)


def example_inputs(dtype: str, head_dim: int):
    """Contiguous CPU (B, H, T, D) q, k, v for the example launch (never written; only shapes, strides, alignment)."""
    shape = (EXAMPLE_B, EXAMPLE_H, EXAMPLE_T, head_dim)
    return [torch.empty(shape, dtype=getattr(torch, dtype)) for _ in range(3)]


def compile_as_launched(spec: KernelSpec, gpu: int, dtype: str, head_dim: int, config, causal: bool):
    """Compile ``spec``'s kernel for GPU ``gpu`` (e.g. 90) as a contiguous launch with ``config`` would: Triton's binder
    specialises the launcher's own arguments, Triton's options and ptxas build the cubin.

    Returns (the CompiledKernel, the signature Triton derived: name -> type, "constexpr" for constants).
    """
    import triton
    from triton.backends.compiler import GPUTarget
    from triton.compiler import ASTSource, make_backend
    from triton.runtime.jit import create_function_from_signature

    target = GPUTarget("cuda", gpu, 32)
    backend = make_backend(target)
    args, constants = spec.example(*example_inputs(dtype, head_dim), causal)
    kwargs = dict(constants, **config.kwargs, num_warps=config.num_warps, num_stages=config.num_stages)
    jitted = spec.kernel
    binder = create_function_from_signature(jitted.signature, jitted.params, backend)
    bound, specialization, options = binder(*args, **kwargs)
    options, signature, constexprs, attrs = jitted._pack_args(backend, kwargs, bound, specialization, options)
    source = ASTSource(fn=jitted, signature=signature, constexprs=constexprs, attrs=attrs)
    return triton.compile(source, target=target, options=options.__dict__), signature
