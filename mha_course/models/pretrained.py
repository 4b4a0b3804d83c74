"""Small pretrained checkpoints: a chapter loads a trained tiny model in a blink, or trains it again with one switch.

Training even a tiny model takes tens of seconds on two busy cores, before a chapter can show
anything. So each model a chapter needs is a named *recipe* here (how to build it and how to train
it, seeds fixed), and the course ships the weights the recipe makes, a few tens of KB each:

    model, made = pretrained("recent_digit_rotary")                           # loads the shipped weights
    model, made = pretrained("recent_digit_rotary", train_from_scratch=True)  # runs the recipe here

``made`` says how the weights came about (steps trained, held-out accuracy, and whether they were
loaded or trained just now). ``python -m mha_course.models.pretrained`` lists the recipes;
``--make NAME ...`` (or ``--make all``) re-runs recipes and writes their checkpoints into
``mha_course/models/checkpoints/`` (``torch.save`` of a dict: the model's ``state_dict``, its floating
tensors stored as float16 to halve the file, and how it was made), which is how the shipped files were
made. Loading copies them back into the float32 model; the rounding (a relative 5e-4) moves the
held-out accuracy by a few thousandths at most. ``tests/models/test_pretrained.py`` checks that
each shipped checkpoint loads and reaches the accuracy it states, and (slow) that the recipe remakes it.

A chapter adds a recipe with :func:`register` (a build function returning the untrained model, and a
train function that trains it in place and returns a TrainResult), then makes its checkpoint once.
"""

from __future__ import annotations

import argparse
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import torch
from torch import nn

from ..core.mha import MultiHeadAttention
from ..inference.alibi import use_alibi
from ..inference.gated_attention import GatedMultiHeadAttention
from .hybrid import HybridTransformer
from .model import TinyTransformer
from .tasks import Task, TaskData, get_task
from .train import HELD_OUT_SEED_OFFSET, TrainResult, train

CHECKPOINT_DIR = Path(__file__).resolve().parent / "checkpoints"


@dataclass(frozen=True)
class Recipe:
    """How one shipped model is made: ``build()`` -> untrained model, ``fit(model)`` -> TrainResult (in place);
    ``task()`` is the task it learns, ``seed`` and ``eval_size`` those ``fit`` passes to train (its held-out set)."""

    name: str
    build: Callable[[], nn.Module]
    fit: Callable[[nn.Module], TrainResult]
    task: Callable[[], Task]
    description: str
    seed: int = 0
    eval_size: int = 500

    def held_out(self) -> TaskData:
        """The held-out examples ``fit`` measured its accuracy on (train's: seed + HELD_OUT_SEED_OFFSET)."""
        return self.task().sample(self.eval_size, self.seed + HELD_OUT_SEED_OFFSET)


@dataclass(frozen=True)
class Made:
    """How a model's weights came about: ``steps`` trained to held-out ``accuracy`` (train's own held-out
    set), ``source`` "shipped checkpoint" or "trained here", and ``seconds`` of training (None when loaded)."""

    name: str
    steps: int
    accuracy: float
    source: str
    seconds: float | None = None

    def summary(self) -> str:
        took = f" in {self.seconds:.1f} s" if self.seconds is not None else ""
        return f"{self.source}: {self.steps} training steps{took}, held-out accuracy {self.accuracy:.3f}"


RECIPES: dict[str, Recipe] = {}


def register(recipe: Recipe) -> Recipe:
    """Add a recipe under its name (a name may be registered once).

    Raises:
        TypeError: not a Recipe. ValueError: the name is taken or not a plain identifier.
    """
    if not isinstance(recipe, Recipe):
        raise TypeError(f"register needs a Recipe, got {type(recipe).__name__}")
    if not recipe.name.isidentifier():
        raise ValueError(f"a recipe's name must be an identifier (it names a file), got {recipe.name!r}")
    if recipe.name in RECIPES:
        raise ValueError(f"a recipe named {recipe.name!r} is already registered")
    RECIPES[recipe.name] = recipe
    return recipe


def _recipe(name: str) -> Recipe:
    if not isinstance(name, str):
        raise TypeError(f"name must be a str, got {type(name).__name__}")
    if name not in RECIPES:
        raise ValueError(f"no recipe named {name!r}; known: {sorted(RECIPES)}")
    return RECIPES[name]


def checkpoint_path(name: str, folder: Path | str = CHECKPOINT_DIR) -> Path:
    """Where the checkpoint of recipe ``name`` lives: ``folder/name.pt``."""
    return Path(folder) / f"{_recipe(name).name}.pt"


def train_recipe(name: str) -> tuple[nn.Module, Made]:
    """Build and train recipe ``name`` here, seeds fixed, on one thread (so that reruns agree)."""
    recipe = _recipe(name)
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        model = recipe.build()
        result = recipe.fit(model)
    finally:
        torch.set_num_threads(threads)
    model.eval()
    return model, Made(name, result.steps, result.accuracy, "trained here", result.seconds)


