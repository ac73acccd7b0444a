"""Loss names usable in recipes and on the CLI, each with the training-data format it needs.

Data formats (built by :mod:`contrastive_bert.training.train_data`):
- ``pairs``: columns ``anchor``, ``positive`` (positive pairs of pair/retrieval data sets);
- ``scored_pairs``: ``sentence1``, ``sentence2``, ``score`` in [0, 1];
- ``labelled``: ``text``, ``label`` (one classification data set).

Register a loss with :func:`register_loss`; builders import lazily so that the CLI starts fast.
Each entry names (as ``"module:Class"`` strings) the loss class(es) whose constructor keywords are
its valid ``loss_options``, so :meth:`LossEntry.check_options` can reject a misspelled or
out-of-range option before any model or data loads: unknown names against the signatures, then
each class's own ``check_options(options)`` classmethod (if it has one) on the options it takes.
"""

from __future__ import annotations

import difflib
import importlib
import inspect
import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

DATA_FORMATS = ("pairs", "scored_pairs", "labelled")
# Parameters a builder fills itself: never user options.
BUILDER_FILLED = frozenset({"self", "model", "train_dataset", "train_dataset_size", "batch_size"})


def import_target(target: str) -> Any:
    """``"package.module:Qualname"`` -> the object (imported only when needed)."""
    module_name, _, attribute = target.partition(":")
    if not attribute:
        raise ValueError(f"options_from: expected 'module:Name', got {target!r}")
    obj = importlib.import_module(module_name)
    for part in attribute.split("."):
        obj = getattr(obj, part)
    return obj


def _keyword_names(target: Any) -> tuple[set[str], bool]:
    """Named keyword parameters of a class's constructor (or a function), and whether it takes ``**kwargs``."""
    parameters = inspect.signature(target).parameters.values()
    names = {p.name for p in parameters if p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY)}
    return names - BUILDER_FILLED, any(p.kind is p.VAR_KEYWORD for p in parameters)


@dataclass(frozen=True)
class LossEntry:
    """``build(model, train_dataset, recipe) -> nn.Module`` plus what the loss needs to train.

    ``options_from``: ``"module:Name"`` of the loss class (and of any builder in front of it)
    whose keyword parameters are the valid ``loss_options``; ``extra_options``: names the
    builder consumes itself; ``check``: value checks for a loss class without ``check_options``
    (sentence-transformers' own losses)."""

    name: str
    data_format: str
    build: Callable[..., Any]
    batch_sampler: str = "batch_sampler"  # a sentence_transformers BatchSamplers value
    description: str = ""
    options_from: tuple[str, ...] = ()
    extra_options: tuple[str, ...] = ()
    check: Callable[[Mapping[str, Any]], None] | None = None

    def option_names(self) -> set[str] | None:
        """Every valid option name, or None when any name goes (all targets take ``**kwargs``)."""
        if not self.options_from:
            return None
        names, open_ended = set(self.extra_options), True
        for target in self.options_from:
            target_names, takes_kwargs = _keyword_names(import_target(target))
            names |= target_names
            open_ended = open_ended and takes_kwargs
        return None if open_ended else names

    def check_options(self, options: Mapping[str, Any]) -> None:
        """Raise ``ValueError("loss_options.<name>: ...")`` for an unknown name or a bad value; needs no model."""
        if not isinstance(options, Mapping):
            raise ValueError(f"loss_options: expected a mapping of option names to values, got {options!r}")
        known = self.option_names()
        if known is not None:
            for key in options:
                if key not in known:
                    close = difflib.get_close_matches(key, known, n=1)
                    hint = f" (did you mean {close[0]!r}?)" if close else ""
                    raise ValueError(
                        f"loss_options.{key}: unknown option of loss {self.name!r}{hint}; "
                        f"options are {', '.join(sorted(known)) or 'none'}"
                    )
        if self.check is not None:
            self.check(options)
        for target in self.options_from:
            loss_class = import_target(target)
            if inspect.isclass(loss_class) and hasattr(loss_class, "check_options"):
                accepted, takes_kwargs = _keyword_names(loss_class)
                loss_class.check_options({k: v for k, v in options.items() if takes_kwargs or k in accepted})


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


def _check_sentence_transformers_options(options: Mapping[str, Any]) -> None:
    """Value ranges of the options sentence-transformers' MNRL / CachedMNRL / CoSENT take from JSON."""
    scale = options.get("scale", 20.0)
    if isinstance(scale, bool) or not isinstance(scale, (int, float)) or not math.isfinite(scale) or scale <= 0:
        raise ValueError(f"loss_options.scale: expected a positive number, got {scale!r}")
    for name in ("mini_batch_size", "mini_batch_num_tokens"):
        value = options.get(name)
        if value is not None and (isinstance(value, bool) or not isinstance(value, int) or value < 1):
            raise ValueError(f"loss_options.{name}: expected a positive integer, got {value!r}")
    if "similarity_fct" in options:
        raise ValueError("loss_options.similarity_fct: a Python function; not settable from a recipe or the CLI")


