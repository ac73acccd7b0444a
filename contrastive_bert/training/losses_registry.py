"""Loss names usable in recipes and on the CLI, each with the training-data format it needs.

Data formats (built by :mod:`contrastive_bert.training.train_data`):
- ``pairs``: columns ``anchor``, ``positive`` (positive pairs of pair/retrieval data sets);
- ``scored_pairs``: ``sentence1``, ``sentence2``, ``score`` in [0, 1];
- ``labelled``: ``text``, ``label`` (one classification data set).

Register a loss with :func:`register_loss`; builders import lazily so that the CLI starts fast.
"""

from __future__ import annotations

import difflib
from collections.abc import Callable
from dataclasses import dataclass

from torch import nn

DATA_FORMATS = ("pairs", "scored_pairs", "labelled")


@dataclass(frozen=True)
class LossEntry:
    """``build(model, train_dataset, recipe) -> nn.Module`` plus what the loss needs to train."""

    name: str
    data_format: str
    build: Callable[..., nn.Module]
    batch_sampler: str = "batch_sampler"  # a sentence_transformers BatchSamplers value
    description: str = ""


LOSSES: dict[str, LossEntry] = {}


def register_loss(entry: LossEntry) -> LossEntry:
    if entry.data_format not in DATA_FORMATS:
        raise ValueError(f"data_format: expected one of {DATA_FORMATS}, got {entry.data_format!r}")
    LOSSES[entry.name] = entry
    return entry


def get_loss_entry(name: str) -> LossEntry:
    if name not in LOSSES:
        close = difflib.get_close_matches(name, LOSSES, n=2, cutoff=0.4)
        hint = f" Did you mean {', '.join(repr(c) for c in close)}?" if close else ""
        raise ValueError(f"loss: unknown loss {name!r}; known: {', '.join(sorted(LOSSES))}.{hint}")
    return LOSSES[name]


def _mnrl(model, train_dataset, recipe):
    from sentence_transformers.sentence_transformer.losses import MultipleNegativesRankingLoss

    return MultipleNegativesRankingLoss(model, **recipe.loss_options)


def _cached_mnrl(model, train_dataset, recipe):
    from sentence_transformers.sentence_transformer.losses import CachedMultipleNegativesRankingLoss

    options = {"mini_batch_size": 32, **recipe.loss_options}
    return CachedMultipleNegativesRankingLoss(model, **options)


def _cosent(model, train_dataset, recipe):
    from sentence_transformers.sentence_transformer.losses import CoSENTLoss

    return CoSENTLoss(model, **recipe.loss_options)


# sentence-transformers' own losses: the baselines every contrastive_bert loss is measured against.
register_loss(LossEntry("mnrl", "pairs", _mnrl, "no_duplicates", "MultipleNegativesRankingLoss (in-batch InfoNCE)"))
register_loss(LossEntry("cached_mnrl", "pairs", _cached_mnrl, "no_duplicates", "CachedMultipleNegativesRankingLoss (GradCache)"))
register_loss(LossEntry("cosent", "scored_pairs", _cosent, "batch_sampler", "CoSENTLoss on scored pairs"))

# contrastive_bert's own losses (registered below by their modules' builders).


def _queue_infonce(model, train_dataset, recipe):  # issue 3
    from contrastive_bert.losses.queue_infonce import build_queue_infonce_loss

    return build_queue_infonce_loss(model, len(train_dataset), recipe.batch_size, **recipe.loss_options)


register_loss(LossEntry("queue_infonce", "pairs", _queue_infonce, "no_duplicates", "InfoNCE + FIFO embedding queue + mined hard negatives (loss_options: queue_size, temperature, num_hard_negatives, hard_negative_share, momentum, cached, ...)"))


def _acl(model, train_dataset, recipe):  # issue 4
    from contrastive_bert.losses.acl_embed import build_acl_loss

    return build_acl_loss(model, train_dataset, **recipe.loss_options)


register_loss(LossEntry("acl", "labelled", _acl, "group_by_label", "CE + lambda x label-anchored SupCon with ACL-Grad gating; head saved with the model (loss_options: temperature, contrastive_weight, gradient_gating, angle_threshold, mode=acl|supcon|ce)"))