def make_checkpoint(name: str, folder: Path | str = CHECKPOINT_DIR) -> tuple[Path, Made]:
    """Run recipe ``name`` and save its weights and how they were made to ``folder/name.pt``."""
    model, made = train_recipe(name)
    path = checkpoint_path(name, folder)
    path.parent.mkdir(parents=True, exist_ok=True)
    weights = {k: v.half() if v.is_floating_point() else v for k, v in model.state_dict().items()}
    torch.save({"state_dict": weights, "steps": made.steps, "accuracy": made.accuracy}, path)
    return path, made


def load_pretrained(name: str, folder: Path | str = CHECKPOINT_DIR) -> tuple[nn.Module, Made]:
    """The model of recipe ``name`` with the weights of its checkpoint (``weights_only``: tensors and numbers).

    Raises:
        FileNotFoundError: no checkpoint, saying how to make it.
    """
    recipe, path = _recipe(name), checkpoint_path(name, folder)
    if not path.is_file():
        raise FileNotFoundError(
            f"no checkpoint {path}; make it with python -m mha_course.models.pretrained --make {name}"
        )
    saved = torch.load(path, map_location="cpu", weights_only=True)
    model = recipe.build()
    model.load_state_dict(saved["state_dict"])  # float16 copied into the model's float32
    model.eval()
    return model, Made(name, int(saved["steps"]), float(saved["accuracy"]), "shipped checkpoint")


def pretrained(
    name: str, train_from_scratch: bool = False, folder: Path | str = CHECKPOINT_DIR
) -> tuple[nn.Module, Made]:
    """Recipe ``name``'s trained model: its shipped checkpoint, or (``train_from_scratch=True``) trained here.

    Raises:
        TypeError: train_from_scratch is not a bool. ValueError: unknown name.
        FileNotFoundError: no checkpoint (when loading).
    """
    if not isinstance(train_from_scratch, bool):
        raise TypeError(f"train_from_scratch must be True or False, got {train_from_scratch!r}")
    return train_recipe(name) if train_from_scratch else load_pretrained(name, folder)


# --- the recipes ------------------------------------------------------------------------------------------


ROTARY_STEPS = 200  # recent_digit_rotary trains this many steps
SHORT_MAX_STEPS = 400  # the recent_digit16_* models train at most this many steps,
SHORT_TARGET_ACCURACY = 0.99  # stopping once their held-out accuracy reaches this


def _recent_digit_rotary() -> nn.Module:
    task = get_task("recent_digit", length=32)
    torch.manual_seed(0)
    return TinyTransformer(task.vocab_size, task.seq_len, embed_dim=32, num_heads=4, num_layers=2,
                           positions="rotary", causal=True)  # fmt: skip


def _fit_recent_digit_rotary(model: nn.Module) -> TrainResult:
    task = get_task("recent_digit", length=32)
    return train(model, task, steps=ROTARY_STEPS, seed=0, target_accuracy=None, eval_every=ROTARY_STEPS,
                 eval_size=500, progress=False)  # fmt: skip


register(Recipe("recent_digit_rotary", _recent_digit_rotary, _fit_recent_digit_rotary,
                lambda: get_task("recent_digit", length=32),
                "chapter 16: causal, rotary, E = 32, 4 heads, 2 layers; the recent-digit task of 32 tokens, "
                f"{ROTARY_STEPS} steps"))  # fmt: skip

EXTRAPOLATION_MAX_LEN = 65  # the short-task models are run on up to 64 tokens after <s>


def _short_model(kind: str) -> Callable[[], nn.Module]:
    def build() -> nn.Module:
        task = get_task("recent_digit", length=16)
        torch.manual_seed(0)
        model = TinyTransformer(task.vocab_size, EXTRAPOLATION_MAX_LEN, embed_dim=32, num_heads=4, num_layers=2,
                                positions="none" if kind == "alibi" else kind, causal=True)  # fmt: skip
        return use_alibi(model) if kind == "alibi" else model

    return build


def _fit_short(model: nn.Module) -> TrainResult:
    task = get_task("recent_digit", length=16)
    return train(model, task, steps=SHORT_MAX_STEPS, seed=0, target_accuracy=SHORT_TARGET_ACCURACY, eval_every=25,
                 eval_size=500, progress=False)  # fmt: skip


for _kind in ("learned", "rotary", "alibi"):
    register(Recipe(f"recent_digit16_{_kind}", _short_model(_kind), _fit_short,
                    lambda: get_task("recent_digit", length=16),
                    f"chapter 16: causal, {_kind} positions, E = 32, 4 heads, 2 layers, room for 65 positions; "
                    f"the recent-digit task of 16 tokens, up to {SHORT_MAX_STEPS} steps (stops at {SHORT_TARGET_ACCURACY})"))  # fmt: skip


def _gated_model(gated: bool) -> Callable[[], nn.Module]:
    def build() -> nn.Module:
        task = get_task("recent_digit", length=16)
        torch.manual_seed(0)
        model = TinyTransformer(task.vocab_size, EXTRAPOLATION_MAX_LEN, embed_dim=32, num_heads=4, num_layers=2,
                                positions="learned", causal=True)  # fmt: skip
        if gated:  # the same weights, plus each layer's output gate (drawn after them, from the same seed)
            for block in model.blocks:
                ungated = block.attn
                assert isinstance(ungated, nn.Module)  # for the type checker: a submodule, not a tensor
                gated_attn = GatedMultiHeadAttention(32, 4)
                gated_attn.load_state_dict(ungated.state_dict(), strict=False)  # all but gate_proj
                block.attn = gated_attn
        return model

    return build


