"""The course's Triton kernels by name, as plain data: the jitted function, its configs, its example launch.

A kernel module registers its kernels at its end with :func:`register`: :mod:`.forward` the forward,
:mod:`.backward` dK/dV and dQ (``import mha_course.kernels`` registers all three); the launchers and :mod:`mha_course.kernels.gpu_report` then read the same
entries, so the report compiles exactly the kernels, configs and arguments a launch uses::

    name     kernel                 defined in   tile of one loop iteration      matmuls per tile
    forward  _flash_forward_kernel  forward.py   BLOCK_M queries x BLOCK_N keys  2 (QK^T, PV)
    dkdv     _dkdv_kernel           backward.py  BLOCK_N keys x BLOCK_M queries  4 (K Q^T, P^T dO, V dO^T, dS^T Q)
    dq       _dq_kernel             dq.py        BLOCK_M queries x BLOCK_N keys  3 (Q K^T, dO V^T, dS K)

How a config travels: a kernel module writes its :class:`~.config_table.ConfigTable` (data) and
registers it in a :class:`KernelEntry`; :func:`autotuned` gives the autotuner every shape the table
ships for this GPU (:func:`shipped`) and prunes them per launch to the table's row
(:meth:`KernelEntry.configs`); :func:`mha_course.kernels.gpu_report.sweep` compiles the same rows.
:func:`compile_as_launched` compiles an entry for any GPU target on a CPU with Triton's public
``triton.compile``, specialised as Triton specialises a contiguous launch (:func:`launch_signature`).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch

from .config_table import ConfigTable, Shape
from .runtime import ON_GPU, triton


@dataclass(frozen=True)
class KernelEntry:
    """One kernel as its launcher calls it."""

    name: str
    kernel: Any  # the triton.jit function
    table: ConfigTable  # the shapes shipped per GPU, head-dim range and mask
    # The kernel module's function that builds a launch's (positional args, constexprs) for
    # contiguous (B, H, T, D) q, k, v and a mask, exactly as its launcher does.
    example_launch: Callable[[torch.Tensor, torch.Tensor, torch.Tensor, bool], tuple[tuple, dict]]
    products: int  # matmuls per tile of scores, each BLOCK_M * BLOCK_N * D multiply-adds

    def configs(self, gpu: int, head_dim: int, causal: bool) -> list:
        """The triton.Configs shipped for one launch: GPU ``gpu`` (e.g. 90), ``max(D, Dv)``, the mask."""
        return [as_config(shape) for shape in self.table.select(gpu, head_dim, causal)]

    def tile(self, config) -> tuple[int, int]:
        """(BLOCK_M, BLOCK_N) of a config: the scores one iteration of the kernel's loop handles."""
        return config.kwargs["BLOCK_M"], config.kwargs["BLOCK_N"]


# Each kernel by name (its configs per GPU, its launch arguments), filled in as the kernel modules are imported.
REGISTRY: dict[str, KernelEntry] = {}
# The example launch of :func:`compile_as_launched`: contiguous (B, H, T, D) tensors. Sizes matter only through
# Triton's specialisation (divisible by 16, equal to 1); T = S = 1024 and H = 16 look like a training launch.
EXAMPLE_B, EXAMPLE_H, EXAMPLE_T = 2, 16, 1024


def register(entry: KernelEntry) -> KernelEntry:
    """Add ``entry`` under its name (a kernel module calls this once per kernel, at its end)."""
    REGISTRY[entry.name] = entry
    return entry


def as_config(shape: Shape):
    """A (BLOCK_M, BLOCK_N, warps, stages) shape as the triton.Config the autotuner takes."""
    block_m, block_n, warps, stages = shape
    return triton.Config({"BLOCK_M": block_m, "BLOCK_N": block_n}, num_warps=warps, num_stages=stages)


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


def shipped(entry: KernelEntry, gpu: int) -> list:
    """Every config of ``entry`` shipped for GPU ``gpu`` (e.g. 90), of every head-dim range and mask."""
    return [as_config(shape) for shape in entry.table.shipped(gpu)]


def prune_to_launch(entry: KernelEntry, gpu: int, configs: list, launch: dict[str, Any]) -> list:
    """Of ``configs``, those ``entry``'s table ships for the launch's head dims and mask on ``gpu``."""
    head_dim = max(launch["D"], launch["DV"])
    wanted = {describe(c) for c in entry.configs(gpu, head_dim, bool(launch["CAUSAL"]))}
    return [c for c in configs if describe(c) in wanted]


