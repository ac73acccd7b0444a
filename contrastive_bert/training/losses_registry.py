"""Loss names usable in recipes, on the CLI and in the benchmarks, each with the training-data
format it needs and the option names it takes.

Data formats (built by :mod:`contrastive_bert.training.train_data`):
- ``pairs``: columns ``anchor``, ``positive`` (positive pairs of pair/retrieval data sets);
- ``scored_pairs``: ``sentence1``, ``sentence2``, ``score`` in [0, 1];
- ``labelled``: ``text``, ``label`` (one classification data set).

Build a registered loss with :func:`build_loss` (or ``get_loss_entry(name).build(model, data, recipe)``);
register one with :func:`register_loss`. Builders import lazily so that the CLI starts fast.

Each entry declares its option names, so :meth:`LossEntry.check_options` rejects a misspelled or
out-of-range option before any model or data loads:
- sentence-transformers' losses list them in ``options`` (checked against the classes'
  signatures by the tests), so a misspelled option fails without importing sentence-transformers;
- this package's losses name their class in ``options_from``: its ``option_names()`` classmethod
  (or, for a class without one, its constructor's keywords) gives the names, its
  ``check_options(options)`` classmethod the value checks.
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
# Parameters a builder fills itself: never user options (``guide``: GISTEmbed's guide model, set by ``guide_model``).
BUILDER_FILLED = frozenset({"self", "model", "train_dataset", "train_dataset_size", "batch_size", "guide"})

# A builder: (model, train_dataset, options, batch_size) -> the loss module.
Builder = Callable[[Any, Any, dict, "int | None"], Any]


def import_target(target: str) -> Any:
    """``"package.module:Qualname"`` -> the object (imported only when needed)."""
    module_name, _, attribute = target.partition(":")
    if not attribute:
        raise ValueError(f"options_from: expected 'module:Name', got {target!r}")
    obj = importlib.import_module(module_name)
    for part in attribute.split("."):
        obj = getattr(obj, part)
    return obj


def keyword_names(target: Any) -> tuple[set[str], bool]:
    """Named keyword parameters of a class's constructor (or a function) minus :data:`BUILDER_FILLED`,
    and whether it takes ``**kwargs``."""
    parameters = inspect.signature(target).parameters.values()
    names = {p.name for p in parameters if p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY)}
    return names - BUILDER_FILLED, any(p.kind is p.VAR_KEYWORD for p in parameters)


def declared_option_names(loss_class: Any) -> tuple[set[str], bool]:
    """A loss class's option names: its ``option_names()`` classmethod if it has one, else its
    constructor's keywords. Returns ``(names, open_ended)``."""
    if hasattr(loss_class, "option_names"):
        return set(loss_class.option_names()) - BUILDER_FILLED, False
    return keyword_names(loss_class)


@dataclass(frozen=True)
class LossEntry:
    """One registered loss: ``make(model, train_dataset, options, batch_size) -> nn.Module``
    plus what it needs to train.

    ``options``: the option names, declared (no import needed; sentence-transformers' losses);
    ``options_from``: ``"module:Name"`` of the class(es) that declare the options otherwise
    (``option_names()`` / ``check_options()`` classmethods, or constructor keywords), and for a
    sentence-transformers loss the class it builds (the tests compare ``options`` with it);
    ``extra_options``: names the builder consumes itself; ``check``: value checks for losses
    without a ``check_options`` (sentence-transformers' own)."""

    name: str
    data_format: str
    make: Builder
    batch_sampler: str | Callable[..., Any] = "batch_sampler"  # a sentence_transformers BatchSamplers value, or a sampler factory
    description: str = ""
    options_from: tuple[str, ...] = ()
    extra_options: tuple[str, ...] = ()
    check: Callable[[Mapping[str, Any]], None] | None = None
    options: tuple[str, ...] = ()
    in_batch_negatives: bool = False  # negatives only from its own batch: accumulation does not add any

    def build(self, model, train_dataset, recipe):
        """The loss for a :class:`~contrastive_bert.training.recipe.TrainingRecipe` (its
        ``loss_options`` and ``batch_size``, if it has one)."""
        return self.make(model, train_dataset, dict(recipe.loss_options), getattr(recipe, "batch_size", None))

    def _classes(self) -> list[Any]:
        """The ``options_from`` classes whose options are not declared in ``options`` (imported)."""
        return [] if self.options else [import_target(target) for target in self.options_from]

    def option_names(self) -> set[str] | None:
        """Every valid option name, or None when any name goes (all classes take ``**kwargs``)."""
        if self.options:
            return set(self.options) | set(self.extra_options)
        if not self.options_from:
            return None
        names, open_ended = set(self.extra_options), True
        for loss_class in self._classes():
            class_names, takes_kwargs = declared_option_names(loss_class)
            names |= class_names
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
        for loss_class in self._classes():
            if inspect.isclass(loss_class) and hasattr(loss_class, "check_options"):
                accepted, open_ended = declared_option_names(loss_class)
                loss_class.check_options({k: v for k, v in options.items() if open_ended or k in accepted})


