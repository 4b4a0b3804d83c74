"""Guards around the learner's target while a case runs: subclass rejection and the shortcut tripwire.

* :func:`guarded` wraps the target so that an array or tensor *subclass* in what it returns is
  rejected with a message (a subclass could lie about equality; the grader compares plain values
  only). A function target is wrapped; for an ``nn.Module`` class target a global forward hook
  checks what instances of that class return.
* :class:`Tripwire` notices calls to an exercise's ``forbidden`` callables while a case runs:

  1. a ``TorchFunctionMode`` sees torch API calls by name, whatever alias reached them, and private
     and raw-operator routes too (``torch._softmax``, ``torch.ops.aten._softmax`` are "softmax":
     :func:`same_family`);
  2. where the names arm an op family (:mod:`.op_families`), a ``TorchDispatchMode`` sees the ATen
     operators as torch runs them, whatever spelling reached them (``torch.logcumsumexp``,
     ``F.cross_entropy``, TorchScript compiled from a string, ``torch.compile``);
  3. the family's NumPy/SciPy members (``np.logaddexp.reduce``) are replaced by reporting stand-ins,
     for the case in the self-check, for the process in the grader, where :meth:`Tripwire.install`
     also wraps every forbidden module attribute before any learner code runs.

  It shares the address space with learner code: advice backed by the static scan, not a wall.

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

from . import op_families
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
    """The learner-facing sentence for forbidden calls: the names called, and the family members torch ran.

    ``ops`` holds :func:`~mha_course.grading.inside.op_families.label` strings (``"aten._softmax (softmax
    family)"``); each family is named with what it computes and what the exercise asks instead.
    """
    if set(names) & set(AUTOGRAD):
        others = sorted(set(names) - set(AUTOGRAD))
        return (
            "this exercise asks you to derive the gradients by hand; your code used autograd ("
            + (f"{', '.join(others)}; " if others else "")
            + "a tensor with requires_grad, torch.autograd or "
            "torch.func), which is not allowed here (0 points for this case)"
        )
    parts = [f"called {', '.join(sorted(set(names)))}"] if names else []
    grouped: dict[Any, list[str]] = {}
    for text in ops:
        family, member = op_families.parse_label(str(text))
        if member not in grouped.setdefault(family, []):
            grouped[family].append(member)
    for family, members in grouped.items():
        if family is None:  # a bare operator name
            parts.append(f"ran torch's fused kernel {', '.join(members)} (it computes what you are asked to write)")
        else:
            parts.append(f"ran {', '.join(members)}, of the {family.key} family ({family.what})")
    asks = next((f" ({f.asks})" for f in grouped if f is not None), "")
    return (
        f"this exercise asks you to write it yourself{asks}; your code {' and '.join(parts) or 'called a forbidden function'}, "
        "which is not allowed here (0 points for this case)"
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


def _requires_grad(value: Any, torch: Any, depth: int = 0) -> bool:
    if isinstance(value, torch.Tensor):
        return bool(value.requires_grad)
    if isinstance(value, (tuple, list)) and depth < 2:
        return any(_requires_grad(v, torch, depth + 1) for v in value[:64])
    return False


def watched_ufunc(ufunc: Any, name: str, seen: Any) -> Any:
    """A stand-in for the NumPy ufunc ``ufunc`` (module attribute ``name``, e.g. ``numpy.logaddexp``).

    Calling it is calling the ufunc; its methods listed in :data:`.op_families.NUMPY_UFUNC_ALIASES`
    (``reduce``, ``accumulate``, ``reduceat``) call ``seen("numpy.logaddexp.reduce")`` first. A ufunc's
    methods are read-only, so the module attribute is what is replaced; the ufunc itself is held in this
    closure only (no attribute leads back to it).
    """
    methods = op_families.NUMPY_UFUNC_ALIASES.get(name, ())

    class WatchedUfunc:
        __doc__ = ufunc.__doc__

        def __call__(self, *args, **kwargs):
            return ufunc(*args, **kwargs)

        def __getattr__(self, attr):
            value = getattr(ufunc, attr)
            if attr not in methods:
                return value
            member = f"{name}.{attr}"

            def method(*args, **kwargs):
                seen(member)
                return value(*args, **kwargs)

            return method

        def __repr__(self) -> str:
            return repr(ufunc)

    WatchedUfunc.__name__ = WatchedUfunc.__qualname__ = type(ufunc).__name__
    return WatchedUfunc()


def _reporting(original: Any, name: str, report: Any) -> Any:
    """``original`` wrapped to call ``report(name)`` first (no ``__wrapped__``: no handle on the original)."""

    def wrapper(*args, **kwargs):
        report(name)
        return original(*args, **kwargs)

    functools.update_wrapper(wrapper, original)
    delattr(wrapper, "__wrapped__")
    return wrapper


def _outside_torch(family: op_families.Family) -> list[str]:
    """A family's NumPy and SciPy names (no dispatch layer sees them: they are wrapped instead)."""
    return sorted(n for n in family.aliases if n.startswith(("numpy.", "scipy.")))


