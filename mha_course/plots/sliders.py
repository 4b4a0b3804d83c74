"""The notebooks' interactive cells: :func:`interactive` makes sliders, or draws fixed settings where widgets cannot run.

A lecture cell ``sliders.interactive(draw, tau=(0.1, 5.0))`` shows ipywidgets sliders in JupyterLab;
under nbval, in a static HTML export or without ipywidgets it calls ``draw`` at the ``static``
settings instead, so the cell still shows its point. Every widget made is remembered, so that a
test can :func:`replay_interactive` each one at its current value and at the ends of its controls
(a slider that breaks the cell at its maximum is a bug a learner would find in a minute).

The widget also carries a PNG of its first picture, so that a static view of the executed
notebook (nbconvert, GitHub) shows the figure at the default settings instead of the widget's
bare text ``interactive(children=...)``.
"""

from __future__ import annotations

import base64
import functools
import inspect
import io
from collections.abc import Sequence


def interactive(function, static: Sequence[dict] = ({},), **controls):
    """Sliders and menus for ``function`` where ipywidgets is installed, fixed settings otherwise.

    With ipywidgets, this is ``ipywidgets.interactive(function, **controls)``: moving a control
    calls ``function`` again with the new keyword arguments. Make the call the last line of a
    cell (or pass the result to ``display``) so that Jupyter shows the widget. Without ipywidgets
    (a plain Python console, some hosted notebooks) ``function`` is called once per dict in
    ``static``, so the learner still sees the pictures, just not the sliders.

    ``function`` also runs once with the controls' initial values when the widget is built; if
    that first call raises, the exception propagates (ipywidgets alone would only print it inside
    the widget), so a notebook test that executes the cell fails as it should.

    Args:
        function: draws and/or prints one setting; its parameters are the controls' names.
        static: keyword-argument dicts for the calls made when ipywidgets is missing; the
            default ``({},)`` is one call with ``function``'s own defaults.
        **controls: for each parameter, one of ``interact``'s abbreviations: ``(min, max, step)``
            for a slider, a list of options for a menu, a bool for a checkbox; or a function that
            takes the ipywidgets module and returns a control, for controls that need ipywidgets
            itself: ``tau=lambda w: w.FloatLogSlider(value=1, min=-1, max=1)`` (so the notebook
            never imports ipywidgets, and still runs where it is missing).

    Returns:
        the ``ipywidgets.interactive`` widget (carrying a PNG of its default settings' figures for
        static views), or None when the static fallback ran.

    Raises:
        TypeError: ``function`` is not callable, or ``static`` is not a sequence of dicts.
        whatever ``function`` raises on its first call.
    """
    if not callable(function):
        raise TypeError(f"function must be callable, got {type(function).__name__}")
    if isinstance(static, dict) or not all(isinstance(kwargs, dict) for kwargs in static):
        raise TypeError(f"static must be a sequence of keyword-argument dicts, e.g. [{{'tau': 0.5}}], got {static!r}")
    try:
        import ipywidgets
    except ImportError:
        shown = "; ".join(
            "(" + (", ".join(f"{k}={v!r}" for k, v in kwargs.items()) or "defaults") + ")" for kwargs in static
        )
        print(f"ipywidgets is not installed, so no sliders; fixed settings instead: {shown}")
        for kwargs in static:
            function(**kwargs)
        _MADE[_key(function)] = (function, None, [dict(kwargs) for kwargs in static])
        return None

    failures: list[BaseException] = []

    def call(**kwargs):
        try:
            return function(**kwargs)
        except Exception as error:  # remembered for the first call, shown by ipywidgets later
            failures.append(error)
            raise

    # keep the learner's parameter names and defaults visible to interactive()'s introspection
    call.__signature__ = inspect.signature(function)
    controls = {
        name: control(ipywidgets) if callable(control) and not isinstance(control, ipywidgets.Widget) else control
        for name, control in controls.items()
    }
    widget = _widget_class()(call, **controls)
    if failures:
        raise failures[0]
    _MADE[_key(function)] = (function, widget, [dict(kwargs) for kwargs in static])
    return widget