LOSSES: dict[str, LossEntry] = {}


def register_loss(entry: LossEntry) -> LossEntry:
    if entry.data_format not in DATA_FORMATS:
        raise ValueError(f"data_format: expected one of {DATA_FORMATS}, got {entry.data_format!r}")
    LOSSES[entry.name] = entry
    return entry


def accumulation_hint(loss: str, gradient_accumulation_steps: int, loss_options: Mapping[str, Any] | None = None) -> str | None:
    """One line for a loss whose negatives come from its own batch trained with gradient
    accumulation > 1: the micro-batches never see each other's documents (sentence-transformers
    issue 2916), and what does enlarge the negatives: the loss's GradCache form at the full batch,
    the best small-memory way measured (``eval/bench_memory_budget.py``; ContAccum's dual bank
    trailed even plain accumulation there, so it is not suggested). A queue loss whose dual bank is
    cleared at every optimizer step (``bank_scope: step``) without accumulation: its bank stays
    empty and the loss is MNRL's, said too. None when neither applies."""
    options = loss_options or {}
    if (loss in ("queue_infonce", "cached_queue_infonce") and options.get("dual_bank") and options.get("bank_scope") == "step"
            and gradient_accumulation_steps <= 1):
        return (f"note: {loss} with dual_bank and bank_scope: step banks only the optimizer step's earlier micro-batches; "
                "with no gradient accumulation the bank stays empty and the loss is MNRL's. Set --gradient-accumulation-steps "
                "above 1, or bank_scope: fifo to keep rows across steps")
    entry = LOSSES.get(loss)
    if entry is None or not entry.in_batch_negatives or gradient_accumulation_steps <= 1:
        return None
    cached = loss if loss.startswith("cached_") else f"cached_{loss}"
    cached = cached if cached in LOSSES else "cached_mnrl"
    return (f"note: gradient accumulation ({gradient_accumulation_steps} micro-batches a step) does not enlarge {loss}'s "
            "in-batch negatives: each micro-batch sees only its own documents. For the negatives of the whole step in the "
            f"same memory, train {cached} at the full batch ({gradient_accumulation_steps} x the batch size, mini_batch_size "
            "in loss_options) without accumulation: GradCache, the exact large-batch gradient for a second forward pass; "
            "docs/results.md#training-under-a-memory-budget")


# Names users of the field type for a loss (sentence-transformers' class names, the papers' names; compared
# lower-case, without "_", "-" and a trailing "loss"), and what this package calls it: a hint in the error,
# not an alias, so every loss keeps one name in recipes and results.
FIELD_NAMES = {
    "multiplenegativesranking": "mnrl", "infonce": "mnrl (in-batch InfoNCE) or queue_infonce (with a queue)",
    "simcse": "mnrl on (text, text) pairs", "triplet": "mnrl on (anchor, positive, negative) rows",
    "cachedmultiplenegativesranking": "cached_mnrl", "gradcache": "cached_mnrl",
    "gistembed": "gist", "cachedgistembed": "cached_gist",
    "moco": "queue_infonce (loss_options: momentum for a momentum encoder)", "queue": "queue_infonce or queue_cosent",
    "contaccum": "queue_infonce (loss_options: dual_bank)",
    "supcon": "acl (loss_options: {mode: supcon})", "supervisedcontrastive": "acl (loss_options: {mode: supcon})",
    "crossentropy": "acl (loss_options: {mode: ce})", "softmax": "acl (loss_options: {mode: ce})",
    "aclembed": "acl", "aclgrad": "acl (loss_options: {gradient_gating: true})", "aclcl": "cross_layer",
    "adaptivelayer": "cross_layer (exit heads on intermediate layers)", "earlyexit": "cross_layer",
}


