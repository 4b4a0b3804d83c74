"""Guards around the learner's target while a case runs: subclass rejection and the shortcut tripwire.

* :func:`guarded` wraps the target so that an array or tensor *subclass* in what it returns is
  rejected with a message (a subclass could lie about equality; the grader compares plain values
  only). A function target is wrapped; for an ``nn.Module`` class target a global forward hook
  checks what instances of that class return.
* :class:`Tripwire` notices calls to an exercise's ``forbidden`` callables (e.g.
  ``torch.nn.functional.scaled_dot_product_attention``) while a case runs, through three layers:

  1. a ``TorchFunctionMode`` that sees every torch API call, whatever alias it was reached by
     (``F.scaled_dot_product_attention`` and ``torch._C._nn.scaled_dot_product_attention`` are
     the same object);
  2. in the grader's submission process only, module attributes replaced by wrappers before any
     learner code runs (:meth:`Tripwire.install`), which covers non-torch names (e.g. SciPy's)
     and classes (``nn.MultiheadAttention.__init__``/``forward``).

  The mode also matches by *name*, so private and raw-operator routes to the same kernel count:
  ``torch._softmax``, ``torch.ops.aten._softmax`` and ``Tensor.softmax`` are all "softmax", and
  ``torch._scaled_dot_product_attention_math`` or ``torch.ops.aten._scaled_dot_product_flash_attention``
  are all "scaled_dot_product" (:func:`same_family`). The static scan (:mod:`mha_course.grading.static.scan`) also treats
  ``torch.ops``, ``torch._C`` and other private torch names in a submission as tampering.

  ``mha_course`` names are wrapped only where the assignment provides their module; the sandbox
  cannot import the others at all.

Both run in the learner's kernel (the self-check) and in the grader's submission process, so they
give the same verdict. Neither imports torch unless the process already has it.

More in ``docs/design/grader.md`` (mha_course.grading.inside.guard).
"""

from __future__ import annotations

import contextlib
import functools
import importlib
import sys
import types
from collections.abc import Iterator, Sequence
from typing import Any

import numpy as np

from .wire import RejectedOutput


def reject_subclasses(value: Any, depth: int = 0) -> None:
    """Raise RejectedOutput if ``value`` (or an item of a tuple/list/dict in it) is an array/tensor subclass."""
    if depth > 6:
        return
    if isinstance(value, np.ndarray) and type(value) is not np.ndarray:
        raise RejectedOutput(
            f"your code returned {type(value).__module__}.{type(value).__qualname__}, a subclass "
            "of numpy.ndarray; return a plain array (the grader compares plain values only)"
        )
    torch = sys.modules.get("torch")
    if torch is not None and isinstance(value, torch.Tensor) and type(value) not in (torch.Tensor, torch.nn.Parameter):
        raise RejectedOutput(
            f"your code returned {type(value).__module__}.{type(value).__qualname__}, a subclass "
            "of torch.Tensor; return a plain tensor (the grader compares plain values only)"
        )
    if isinstance(value, (tuple, list)):
        for item in value[:10_000]:
            reject_subclasses(item, depth + 1)
    elif isinstance(value, dict):
        for item in list(value.values())[:10_000]:
            reject_subclasses(item, depth + 1)


@contextlib.contextmanager
def guarded(target: Any) -> Iterator[Any]:
    """Yield ``target`` wrapped so that returning an array/tensor subclass raises RejectedOutput."""
    torch = sys.modules.get("torch")
    if isinstance(target, type):
        if torch is None or not issubclass(target, torch.nn.Module):
            yield target
            return

        def hook(module, args, output):
            if isinstance(module, target):
                reject_subclasses(output)

        handle = torch.nn.modules.module.register_module_forward_hook(hook)
        try:
            yield target
        finally:
            handle.remove()
        return
    if not callable(target):
        yield target
        return

    @functools.wraps(target)
    def checked(*args, **kwargs):
        result = target(*args, **kwargs)
        reject_subclasses(result)
        return result

    yield checked


def _resolve(dotted: str, import_missing: bool) -> tuple[Any, str, Any] | None:
    """``"a.b.c"`` -> (owner object, attribute name, value), importing modules only if asked."""
    parts = dotted.split(".")
    for split in range(len(parts) - 1, 0, -1):
        module_name = ".".join(parts[:split])
        module = sys.modules.get(module_name)
        if module is None and import_missing:
            try:
                module = importlib.import_module(module_name)
            except Exception:
                module = None
        if module is None:
            continue
        owner = module
        try:
            for attr in parts[split:]:
                # a module's own dict only: no lazy __getattr__ imports (they may be blocked)
                value = vars(owner)[attr] if isinstance(owner, type(sys)) else getattr(owner, attr)
                owner, prev = value, owner
            return prev, parts[-1], owner
        except Exception:
            return None
    return None