def _family_watch(
    families: Sequence[op_families.Family], names: set[str], aten: Any
) -> tuple[dict[Any, str], dict[int, str]]:
    """What the torch layers report for the armed ``families``: (ATen operator packet -> label, id of a torch
    API alias -> label). The first family names a member (the softmax family names a fused attention
    kernel where a softmax is forbidden); the forbidden ``names`` themselves are hits, not members."""
    watch: dict[Any, str] = {}
    aliases: dict[int, str] = {}
    for family in families:
        for op in sorted(family.aten):
            packet = getattr(aten, op, None)
            if packet is not None:
                watch.setdefault(packet, op_families.label(family, f"aten.{op}"))
        for alias in sorted(family.aliases - names):
            found = _resolve(alias, import_missing=False) if alias.startswith("torch.") else None
            if found is not None and not isinstance(found[2], type):
                aliases.setdefault(id(found[2]), op_families.label(family, alias))
    return watch, aliases


class Tripwire:
    """Notices calls to forbidden callables while armed; see the module docstring."""

    def __init__(self) -> None:
        self._armed: frozenset[str] = frozenset()
        self._watching: tuple[op_families.Family, ...] = ()  # the families the armed names switch on
        self._families: tuple[op_families.Family, ...] = op_families.FAMILIES
        self.hits: list[str] = []  # forbidden names called (torch API, wrappers)
        self.ops: list[str] = []  # family members seen (op_families.label): ATen operators, NumPy/SciPy names
        self._by_id: dict[int, str] = {}
        self._installed: list[tuple[Any, str, Any]] = []
        self._permanent = False  # install() ran: the NumPy/SciPy members are wrapped for the process

    def hit(self, name: str) -> None:
        if name in self._armed and name not in self.hits:
            self.hits.append(name)

    def seen(self, member: str) -> None:
        """Record a family member (``numpy.logaddexp.reduce``) if a family the armed names switch on holds it."""
        for family in self._watching:
            if member in family.aliases:
                text = op_families.label(family, member)
                if text not in self.ops:
                    self.ops.append(text)
                return

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

        Also wraps the NumPy/SciPy members of the families ``names`` switch on (:meth:`_wrap_members`),
        and binds this instance's methods, helpers and family table to itself, so that replacing
        ``Tripwire.hit`` or ``guard.same_family`` afterwards changes nothing for it.
        """
        for method in ("hit", "seen", "armed", "_index", "_wrap", "_wrap_members", "_torch_modes"):
            self.__dict__[method] = types.MethodType(getattr(type(self), method), self)
        self.__dict__["_helpers"] = (op_name, same_family, _requires_grad, explain, _family_watch)
        self._families = tuple(op_families.FAMILIES)
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
        families = [f for f in self._families if f.armed_by & names]
        self._installed += self._wrap_members(families, skip=names, import_missing=True)
        self._permanent = True

    def _wrap_members(
        self, families: Sequence[op_families.Family], skip: set[str], import_missing: bool
    ) -> list[tuple[Any, str, Any]]:
        """Replace the NumPy/SciPy members of ``families`` by wrappers that call :meth:`seen`; returns what was replaced.

        ``numpy.logaddexp`` becomes a :func:`watched_ufunc` (its ``reduce`` is the member); a SciPy
        function (``scipy.special.logsumexp``) a plain wrapper. Names in ``skip`` (wrapped by name) are left.
        """
        replaced: list[tuple[Any, str, Any]] = []
        names = {n for f in families for n in _outside_torch(f)} - set(skip)
        for ufunc_name in op_families.NUMPY_UFUNC_ALIASES:
            if any(n.startswith(ufunc_name + ".") for n in names):
                found = _resolve(ufunc_name, import_missing)
                if found is not None and isinstance(found[2], np.ufunc):
                    owner, attr, value = found
                    setattr(owner, attr, watched_ufunc(value, ufunc_name, self.seen))
                    replaced.append((owner, attr, value))
            names = {n for n in names if not n.startswith(ufunc_name + ".")}
        for name in sorted(names):
            found = _resolve(name, import_missing)
            if found is None or not callable(found[2]) or isinstance(found[2], type):
                continue
            owner, attr, value = found
            try:
                setattr(owner, attr, _reporting(value, name, self.seen))
                replaced.append((owner, attr, value))
            except (AttributeError, TypeError):
                pass
        return replaced

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
        """Within the block, calls to ``names`` are recorded in the yielded list (also ``self.hits``).

        Family members seen (ATen operators through the dispatch layer, NumPy/SciPy names through their
        wrappers) go to ``self.ops``. Without :meth:`install` (the self-check) the NumPy/SciPy members
        are wrapped for the block only.
        """
        self.hits = []
        self.ops = []
        self._armed = frozenset(names)
        self._watching = tuple(f for f in self._families if f.armed_by & self._armed)
        if not names:
            yield self.hits
            return
        self._index(set(names), import_missing=False)
        replaced = [] if self._permanent else self._wrap_members(self._watching, set(), import_missing=False)
        with contextlib.ExitStack() as stack:
            if "torch" in sys.modules:
                stack.enter_context(self._torch_modes(names))
            try:
                yield self.hits
            finally:
                self._armed = frozenset()
                self._watching = ()
                for owner, attr, value in reversed(replaced):
                    setattr(owner, attr, value)

    @contextlib.contextmanager
    def _torch_modes(self, names: tuple[str, ...] | list[str]) -> Iterator[None]:
        """The torch layers: a TorchFunctionMode (API calls by name) and, when a family is armed, a
        TorchDispatchMode (the ATen operators torch runs, whatever reached them: TorchScript too)."""
        import torch
        from torch.overrides import TorchFunctionMode
        from torch.utils._python_dispatch import TorchDispatchMode

        tripwire, no_function_modes = self, torch._C.DisableTorchFunction
        op_name, same_family, _requires_grad, _, family_watch = getattr(self, "_helpers", None) or (
            globals()["op_name"],
            globals()["same_family"],
            globals()["_requires_grad"],
            None,
            globals()["_family_watch"],
        )
        by_name = [n for n in names if n.startswith("torch.") and n not in AUTOGRAD]
        no_autograd = [n for n in names if n in AUTOGRAD]
        families: dict[str, str | None] = {}  # op name -> forbidden name (or None), cached
        watch, aliases = family_watch(
            [f for f in self._families if f.armed_by & set(names)], set(names), torch.ops.aten
        )

        class FunctionWatch(TorchFunctionMode):
            def __torch_function__(self, func, types, args=(), kwargs=None):
                name = tripwire._by_id.get(id(func))
                if name is None and by_name:
                    op = op_name(func)
                    if op not in families:
                        families[op] = next((n for n in by_name if same_family(op, n)), None)
                    name = families[op]
                if name is not None:
                    tripwire.hit(name)
                member = aliases.get(id(func))  # by the name the learner wrote, beside the operators it runs
                if member is not None and member not in tripwire.ops:
                    tripwire.ops.append(member)
                result = func(*args, **(kwargs or {}))
                if no_autograd and _requires_grad(result, torch):
                    tripwire.hit(no_autograd[0])
                return result

        class OpWatch(TorchDispatchMode):
            @classmethod
            def _should_skip_dynamo(cls) -> bool:
                # torch would wrap __torch_dispatch__ in torch._dynamo.disable, importing torch._dynamo
                # on the first operator (about 6 s on the course's 2-core runner). Without it, code
                # torch.compile'd before or during the case still runs its operators through this mode
                # (measured with the eager, aot_eager and inductor backends; see the tests).
                return False

            def __torch_dispatch__(self, func, types, args=(), kwargs=None):
                text = watch.get(getattr(func, "overloadpacket", None))
                if text is not None and text not in tripwire.ops:
                    tripwire.ops.append(text)
                with no_function_modes():  # the operator itself, not again through FunctionWatch (names only)
                    return func(*args, **(kwargs or {}))

        with contextlib.ExitStack() as stack:
            stack.enter_context(
                FunctionWatch()
            )  # the API object, e.g. torch.nn.functional.scaled_dot_product_attention
            if watch:
                stack.enter_context(OpWatch())  # the operator, e.g. aten._softmax from TorchScript
            yield