def _fit_fixed(model: nn.Module) -> TrainResult:
    task = get_task("recent_digit", length=16)
    return train(model, task, steps=600, seed=0, target_accuracy=None, eval_every=600, eval_size=500, progress=False)


for _gated in (False, True):
    register(Recipe(f"recent_digit16_gate_{'on' if _gated else 'off'}", _gated_model(_gated), _fit_fixed,
                    lambda: get_task("recent_digit", length=16),
                    f"chapter 18: causal, learned positions, E = 32, 4 heads, 2 layers, "
                    f"{'with' if _gated else 'without'} the output gate of gated attention; the recent-digit "
                    "task of 16 tokens, 600 steps"))  # fmt: skip


def _nope_model(interleaved: bool) -> Callable[[], nn.Module]:
    def build() -> nn.Module:
        task = get_task("recent_digit", length=16)
        torch.manual_seed(0)
        model = TinyTransformer(task.vocab_size, EXTRAPOLATION_MAX_LEN, embed_dim=32, num_heads=4, num_layers=2,
                                positions="rotary" if interleaved else "none", causal=True)  # fmt: skip
        if interleaved:  # Llama 4's pattern at two layers: rotary first, then a layer without positions (NoPE)
            rotary = model.blocks[1].attn
            assert isinstance(rotary, nn.Module)  # for the type checker: a submodule, not a tensor
            nope = MultiHeadAttention(32, 4)
            nope.load_state_dict(rotary.state_dict())
            model.blocks[1].attn = nope
        return model

    return build


for _interleaved in (False, True):
    register(Recipe(f"recent_digit16_{'irope' if _interleaved else 'nope'}", _nope_model(_interleaved), _fit_short,
                    lambda: get_task("recent_digit", length=16),
                    "chapter 18: causal, E = 32, 4 heads, 2 layers, room for 65 positions, "
                    f"{'rotary then NoPE (interleaved)' if _interleaved else 'no positions in either layer (NoPE)'}; "
                    "the recent-digit task of 16 tokens, up to 400 steps (stops at 0.99)"))  # fmt: skip


RECALL_KINDS: dict[str, tuple[int, bool]] = {  # chapter 18: (full_every, delta) of two layers, E = 32, 4 heads
    "linear": (3, False),  # two Gated DeltaNet layers without the delta rule (gated linear attention)
    "delta": (3, True),  # two Gated DeltaNet layers
    "hybrid": (2, True),  # one Gated DeltaNet layer, then one full attention layer
}


def _recall_model(kind: str) -> Callable[[], nn.Module]:
    def build() -> nn.Module:
        task = get_task("recall", num_pairs=8)
        torch.manual_seed(0)
        return HybridTransformer(task.vocab_size, task.seq_len, embed_dim=32, num_heads=4, num_layers=2,
                                 full_every=RECALL_KINDS[kind][0], delta=RECALL_KINDS[kind][1])  # fmt: skip

    return build


def _fit_recall(model: nn.Module) -> TrainResult:
    task = get_task("recall", num_pairs=8)
    return train(model, task, steps=600, seed=0, target_accuracy=None, eval_every=600, eval_size=500, progress=False)


for _kind in RECALL_KINDS:
    register(Recipe(f"recall8_{_kind}", _recall_model(_kind), _fit_recall, lambda: get_task("recall", num_pairs=8),
                    f"chapter 18: causal HybridTransformer, E = 32, 4 heads, 2 layers ({_kind}); the recall task "
                    "of 8 pairs, 600 steps"))  # fmt: skip


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m mha_course.models.pretrained", description="List the recipes, or make their checkpoints."
    )
    parser.add_argument("--make", nargs="+", metavar="NAME", help="recipes to train and save ('all': every one)")
    parser.add_argument(
        "--folder", default=str(CHECKPOINT_DIR), help="where checkpoints go (default: the shipped ones)"
    )
    args = parser.parse_args(argv)
    if not args.make:
        for recipe in RECIPES.values():
            path = checkpoint_path(recipe.name, args.folder)
            size = f"{path.stat().st_size / 1024:.0f} KB" if path.is_file() else "not made"
            print(f"{recipe.name:24s} {size:>9s}  {recipe.description}")
        return 0
    names = list(RECIPES) if args.make == ["all"] else args.make
    for name in names:
        path, made = make_checkpoint(name, args.folder)
        print(f"{name}: {made.summary()} -> {path} ({path.stat().st_size / 1024:.0f} KB)")
    return 0


__all__ = [
    "CHECKPOINT_DIR",
    "Made",
    "RECIPES",
    "Recipe",
    "checkpoint_path",
    "load_pretrained",
    "make_checkpoint",
    "pretrained",
    "register",
    "train_recipe",
]


if __name__ == "__main__":
    raise SystemExit(main())