AUTOGRAD = ("torch.autograd", "torch.func")  # forbidden entries meaning "no autograd at all"


def explain(names: Sequence[str], ops: Sequence[str] = ()) -> str:
    """The learner-facing sentence for forbidden calls (names, else the fused ATen operators seen)."""
    if set(names) & set(AUTOGRAD):
        others = sorted(set(names) - set(AUTOGRAD))
        return (
            "this exercise asks you to derive the gradients by hand; your code used autograd ("
            + (f"{', '.join(others)}; " if others else "")
            + "a tensor with requires_grad, torch.autograd or "
            "torch.func), which is not allowed here (0 points for this case)"
        )
    listed = (
        ", ".join(sorted(set(names)))
        if names
        else (f"torch's fused kernel {', '.join(ops)} (it computes what you are asked to write inside it)")
    )
    return (
        f"this exercise asks you to write it yourself; your code called {listed}, which is not allowed "
        "here (0 points for this case)"
    )


def op_name(func: Any) -> str:
    """A torch callable's bare name: ``torch.ops.aten._softmax.default`` -> ``softmax``, ``exp_`` -> ``exp``."""
    name = getattr(func, "__name__", "")
    if not isinstance(name, str):
        return ""
    return name.split(".")[0].strip("_").lower()


def same_family(op: str, forbidden: str) -> bool:
    """True if the torch op named ``op`` (see :func:`op_name`) computes the forbidden callable ``forbidden``.

    Exact name, or a variant of it (``softmax`` ~ ``softmax_backward_data``); a name of three words or
    more (``scaled_dot_product_attention``) also matches any op that contains its first three words
    (``_scaled_dot_product_flash_attention_for_cpu``, ``_scaled_dot_product_attention_math``).
    """
    base = forbidden.rsplit(".", 1)[-1].strip("_").lower()
    if not op or not base:
        return False
    if op == base or op.startswith(base + "_"):
        return True
    words = base.split("_")
    return len(words) >= 3 and "_".join(words[:3]) in op


# torch kernels that compute a forbidden function inside them, under another name
_FUSED_WITH = {
    "softmax": (
        "scaled_dot_product",
        "multi_head_attention",
        "flash_attention",
        "efficient_attention",
        "cudnn_attention",
    ),
}


def fused_with(op: str, forbidden: str) -> bool:
    """True if the torch op named ``op`` is a fused kernel that computes ``forbidden`` inside it.

    ``scaled_dot_product_attention`` (and its flash/math/efficient variants) contains a softmax, so it
    is a softmax shortcut too, whatever it is called.
    """
    base = forbidden.rsplit(".", 1)[-1].strip("_").lower()
    return bool(op) and any(part in op for part in _FUSED_WITH.get(base, ()))


def _requires_grad(value: Any, torch: Any, depth: int = 0) -> bool:
    if isinstance(value, torch.Tensor):
        return bool(value.requires_grad)
    if isinstance(value, (tuple, list)) and depth < 2:
        return any(_requires_grad(v, torch, depth + 1) for v in value[:64])
    return False


