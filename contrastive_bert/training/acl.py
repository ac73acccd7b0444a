"""Train a label-embedding classifier with ACL (or one of its ablation baselines) through the
shared runner; used by the ACL benchmarks and recipes so no training loop is copied.

The loss is always the registry's ``acl`` (:func:`~contrastive_bert.training.losses_registry.build_loss`):
a method of :data:`ACL_METHODS` is only a preset of its options, so a benchmark, a recipe and the
CLI build the same loss from the same options (checked the same way).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

__all__ = ["ACL_METHODS", "acl_loss_for_method", "acl_options", "train_label_classifier"]

# The ablation: CE only, CE + plain SupCon (Gunel et al.), ACL-Embed, ACL-Embed + ACL-Grad.
ACL_METHODS: dict[str, dict[str, Any]] = {
    "ce": {"mode": "ce", "gradient_gating": False},
    "supcon": {"mode": "supcon", "gradient_gating": False},
    "acl_embed": {"mode": "acl", "gradient_gating": False},
    "acl_embed_grad": {"mode": "acl", "gradient_gating": True},
}


def acl_options(method: str, **loss_options: Any) -> dict[str, Any]:
    """The registry ``acl`` loss options of one of ``ACL_METHODS`` (extra options override)."""
    if method not in ACL_METHODS:
        raise ValueError(f"method: expected one of {sorted(ACL_METHODS)}, got {method!r}")
    return {**ACL_METHODS[method], **loss_options}


def acl_loss_for_method(model, label_names: Sequence[str], method: str, train_dataset=None, **loss_options: Any):
    """The registry's ``acl`` loss (``ACLEmbedLoss``) configured as one of ``ACL_METHODS``."""
    from contrastive_bert.training.losses_registry import build_loss

    options = acl_options(method, label_names=list(label_names), **loss_options)
    return build_loss("acl", model, train_dataset, options)


def train_label_classifier(
    model,
    train_dataset,
    label_names: Sequence[str],
    method: str,
    recipe,
    output_dir: str,
    callbacks: list | None = None,
    **loss_options: Any,
):
    """Train ``model`` (a label head is appended) on ``train_dataset`` (``text``, ``label``) with
    ``method`` via :func:`contrastive_bert.training.runner.fit` and the registry ``acl`` entry's
    batches (several classes with several samples each, every class all epoch long: the registry's
    :class:`~contrastive_bert.losses.acl_embed.ClassMixedBatchSampler`). Returns ``(trainer, loss)``."""
    from contrastive_bert.training.losses_registry import get_loss_entry
    from contrastive_bert.training.runner import fit

    missing = {"text", "label"} - set(train_dataset.column_names)
    if missing:
        raise ValueError(f"train_dataset: missing columns {sorted(missing)}")
    loss = acl_loss_for_method(model, label_names, method, train_dataset, **loss_options)
    trainer = fit(model, train_dataset, loss, recipe, output_dir, callbacks=callbacks,
                  batch_sampler=get_loss_entry("acl").batch_sampler)
    return trainer, loss
