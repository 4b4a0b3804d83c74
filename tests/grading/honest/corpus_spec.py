"""What one honest notebook of the corpus is: an exercise notebook with its answer cells filled in one style.

:class:`Honest` names the assignment, the style (the file is ``<assignment>__<style>.ipynb``), the style
families it exercises (:data:`FAMILIES`) and the edits that turn the exercise notebook into the learner's
notebook. ``build_corpus.py`` applies them; the tables live in ``styles/<assignment>.py``.
"""

from __future__ import annotations

from dataclasses import dataclass, field

# Ways a learner binds a graded name that definitions-only loading cannot follow (each one a family).
FACTORY = "factory"  # softmax = make_softmax()
PARTIAL = "partial"  # f = functools.partial(own_function, ...)
WRAPPER = "wrapper"  # f = log_calls(f)
MODULE_INSTANCE = "module_instance"  # an nn.Module instance used as the function
OWN_DECORATOR = "own_decorator"  # @their_decorator (functools.wraps inside)
NP_VECTORIZE = "np_vectorize"  # @np.vectorize on a scalar helper
JIT_SCRIPT = "jit_script"  # @torch.jit.script on a helper or the target
TORCH_COMPILE = "torch_compile"  # @torch.compile on a correct function
CLASS_EXPORT = "class_export"  # causal_mask = Masks.causal; split = staticmethod(split_heads)
TRY_IMPORT = "try_import"  # try: import torch ... except ImportError: ...
CUDA_BRANCH = "cuda_branch"  # if torch.cuda.is_available(): def ... else: def ...
MODULE_VALUES = "module_values"  # POS = positions(8192); tables built by their helpers or comprehensions
LOOP_TABLE = "loop_table"  # a table filled by a top-level loop that the function reads
DEFAULT_DTYPE = "default_dtype"  # torch.set_default_dtype(torch.float64) at the top
GRAD_DISABLED = "grad_disabled"  # torch.set_grad_enabled(False) at the top
GLOBALS_LOOP = "globals_loop"  # for name in [...]: check(name, globals()[name])
SUBCLASS = "subclass"  # class MultiHeadAttention(MultiHeadAttention): ...

# Ordinary styles (definitions-only loading already handles most of them).
EINSUM = "einsum"
PURE_NUMPY = "pure_numpy"
LAMBDA = "lambda"
HELPER_CELL = "helper_cell"  # a helper function in an earlier cell of its own
PRINTS_PLOTS = "prints_plots"
MAGICS = "magics"  # %matplotlib inline, %%time at the top of an answer cell
TYPE_HINTS = "type_hints"
OWN_ASSERTS = "own_asserts"

STATE_FAMILIES = (
    FACTORY,
    PARTIAL,
    WRAPPER,
    MODULE_INSTANCE,
    OWN_DECORATOR,
    NP_VECTORIZE,
    JIT_SCRIPT,
    TORCH_COMPILE,
    CLASS_EXPORT,
    TRY_IMPORT,
    CUDA_BRANCH,
    MODULE_VALUES,
    LOOP_TABLE,
    DEFAULT_DTYPE,
    GRAD_DISABLED,
    GLOBALS_LOOP,
    SUBCLASS,
)
ORDINARY_FAMILIES = (EINSUM, PURE_NUMPY, LAMBDA, HELPER_CELL, PRINTS_PLOTS, MAGICS, TYPE_HINTS, OWN_ASSERTS)
FAMILIES = STATE_FAMILIES + ORDINARY_FAMILIES


@dataclass(frozen=True)
class Honest:
    """One learner's notebook: the exercise notebook of ``assignment`` with these edits.

    ``answers`` maps a graded name (the ``def``/``class`` name of an answer cell of the exercise notebook)
    to the whole new source of that cell. ``imports`` replaces the first code cell; ``setup`` goes at its
    top and ``setup_after`` at its end. ``before``/``after`` map a graded name to new code cells put just
    before its answer cell / just after its check cell; ``end`` cells close the notebook.
    """

    assignment: str
    style: str
    families: tuple[str, ...]
    answers: dict[str, str]
    imports: str | None = None
    setup: str = ""
    setup_after: str = ""
    before: dict[str, list[str]] = field(default_factory=dict)
    after: dict[str, list[str]] = field(default_factory=dict)
    end: list[str] = field(default_factory=list)

    @property
    def name(self) -> str:
        return f"{self.assignment}__{self.style}"

    def __post_init__(self) -> None:
        unknown = sorted(set(self.families) - set(FAMILIES))
        if unknown or not self.families:
            raise ValueError(
                f"{self.assignment}__{self.style}: families must be among FAMILIES, got {unknown or 'none'}"
            )