class Tripwire:
    """Notices calls to forbidden callables while armed; see the module docstring."""

    def __init__(self) -> None:
        self._armed: frozenset[str] = frozenset()
        self.hits: list[str] = []  # forbidden names called (torch API, wrappers)
        self.ops: list[str] = []  # fused operators that compute a forbidden function inside
        self._by_id: dict[int, str] = {}
        self._installed: list[tuple[Any, str, Any]] = []

    def hit(self, name: str) -> None:
        if name in self._armed and name not in self.hits:
            self.hits.append(name)

    def _index(self, names: set[str], import_missing: bool) -> None:
        for name in names:
            found = _resolve(name, import_missing)
            if found is None:
                continue
            value = found[2]
            self._by_id.setdefault(id(value), name)
            if isinstance(value, type):
                for method in ("__init__", "forward", "__call__"):
                    inner = value.__dict__.get(method)
                    if inner is not None:
                        self._by_id.setdefault(id(inner), name)

    def install(self, names: set[str]) -> None:
        """Replace each forbidden callable by a reporting wrapper (submission process, before learner code).

        Also binds this instance's methods and helpers to itself, so that replacing
        ``Tripwire.hit`` or ``guard.same_family`` afterwards changes nothing for it.
        """
        for method in ("hit", "armed", "_index", "_wrap", "_torch_modes"):
            self.__dict__[method] = types.MethodType(getattr(type(self), method), self)
        self.__dict__["_helpers"] = (op_name, same_family, _requires_grad, explain)
        self._index(names, import_missing=True)
        self._follow_threads()
        for name in sorted(names):
            found = _resolve(name, import_missing=True)  # mha_course modules: only the provided ones import
            if found is None:
                continue
            owner, attr, value = found
            if isinstance(value, type):
                for method in ("__init__", "forward"):
                    inner = value.__dict__.get(method)
                    if inner is not None:
                        setattr(value, method, self._wrap(inner, name))
                        self._installed.append((value, method, inner))
            elif callable(value):
                try:
                    setattr(owner, attr, self._wrap(value, name))
                    self._installed.append((owner, attr, value))
                except (AttributeError, TypeError):
                    pass  # a read-only attribute; the torch modes still see it

    def _follow_threads(self) -> None:
        """Threads started while armed run under the same torch modes (torch's modes are per thread)."""
        import _thread
        import threading

        tripwire, start = self, _thread.start_new_thread

        def start_new_thread(function, args, kwargs=None):
            names = tuple(tripwire._armed)
            if not names or "torch" not in sys.modules:
                return start(function, args, kwargs or {})

            def watched(*a, **k):
                with tripwire._torch_modes(names):
                    return function(*a, **k)

            return start(watched, args, kwargs or {})

        _thread.start_new_thread = start_new_thread
        threading._start_new_thread = start_new_thread  # type: ignore[attr-defined]  # private: typeshed omits it

    def _wrap(self, original: Any, name: str) -> Any:
        tripwire = self

        def wrapper(*args, **kwargs):
            tripwire.hit(name)
            return original(*args, **kwargs)

        functools.update_wrapper(wrapper, original)
        delattr(wrapper, "__wrapped__")  # no handle on the unwatched original
        self._by_id.setdefault(id(wrapper), name)
        return wrapper

    @property
    def tripped(self) -> bool:
        return bool(self.hits or self.ops)

    def explanation(self) -> str:
        return explain(self.hits, self.ops)

    @contextlib.contextmanager
    def armed(self, names: tuple[str, ...] | list[str]) -> Iterator[list[str]]:
        """Within the block, calls to ``names`` are recorded in the yielded list (also ``self.hits``)."""
        self.hits = []
        self.ops = []
        self._armed = frozenset(names)
        if not names:
            yield self.hits
            return
        self._index(set(names), import_missing=False)
        with contextlib.ExitStack() as stack:
            if "torch" in sys.modules:
                stack.enter_context(self._torch_modes(names))
            try:
                yield self.hits
            finally:
                self._armed = frozenset()

    @contextlib.contextmanager
    def _torch_modes(self, names: tuple[str, ...] | list[str]) -> Iterator[None]:
        import torch
        from torch.overrides import TorchFunctionMode

        tripwire = self
        op_name, same_family, _requires_grad, _ = getattr(self, "_helpers", None) or (
            globals()["op_name"],
            globals()["same_family"],
            globals()["_requires_grad"],
            None,
        )
        fused = [n for n in names if n.startswith("torch.") and n.rsplit(".", 1)[-1].strip("_").lower() in _FUSED_WITH]
        by_name = [n for n in names if n.startswith("torch.") and n not in AUTOGRAD]
        no_autograd = [n for n in names if n in AUTOGRAD]
        families: dict[str, str | None] = {}  # op name -> forbidden name (or None), cached

        class FunctionWatch(TorchFunctionMode):
            def __torch_function__(self, func, types, args=(), kwargs=None):
                name = tripwire._by_id.get(id(func))
                if name is None and by_name:
                    op = op_name(func)
                    if op not in families:
                        families[op] = next((n for n in by_name if same_family(op, n)), None)
                    name = families[op]
                    if name is None and fused and op not in tripwire.ops and any(fused_with(op, n) for n in fused):
                        tripwire.ops.append(op)  # e.g. SDPA where a softmax is forbidden
                if name is not None:
                    tripwire.hit(name)
                result = func(*args, **(kwargs or {}))
                if no_autograd and _requires_grad(result, torch):
                    tripwire.hit(no_autograd[0])
                return result

        with FunctionWatch():  # the API object, e.g. torch.nn.functional.scaled_dot_product_attention
            yield