def _field_name_hint(name: str) -> str:
    """`` 'X' here is Y.`` for a field name of a loss or a registered name written otherwise ("CoSENTLoss",
    "Queue-InfoNCE"); empty for anything else."""
    def key(text: str) -> str:
        return "".join(c for c in str(text).lower() if c not in "_- ")

    wanted = key(name)
    known = {**{key(n): n for n in LOSSES}, **FIELD_NAMES}
    target = known.get(wanted) or known.get(wanted.removesuffix("loss"))
    return f" '{name}' here is {target}." if target else ""


def get_loss_entry(name: str) -> LossEntry:
    if name not in LOSSES:
        hint = _field_name_hint(name)
        if not hint:
            close = difflib.get_close_matches(name, LOSSES, n=2, cutoff=0.6)  # 0.4 offered cosent for "nonsense"
            hint = f" Did you mean {', '.join(repr(c) for c in close)}?" if close else ""
        raise ValueError(f"loss: unknown loss {name!r}; known: {', '.join(sorted(LOSSES))}.{hint}")
    return LOSSES[name]


def build_loss(name: str, model, train_dataset, options: Mapping[str, Any] | None = None, batch_size: int | None = None):
    """The registered loss ``name`` for ``model``: options checked (``ValueError`` naming
    ``loss_options.<name>``), then built. ``train_dataset`` (its length sizes the queue losses'
    queue; the labelled losses read their labels) and ``batch_size`` are what a recipe would give."""
    entry = get_loss_entry(name)
    options = dict(options or {})
    entry.check_options(options)
    return entry.make(model, train_dataset, options, batch_size)


# --------------------------------------------------------------------------- sentence-transformers' losses
# The baselines every contrastive_bert loss is measured against. Option names are declared here
# (tests/training/test_recipe.py checks them against the installed classes' signatures) so that a
# misspelled option fails without importing sentence-transformers.

_ST_LOSSES = "sentence_transformers.sentence_transformer.losses"
_MNRL_OPTIONS = ("scale", "similarity_fct", "gather_across_devices", "directions", "partition_mode",
                 "hardness_mode", "hardness_strength")
_CACHED_OPTIONS = ("mini_batch_size", "mini_batch_num_tokens", "show_progress_bar")
_GIST_OPTIONS = ("temperature", "margin_strategy", "margin", "contrast_anchors", "contrast_positives",
                 "gather_across_devices")
_DIRECTIONS = ("query_to_doc", "query_to_query", "doc_to_query", "doc_to_doc")


def _expected(name: str, expected: str, value: Any) -> ValueError:
    return ValueError(f"loss_options.{name}: expected {expected}, got {value!r}")


def _is_number(value: Any) -> bool:
    return not isinstance(value, bool) and isinstance(value, (int, float)) and math.isfinite(value)


def _check_sentence_transformers_options(options: Mapping[str, Any]) -> None:
    """Value ranges of the options sentence-transformers' losses take from JSON."""
    for name in ("scale", "temperature"):
        if name in options and not (_is_number(options[name]) and options[name] > 0):
            raise _expected(name, "a positive number", options[name])
    for name in ("mini_batch_size", "mini_batch_num_tokens"):
        value = options.get(name)
        if value is not None and (isinstance(value, bool) or not isinstance(value, int) or value < 1):
            raise _expected(name, "a positive integer", value)
    if "similarity_fct" in options:
        raise ValueError("loss_options.similarity_fct: a Python function; not settable from a recipe or the CLI")
    for name in ("gather_across_devices", "show_progress_bar", "contrast_anchors", "contrast_positives"):
        if name in options and not isinstance(options[name], bool):
            raise _expected(name, "true or false", options[name])
    choices = {"partition_mode": ("joint", "per_direction"), "margin_strategy": ("absolute", "relative"),
               "hardness_mode": ("in_batch_negatives", "hard_negatives", "all_negatives", None)}
    for name, allowed in choices.items():
        if name in options and options[name] not in allowed:
            raise _expected(name, "one of " + ", ".join(repr(c) for c in allowed), options[name])
    if "hardness_strength" in options and not (_is_number(options["hardness_strength"]) and options["hardness_strength"] >= 0):
        raise _expected("hardness_strength", "a number >= 0", options["hardness_strength"])
    if "margin" in options and not _is_number(options["margin"]):
        raise _expected("margin", "a finite number", options["margin"])
    if "directions" in options:
        directions = options["directions"]
        if isinstance(directions, str) or not isinstance(directions, (list, tuple)) or not directions or any(
            d not in _DIRECTIONS for d in directions
        ):
            raise _expected("directions", "a non-empty list of " + ", ".join(repr(d) for d in _DIRECTIONS), directions)
    guide = options.get("guide_model", "default")
    if not isinstance(guide, str) and not hasattr(guide, "encode"):
        raise _expected("guide_model", "a model name or path, or a SentenceTransformer", guide)


