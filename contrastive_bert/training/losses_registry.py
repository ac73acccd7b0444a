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
Option names are read from the classes' source where it says them, so that a misspelled option
of a sentence-transformers loss is reported without importing sentence-transformers.
"""

from __future__ import annotations

import ast
import difflib
import importlib
import importlib.util
import inspect
import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
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


def _module_file(module: str) -> Path | None:
    """The source file of ``module``, found without importing it (nor its packages)."""
    top, *rest = module.split(".")
    try:
        spec = importlib.util.find_spec(top)
    except (ImportError, ValueError):  # e.g. a module object without a spec
        return None
    if spec is None or not spec.submodule_search_locations:
        return Path(spec.origin) if spec is not None and spec.origin and not rest else None
    folder = Path(next(iter(spec.submodule_search_locations))).joinpath(*rest)
    for candidate in (folder / "__init__.py", folder.with_suffix(".py")):
        if candidate.is_file():
            return candidate
    return None


def _definition(module: str, name: str, depth: int = 0) -> ast.ClassDef | ast.FunctionDef | None:
    """The class or function ``name`` of ``module`` in its source (following ``from .x import name``)."""
    path = _module_file(module)
    if path is None or depth > 3:
        return None
    tree = ast.parse(path.read_text(encoding="utf-8"))
    for node in tree.body:
        if isinstance(node, (ast.ClassDef, ast.FunctionDef)) and node.name == name:
            return node
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    for node in tree.body:
        if isinstance(node, ast.ImportFrom) and node.level and any(a.name == name and a.asname in (None, name) for a in node.names):
            base = package.rsplit(".", node.level - 1)[0] if node.level > 1 else package
            return _definition(f"{base}.{node.module}" if node.module else base, name, depth + 1)
    return None


def _source_keyword_names(target: str) -> tuple[set[str], bool, bool] | None:
    """``(names, takes_kwargs, defines_check_options)`` of a ``"module:Name"`` read from its source,
    so that no library is imported to check option names; None when the source does not say."""
    module, _, name = target.partition(":")
    node = _definition(module, name)
    defines_check = False
    if isinstance(node, ast.ClassDef):
        methods = {n.name: n for n in node.body if isinstance(n, ast.FunctionDef)}
        defines_check = "check_options" in methods
        node = methods.get("__init__")
        if node is None:
            return None
    if node is None:
        return None
    arguments = node.args
    names = {a.arg for a in arguments.args + arguments.kwonlyargs}
    return names - BUILDER_FILLED, arguments.kwarg is not None, defines_check


def _target_keyword_names(target: str) -> tuple[set[str], bool]:
    from_source = _source_keyword_names(target)
    return from_source[:2] if from_source is not None else _keyword_names(import_target(target))


def _may_check_values(target: str) -> bool:
    """Whether ``target`` may have a ``check_options`` (then it is imported to call it): this
    package's classes always may; another library's only if its source defines one."""
    from_source = _source_keyword_names(target)
    return target.startswith("contrastive_bert.") or from_source is None or from_source[2]


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
            target_names, takes_kwargs = _target_keyword_names(target)
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
            if not _may_check_values(target):
                continue
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


def _cross_layer(model, train_dataset, recipe):
    from contrastive_bert.losses.cross_layer import build_cross_layer_loss

    return build_cross_layer_loss(model, train_dataset, **recipe.loss_options)


register_loss(LossEntry("cross_layer", "labelled", _cross_layer, "group_by_label", "exit heads on intermediate layers trained by CE + ACL-CL / logit KD towards the final classifier, backbone frozen by default (loss_options: method=acl_cl|kd|ce, exit_layers, exit_head=linear|mha, head_dim, temperature, weight, freeze_backbone)",
                        options_from=("contrastive_bert.losses.cross_layer:CrossLayerLoss",)))