def autotuned(entry: KernelEntry, key: list[str]):
    """The entry's kernel behind Triton's autotuner: this GPU's configs, pruned to the launch's row."""
    gpu = capability()

    def early_prune(configs, named_args, **kwargs):  # Triton's hook: the launch's arguments by name
        return prune_to_launch(entry, gpu, configs, {**named_args, **kwargs})

    pruning = {"early_config_prune": early_prune}
    return triton.autotune(configs=shipped(entry, gpu), key=key, prune_configs_by=pruning)(entry.kernel)


def describe(config) -> tuple:
    """A config as a hashable key: (sorted constexprs, warps, stages)."""
    return (tuple(sorted(config.kwargs.items())), config.num_warps, config.num_stages)


def example_inputs(dtype: str, head_dim: int):
    """Contiguous CPU (B, H, T, D) q, k, v for the example launch (never written; only shapes, strides, alignment)."""
    shape = (EXAMPLE_B, EXAMPLE_H, EXAMPLE_T, head_dim)
    return [torch.empty(shape, dtype=getattr(torch, dtype)) for _ in range(3)]


# Triton's names of the element types a kernel's tensors may have (pointer types are "*" + the name).
_POINTER_TYPES = {torch.float16: "fp16", torch.bfloat16: "bf16", torch.float32: "fp32"}


def launch_signature(kernel, args: tuple, constants: dict[str, Any]):
    """What a launch of ``kernel`` with ``args`` (positional) and ``constants`` (its constexprs) specialises:
    (signature: name -> Triton type or "constexpr", constexprs: name -> value, attrs: (index,) -> hints).

    Triton's rules for a launch, as its ahead-of-time compiler (``triton/tools/compile.py``) writes them:
    an integer equal to 1 becomes a constexpr, an integer divisible by 16 and a pointer aligned to 16
    bytes get the hint ``tt.divisibility = 16``; an int is "i32" when it fits, a float "fp32".
    """
    names = list(kernel.arg_names)
    if len(args) + len(constants) != len(names) or set(constants) != set(names[len(args) :]):
        raise ValueError(
            f"expected the arguments {names} (positional, then the constexprs), "
            f"got {len(args)} positional and {sorted(constants)}"
        )
    signature = dict.fromkeys(names, "constexpr")  # in the kernel's order; the positional ones below
    values = dict(constants)
    attrs: dict[tuple[int, ...], list] = {}
    for index, (name, arg) in enumerate(zip(names, args, strict=False)):
        if isinstance(arg, torch.Tensor):
            if arg.dtype not in _POINTER_TYPES:
                raise TypeError(f"{name}: expected a tensor of {list(_POINTER_TYPES)}, got {arg.dtype}")
            signature[name], divisible = "*" + _POINTER_TYPES[arg.dtype], arg.data_ptr() % 16 == 0
        elif isinstance(arg, bool) or not isinstance(arg, int | float):
            raise TypeError(f"{name}: expected a tensor, an int or a float, got {type(arg).__name__}")
        elif isinstance(arg, float):
            signature[name] = "fp32"
            continue  # floats are never specialised
        elif arg == 1:
            values[name] = 1  # stays "constexpr"
            continue
        else:
            signature[name], divisible = ("i32" if -(2**31) <= arg < 2**31 else "i64"), arg % 16 == 0
        attrs[(index,)] = [["tt.divisibility", 16]] if divisible else []
    return signature, values, attrs


def compile_as_launched(entry: KernelEntry, gpu: int, dtype: str, head_dim: int, config, causal: bool):
    """Compile ``entry``'s kernel for GPU ``gpu`` (e.g. 90) as a contiguous launch with ``config`` would, with
    Triton's public compiler (``triton.compile`` of an ``ASTSource``) and ptxas.

    Returns (the CompiledKernel, the signature: name -> Triton type, "constexpr" for constants).
    """
    from triton.backends.compiler import GPUTarget
    from triton.compiler import ASTSource

    q, k, v = example_inputs(dtype, head_dim)
    args, constants = entry.example_launch(q, k, v, causal)
    signature, values, attrs = launch_signature(entry.kernel, args, dict(constants, **config.kwargs))
    source = ASTSource(fn=entry.kernel, signature=signature, constexprs=values, attrs=attrs)
    options = {"num_warps": config.num_warps, "num_stages": config.num_stages}
    compiled = triton.compile(source, target=GPUTarget("cuda", gpu, 32), options=options)
    return compiled, signature
