"""The checks of one training run that need no model, load no data and write nothing.

:func:`~contrastive_bert.training.runner.check_recipe` runs them on a recipe,
:func:`~contrastive_bert.training.stages.check_stages` on every stage of a staged recipe before the
first stage trains; a stage then runs without checking again.
"""

from __future__ import annotations

from contrastive_bert.training.losses_registry import LossEntry, get_loss_entry
from contrastive_bert.training.recipe import TrainingRecipe

__all__ = ["check_run_inputs", "precision_flags"]


def precision_flags(mixed_precision: str) -> dict[str, bool]:
    """The trainer's ``fp16``/``bf16`` flag for ``mixed_precision``; a ``ValueError`` for fp16 or
    bf16 without a CUDA device."""
    if mixed_precision == "no":
        return {}
    import torch

    if not torch.cuda.is_available():
        if mixed_precision == "auto":
            return {}
        raise ValueError(f"mixed_precision: {mixed_precision!r} needs a CUDA device; use 'no' or 'auto' on CPU")
    if mixed_precision == "auto":
        return {"bf16": True} if torch.cuda.is_bf16_supported() else {"fp16": True}
    return {mixed_precision: True}


def check_run_inputs(recipe: TrainingRecipe) -> LossEntry:
    """The loss and its options, the data root, the data sets and their formats (and for
    ``corpus_negatives`` that they are retrieval sets), the tasks, the precision. The fields
    themselves are checked when the recipe is built (:meth:`TrainingRecipe.validate`), the model and
    the output folder by the caller. Returns the loss's registry entry."""
    from contrastive_bert.data import resolve_data_dir
    from contrastive_bert.evaluation.tasks import check_tasks
    from contrastive_bert.training.train_data import check_train_datasets

    entry = get_loss_entry(recipe.loss)
    entry.check_options(recipe.loss_options)
    resolve_data_dir(recipe.data_dir)
    check_train_datasets(recipe.datasets, entry.data_format, recipe.labelled_negatives)
    if recipe.corpus_negatives is not None:
        from contrastive_bert.training.corpus_negatives import check_corpus_negative_datasets

        check_corpus_negative_datasets(recipe.datasets, entry.data_format)
    if recipe.eval_tasks:
        check_tasks(recipe.eval_tasks)
    if recipe.dev_task:
        check_tasks([recipe.dev_task])
    precision_flags(recipe.mixed_precision)
    return entry
