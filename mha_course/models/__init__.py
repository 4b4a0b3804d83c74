"""A model to train: tasks, the tiny transformer, training, and what its heads learned.

Names are imported when first used, so ``import mha_course.models`` costs nothing until one is."""

from __future__ import annotations

from mha_course import _lazy_package

# public name -> module that defines it (the course's API: docs/ARCHITECTURE.md, "The course's API")
_EXPORTS = {
    "cache_bytes": "delta_rule",
    "gated_delta_rule_chunked": "delta_rule",
    "gated_delta_rule_recurrent": "delta_rule",
    "l2_normalize": "delta_rule",
    "single_thread": "experiments",
    "GatedDeltaNet": "hybrid",
    "HybridTransformer": "hybrid",
    "ablate": "interpret",
    "ablation_table": "interpret",
    "attention_grid": "interpret",
    "describe_heads": "interpret",
    "head_picker": "interpret",
    "plot_ablation": "interpret",
    "plot_relation_attention": "interpret",
    "relation_attention": "interpret",
    "TinyTransformer": "model",
    "build_model": "model",
    "run_model": "model",
    "ROTARY_STEPS": "pretrained",
    "SHORT_MAX_STEPS": "pretrained",
    "SHORT_TARGET_ACCURACY": "pretrained",
    "pretrained": "pretrained",
    "LinearAttentionState": "recurrence",
    "forward_flops": "recurrence",
    "input_sensitivity": "recurrence",
    "linear_attention": "recurrence",
    "matched_gru": "recurrence",
    "path_table": "recurrence",
    "training_step_seconds": "recurrence",
    "IGNORE": "tasks",
    "TaskData": "tasks",
    "get_task": "tasks",
    "HELD_OUT_SEED_OFFSET": "train",
    "evaluate": "train",
    "loss_fn": "train",
    "train": "train",
    "train_task": "train",
    "SHAPES": "vit",
    "TinyViT": "vit",
    "cls_attention": "vit",
    "fit_vit": "vit",
    "patchify": "vit",
    "shapes": "vit",
}
# modules a chapter reads as a namespace (``roofline.GPUS``) or shows the source of
_MODULES = ("experiments",)

__all__ = sorted([*_EXPORTS, *_MODULES])
__getattr__, __dir__ = _lazy_package(__name__, _EXPORTS, _MODULES)
