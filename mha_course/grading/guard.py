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

  Raw operator routes (``torch.ops.aten...``) bypass both; the static scan (:mod:`.scan`) treats
  ``torch.ops`` and ``torch._C`` in a submission as tampering. (A ``TorchDispatchMode`` would see
  them too, but its first use imports torch's compiler stack: about 8 s per process.)

  ``mha_course`` names need no wrapper: the submission process cannot import them at all.

Both run in the learner's kernel (the self-check) and in the grader's submission process, so they
give the same verdict. Neither imports torch unless the process already has it.
"""

from __future__ import annotations

import contextlib
import functools
import importlib
import sys
from collections.abc import Iterator
from typing import Any

import numpy as np

from .wire import RejectedOutput


def reject_subclasses(value: Any, depth: int = 0) -> None:
    """Raise RejectedOutput if ``value`` (or an item of a tuple/list/dict in it) is an array/tensor subclass."""
    if depth > 6:
        return
    if isinstance(value, np.ndarray) and type(value) is not np.ndarray:
        raise RejectedOutput(f"your code returned {type(value).__module__}.{type(value).__qualname__}, a subclass "
                             "of numpy.ndarray; return a plain array (the grader compares plain values only)")
    torch = sys.modules.get("torch")
    if torch is not None and isinstance(value, torch.Tensor) and type(value) not in (torch.Tensor,
                                                                                     torch.nn.Parameter):
        raise RejectedOutput(f"your code returned {type(value).__module__}.{type(value).__qualname__}, a subclass "
                             "of torch.Tensor; return a plain tensor (the grader compares plain values only)")
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


def explain(names: list[str], ops: list[str] = ()) -> str:
    """The learner-facing sentence for forbidden calls (names, else the fused ATen operators seen)."""
    listed = ", ".join(sorted(set(names))) if names else f"torch's fused kernel {', '.join(ops)}"
    return (f"this exercise asks you to write it yourself; your code called {listed}, which is not allowed "
            "here (0 points for this case)")


class Tripwire:
    """Notices calls to forbidden callables while armed; see the module docstring."""

    def __init__(self) -> None:
        self._armed: frozenset[str] = frozenset()
        self.hits: list[str] = []      # forbidden names called (torch API, wrappers)
        self.ops: list[str] = []       # reserved: fused operators seen by name (not used)
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
        """Replace each forbidden callable by a reporting wrapper (submission process, before learner code)."""
        self._index(names, import_missing=True)
        for name in sorted(names):
            if name.startswith("mha_course"):
                continue  # not importable in the submission process at all
            found = _resolve(name, import_missing=True)
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

    def _wrap(self, original: Any, name: str) -> Any:
        tripwire = self

        @functools.wraps(original)
        def wrapper(*args, **kwargs):
            tripwire.hit(name)
            return original(*args, **kwargs)

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
        from torch.overrides import TorchFunctionMode

        tripwire = self

        class FunctionWatch(TorchFunctionMode):
            def __torch_function__(self, func, types, args=(), kwargs=None):
                name = tripwire._by_id.get(id(func))
                if name is not None:
                    tripwire.hit(name)
                return func(*args, **(kwargs or {}))

        with FunctionWatch():  # the API object, e.g. torch.nn.functional.scaled_dot_product_attention
            yield