_ST_LOSSES = "sentence_transformers.sentence_transformer.losses"


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
register_loss(LossEntry("mnrl", "pairs", _mnrl, "no_duplicates", "MultipleNegativesRankingLoss (in-batch InfoNCE)",
                        options_from=(f"{_ST_LOSSES}:MultipleNegativesRankingLoss",), check=_check_sentence_transformers_options))
register_loss(LossEntry("cached_mnrl", "pairs", _cached_mnrl, "no_duplicates", "CachedMultipleNegativesRankingLoss (GradCache)",
                        options_from=(f"{_ST_LOSSES}:CachedMultipleNegativesRankingLoss",), check=_check_sentence_transformers_options))
register_loss(LossEntry("cosent", "scored_pairs", _cosent, "batch_sampler", "CoSENTLoss on scored pairs",
                        options_from=(f"{_ST_LOSSES}:CoSENTLoss",), check=_check_sentence_transformers_options))

# contrastive_bert's own losses (registered below by their modules' builders).


def _queue_infonce(model, train_dataset, recipe):
    options = dict(recipe.loss_options)
    if options.pop("cached", False):  # alias of the loss name cached_queue_infonce
        from contrastive_bert.losses.cached_queue_infonce import build_cached_queue_infonce_loss

        return build_cached_queue_infonce_loss(model, len(train_dataset), recipe.batch_size, **options)
    from contrastive_bert.losses.queue_infonce import build_queue_infonce_loss

    return build_queue_infonce_loss(model, len(train_dataset), recipe.batch_size, **options)


def _cached_queue_infonce(model, train_dataset, recipe):
    from contrastive_bert.losses.cached_queue_infonce import build_cached_queue_infonce_loss

    return build_cached_queue_infonce_loss(model, len(train_dataset), recipe.batch_size, **recipe.loss_options)


def _queue_cosent(model, train_dataset, recipe):
    from contrastive_bert.losses.queue_cosent import build_queue_cosent_loss

    return build_queue_cosent_loss(model, len(train_dataset), recipe.batch_size, **recipe.loss_options)


def _check_queue_infonce(options: Mapping[str, Any]) -> None:
    """``cached`` is a flag; with it the GradCache options are checked too."""
    cached = options.get("cached", False)
    if not isinstance(cached, bool):
        raise ValueError(f"loss_options.cached: expected true or false, got {cached!r}")
    if cached:
        from contrastive_bert.losses.cached_queue_infonce import CachedQueueInfoNCELoss

        CachedQueueInfoNCELoss.check_options({k: v for k, v in options.items() if k != "cached"})


_QUEUE = "contrastive_bert.losses.queue_infonce:QueueInfoNCELoss"
_CACHED_QUEUE = "contrastive_bert.losses.cached_queue_infonce:CachedQueueInfoNCELoss"
register_loss(LossEntry("queue_infonce", "pairs", _queue_infonce, "no_duplicates", "InfoNCE + FIFO embedding queue + mined hard negatives (loss_options: queue_size, temperature, num_hard_negatives, hard_negative_share, momentum, perc_pos, guide_model, ...; cached=true is cached_queue_infonce)",
                        options_from=(_QUEUE, "contrastive_bert.losses.cached_queue_infonce:build_cached_queue_infonce_loss"),
                        extra_options=("cached", "mini_batch_size", "mini_batch_num_tokens", "show_progress_bar"), check=_check_queue_infonce))
register_loss(LossEntry("cached_queue_infonce", "pairs", _cached_queue_infonce, "no_duplicates", "queue_infonce with GradCache for large batches (loss_options: those of queue_infonce + mini_batch_size, mini_batch_num_tokens)",
                        options_from=(_QUEUE, _CACHED_QUEUE), extra_options=("mini_batch_size", "mini_batch_num_tokens", "show_progress_bar")))
register_loss(LossEntry("queue_cosent", "scored_pairs", _queue_cosent, "batch_sampler", "InfoNCE with the queue over high-score pairs + weight x CoSENT/AnglE over all scored pairs; low-score partners as negatives (loss_options: infonce_weight, score_weight, score_term, score_scale, positive_threshold, negative_threshold + those of queue_infonce)",
                        options_from=("contrastive_bert.losses.queue_cosent:QueueCoSENTLoss", _QUEUE)))


def _acl(model, train_dataset, recipe):
    from contrastive_bert.losses.acl_embed import build_acl_loss

    return build_acl_loss(model, train_dataset, **recipe.loss_options)


register_loss(LossEntry("acl", "labelled", _acl, "group_by_label", "CE + lambda x label-anchored SupCon with ACL-Grad gating; head saved with the model (loss_options: temperature, contrastive_weight, gradient_gating, angle_threshold, mode=acl|supcon|ce, label_embedding=free|encoded, label_template, angle_parameters=all|head_last_layer, angle_every, ...)",
                        options_from=("contrastive_bert.losses.acl_embed:build_acl_loss", "contrastive_bert.losses.acl_embed:ACLEmbedLoss")))