@functools.cache
def _widget_class():
    """``ipywidgets.interactive`` whose first picture is set as state and also kept as a PNG.

    The first call (the default settings, made while the cell runs) is captured with IPython's
    ``capture_output`` and handed to the widget's Output area as its ``outputs`` state, the way
    ``Output.append_display_data`` does, instead of being printed inside ``with self.out``.
    Printing inside the Output area makes a notebook runner that mimics a frontend (nbclient,
    hence ``jupyter nbconvert --execute`` and nbval) send a comm message back on the shell socket
    for every output while it is waiting for the cell's reply on that same socket; now and then
    the reply is then never noticed and the cell stalls until its timeout. State set from the
    kernel needs no answer. Later calls (a learner moving a slider) run as ipywidgets runs them.

    The PNG goes into the widget's MIME bundle: JupyterLab with widgets renders the live widget
    and ignores it; nbconvert, GitHub and any viewer without a widget manager show the picture
    instead of the bare text ``interactive(children=...)``; what the first call printed replaces
    that text as ``text/plain`` (the static view of a callback that only prints). One output,
    nothing drawn twice.
    """
    import ipywidgets
    from IPython.display import display
    from IPython.utils.capture import capture_output
    from ipywidgets.widgets.interaction import show_inline_matplotlib_plots

    class InteractiveWithPicture(ipywidgets.interactive):
        picture: bytes | None = None  # PNG of the figures the first call drew, stacked
        printed: str = ""  # what the first call printed: the static view of a callback that only prints
        _first_done = False

        def update(self, *args):
            if self._first_done:
                return super().update(*args)
            self._first_done = True
            self.kwargs = {control._kwarg: control.get_interact_value() for control in self.kwargs_widgets}
            show_inline_matplotlib_plots()  # figures left open by earlier code belong to the cell, as in update()
            with capture_output() as captured:
                self.result = self.f(**self.kwargs)
                show_inline_matplotlib_plots()
                if self.auto_display and self.result is not None:
                    display(self.result)
            outputs = [
                {"output_type": "stream", "name": name, "text": text}
                for name, text in (("stdout", captured.stdout), ("stderr", captured.stderr))
                if text
            ]
            outputs += [
                {"output_type": "display_data", "data": _jsonable(out.data), "metadata": out.metadata or {}}
                for out in captured.outputs
            ]
            self.out.outputs = tuple(outputs)
            pngs = [base64.b64decode(o["data"]["image/png"]) for o in outputs if "image/png" in o.get("data", {})]
            self.picture = _stack_pngs(pngs)
            self.printed = captured.stdout

        def _repr_mimebundle_(self, **kwargs):
            bundle = super()._repr_mimebundle_(**kwargs)
            if bundle is not None and self.picture:
                bundle["image/png"] = base64.b64encode(self.picture).decode("ascii")
            if bundle is not None and self.printed.strip():
                bundle["text/plain"] = self.printed.rstrip("\n")  # instead of "interactive(children=..."
            return bundle

    return InteractiveWithPicture


def _jsonable(data: dict) -> dict:
    """A display's MIME data as notebook JSON: binary images base64-encoded, as nbformat stores them."""
    return {
        mime: base64.b64encode(value).decode("ascii") if isinstance(value, bytes) else value
        for mime, value in data.items()
    }


def _stack_pngs(pngs: list[bytes]) -> bytes | None:
    """One PNG with ``pngs`` one above the other (a MIME bundle holds one image), or None if none."""
    if len(pngs) <= 1:
        return pngs[0] if pngs else None
    from PIL import Image

    images = [Image.open(io.BytesIO(png)).convert("RGBA") for png in pngs]
    stacked = Image.new("RGBA", (max(i.width for i in images), sum(i.height for i in images)), "white")
    top = 0
    for image in images:
        stacked.paste(image, (0, top))
        top += image.height
    buffer = io.BytesIO()
    stacked.save(buffer, format="PNG")
    return buffer.getvalue()


# (function, widget or None, static settings) for every interactive() made in this process, the
# latest per function name: a cell run twice replaces its widget instead of piling up old ones.
_MADE: dict[tuple[str, str], tuple] = {}


def _key(function) -> tuple[str, str]:
    return getattr(function, "__module__", ""), getattr(function, "__qualname__", repr(function))


def _settings_to_try(widget) -> list[dict]:
    """The widget's current values, then each control moved alone to its ends (or through its options)."""
    current = {control._kwarg: control.value for control in widget.kwargs_widgets}
    settings = [current]
    for control in widget.kwargs_widgets:
        name = control._kwarg
        if hasattr(control, "min") and hasattr(control, "max"):
            ends = [control.min, control.max]
            if hasattr(control, "base"):  # a log slider: min and max are exponents
                ends = [control.base**control.min, control.base**control.max]
            values = ends
        elif hasattr(control, "options"):
            values = list(getattr(control, "_options_values", ()))[:6]
        elif isinstance(control.value, bool):
            values = [not control.value]
        else:
            values = []
        settings += [{**current, name: value} for value in values if value != current[name]]
    return settings


def replay_interactive() -> int:
    """Call every function behind an :func:`interactive` made in this kernel again, as a learner would.

    Run it after a whole notebook has executed: each function is called with its widget's current
    values and with every control moved alone to its ends (each option of a menu), or with its
    ``static`` settings where ipywidgets is missing. This catches what executing the notebook once
    cannot: a callback that reads a global which a later cell redefined, or one that breaks at the
    end of its own slider. Figures are closed instead of shown.

    Returns:
        the number of calls made.

    Raises:
        RuntimeError: naming every function and setting that raised, with the error.
    """
    import matplotlib.pyplot as plt

    problems, calls = [], 0
    show = plt.show
    plt.show = lambda *args, **kwargs: plt.close("all")
    try:
        for function, widget, static in list(_MADE.values()):
            for kwargs in _settings_to_try(widget) if widget is not None else static:
                calls += 1
                try:
                    function(**kwargs)
                except Exception as error:  # collected: report every broken setting at once
                    problems.append(
                        f"{getattr(function, '__name__', function)}({kwargs}): {type(error).__name__}: {error}"
                    )
                finally:
                    plt.close("all")
    finally:
        plt.show = show
    if problems:
        raise RuntimeError("interactive callbacks that fail when replayed:\n  " + "\n  ".join(problems))
    return calls