def _st_options(options: dict) -> dict:
    """JSON values as sentence-transformers takes them (``directions`` a tuple)."""
    if isinstance(options.get("directions"), list):
        options["directions"] = tuple(options["directions"])
    return options


def _mnrl(model, train_dataset, options, batch_size):
    from sentence_transformers.sentence_transformer.losses import MultipleNegativesRankingLoss

    return MultipleNegativesRankingLoss(model, **_st_options(options))


def _cached_mnrl(model, train_dataset, options, batch_size):
    from sentence_transformers.sentence_transformer.losses import CachedMultipleNegativesRankingLoss

    return CachedMultipleNegativesRankingLoss(model, **_st_options({"mini_batch_size": 32, **options}))


def _cosent(model, train_dataset, options, batch_size):
    from sentence_transformers.sentence_transformer.losses import CoSENTLoss

    return CoSENTLoss(model, **options)


def _angle(model, train_dataset, options, batch_size):
    from sentence_transformers.sentence_transformer.losses import AnglELoss

    return AnglELoss(model, **options)


def _gist(model, train_dataset, options, batch_size):
    from sentence_transformers.sentence_transformer.losses import GISTEmbedLoss

    from contrastive_bert.losses.guide_filter import load_guide_model

    guide = load_guide_model(options.pop("guide_model", "default"), model)
    return GISTEmbedLoss(model, guide, **options)


def _cached_gist(model, train_dataset, options, batch_size):
    from sentence_transformers.sentence_transformer.losses import CachedGISTEmbedLoss

    from contrastive_bert.losses.guide_filter import load_guide_model

    guide = load_guide_model(options.pop("guide_model", "default"), model)
    return CachedGISTEmbedLoss(model, guide, **{"mini_batch_size": 32, **options})


register_loss(LossEntry("mnrl", "pairs", _mnrl, "no_duplicates", "MultipleNegativesRankingLoss (in-batch InfoNCE)",
                        options_from=(f"{_ST_LOSSES}:MultipleNegativesRankingLoss",), options=_MNRL_OPTIONS,
                        check=_check_sentence_transformers_options, in_batch_negatives=True))
register_loss(LossEntry("cached_mnrl", "pairs", _cached_mnrl, "no_duplicates", "CachedMultipleNegativesRankingLoss (GradCache)",
                        options_from=(f"{_ST_LOSSES}:CachedMultipleNegativesRankingLoss",), options=_MNRL_OPTIONS + _CACHED_OPTIONS,
                        check=_check_sentence_transformers_options, in_batch_negatives=True))
register_loss(LossEntry("cosent", "scored_pairs", _cosent, "batch_sampler", "CoSENTLoss on scored pairs",
                        options_from=(f"{_ST_LOSSES}:CoSENTLoss",), options=("scale", "similarity_fct"),
                        check=_check_sentence_transformers_options))
register_loss(LossEntry("angle", "scored_pairs", _angle, "batch_sampler", "AnglELoss on scored pairs (CoSENT on angle differences)",
                        options_from=(f"{_ST_LOSSES}:AnglELoss",), options=("scale",),
                        check=_check_sentence_transformers_options))
register_loss(LossEntry("gist", "pairs", _gist, "no_duplicates", "GISTEmbedLoss: in-batch InfoNCE whose negatives a frozen guide model vetoes (loss_options: guide_model='default' = the bundled model, temperature, margin_strategy, margin, ...)",
                        options_from=(f"{_ST_LOSSES}:GISTEmbedLoss",), options=("guide_model",) + _GIST_OPTIONS,
                        check=_check_sentence_transformers_options, in_batch_negatives=True))
register_loss(LossEntry("cached_gist", "pairs", _cached_gist, "no_duplicates", "CachedGISTEmbedLoss: gist with GradCache for large batches",
                        options_from=(f"{_ST_LOSSES}:CachedGISTEmbedLoss",), options=("guide_model",) + _GIST_OPTIONS + _CACHED_OPTIONS,
                        check=_check_sentence_transformers_options, in_batch_negatives=True))

# --------------------------------------------------------------------------- contrastive_bert's losses


def _queue_infonce(model, train_dataset, options, batch_size):
    from contrastive_bert.losses.queue_infonce import build_queue_infonce_loss

    return build_queue_infonce_loss(model, len(train_dataset), batch_size, **options)


def _cached_queue_infonce(model, train_dataset, options, batch_size):
    from contrastive_bert.losses.cached_queue_infonce import build_cached_queue_infonce_loss

    return build_cached_queue_infonce_loss(model, len(train_dataset), batch_size, **options)


def _queue_cosent(model, train_dataset, options, batch_size):
    from contrastive_bert.losses.queue_cosent import build_queue_cosent_loss

    return build_queue_cosent_loss(model, len(train_dataset), batch_size, **options)


register_loss(LossEntry("queue_infonce", "pairs", _queue_infonce, "no_duplicates", "InfoNCE + FIFO embedding queue (or ContAccum's dual bank) + mined hard negatives; measured: no gain over mnrl on mined triplets, nor under accumulation (docs/results.md) (loss_options: queue_size, temperature, num_hard_negatives, hard_negative_share, momentum, perc_pos, guide_model, ...)",
                        options_from=("contrastive_bert.losses.queue_infonce:QueueInfoNCELoss",)))
register_loss(LossEntry("cached_queue_infonce", "pairs", _cached_queue_infonce, "no_duplicates", "queue_infonce with GradCache for large batches (loss_options: those of queue_infonce + mini_batch_size, mini_batch_num_tokens)",
                        options_from=("contrastive_bert.losses.cached_queue_infonce:CachedQueueInfoNCELoss",)))
register_loss(LossEntry("queue_cosent", "scored_pairs", _queue_cosent, "batch_sampler", "InfoNCE with the queue over high-score pairs + weight x CoSENT/AnglE over all scored pairs; low-score partners as negatives; measured: below cosent on STS-B (docs/results.md) (loss_options: infonce_weight, score_weight, score_term, score_scale, positive_threshold, negative_threshold + those of queue_infonce)",
                        options_from=("contrastive_bert.losses.queue_cosent:QueueCoSENTLoss",)))


def class_mixed_batches(dataset, **kwargs):
    """The ``acl`` loss's batches (a sentence-transformers ``batch_sampler`` callable):
    :class:`~contrastive_bert.losses.acl_embed.ClassMixedBatchSampler`, every class all epoch long
    (``group_by_label`` ends each epoch with the largest classes only; issue 38)."""
    from contrastive_bert.losses.acl_embed import ClassMixedBatchSampler

    return ClassMixedBatchSampler(dataset, **kwargs)


def _acl(model, train_dataset, options, batch_size):
    from contrastive_bert.losses.acl_embed import build_acl_loss

    return build_acl_loss(model, train_dataset, **options)


register_loss(LossEntry("acl", "labelled", _acl, class_mixed_batches, "CE + lambda x label-anchored SupCon with ACL-Grad gating; head saved with the model (loss_options: temperature, contrastive_weight, gradient_gating, angle_threshold, mode=acl|supcon|ce, label_embedding=free|encoded, label_template, angle_parameters=all|head_last_layer, angle_every, ...)",
                        options_from=("contrastive_bert.losses.acl_embed:build_acl_loss", "contrastive_bert.losses.acl_embed:ACLEmbedLoss")))


def _cross_layer(model, train_dataset, options, batch_size):
    from contrastive_bert.losses.cross_layer import build_cross_layer_loss

    return build_cross_layer_loss(model, train_dataset, **options)


register_loss(LossEntry("cross_layer", "labelled", _cross_layer, class_mixed_batches, "exit heads on intermediate layers trained by CE + ACL-CL / logit KD towards the final classifier, backbone frozen by default (loss_options: method=acl_cl|kd|ce, exit_layers, exit_head=linear|mha, head_dim, temperature, weight, freeze_backbone)",
                        options_from=("contrastive_bert.losses.cross_layer:CrossLayerLoss",)))
