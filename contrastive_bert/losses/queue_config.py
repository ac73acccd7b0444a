"""The options of the queue losses, grouped by concern, each group a frozen dataclass that checks
its values once, on creation:

- :class:`InfoNCEConfig` (here): how the negatives are scored (temperature, hard-negative weight, ...);
- :class:`QueueConfig` (here): what the queue holds (size, momentum encoder, DDP gathering);
- :class:`~contrastive_bert.losses.hard_negative_miner.MiningConfig`: how negatives are chosen in it;
- :class:`~contrastive_bert.losses.false_negative_filters.FalseNegativeFilters`: which rows may not be negatives;
- :class:`~contrastive_bert.losses.guide_filter.GuideConfig`: the guide model's veto.

:class:`QueueInfoNCEConfig` holds one of each; users and recipes pass the flat option names
(``queue_size=..., temperature=...``), which :meth:`QueueInfoNCEConfig.from_options` routes to
their group. The loss's ``get_config_dict`` is derived from it.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, fields
from typing import Any, Literal

from contrastive_bert.losses.false_negative_filters import FalseNegativeFilters
from contrastive_bert.losses.guide_filter import GuideConfig
from contrastive_bert.losses.hard_negative_miner import MiningConfig
from contrastive_bert.losses.option_checks import check_choice, check_flags, check_number, check_unknown, config_dict, option_error, option_names

__all__ = ["InfoNCEConfig", "QueueConfig", "QueueInfoNCEConfig"]


@dataclass(frozen=True)
class InfoNCEConfig:
    """How the queue losses score their negatives (:func:`~contrastive_bert.losses.infonce_math.queue_infonce_loss`).

    Args:
        temperature: softmax temperature (``scale = 1 / temperature``), > 0.
        hard_negative_share: weight the hard negatives as this fraction of all negatives (seed:
            0.1-0.2); None = unweighted (each counts once, like any queue row).
        symmetric: also the positive->anchor direction over the batch, averaged with the
            anchor->candidates direction (like MNRL's ``per_direction`` symmetric loss).
        check_finite: raise ``ValueError`` when the loss is NaN/inf.
    """

    temperature: float = 0.05
    hard_negative_share: float | None = None
    symmetric: bool = False
    check_finite: bool = True

    def __post_init__(self) -> None:
        options = vars(self)
        check_number(options, "temperature", "a positive number", lambda v: v > 0)
        check_number(options, "hard_negative_share", "a number in (0, 1)", lambda v: 0 < v < 1, allow_none=True)
        check_flags(options, ("symmetric", "check_finite"))
        object.__setattr__(self, "temperature", float(self.temperature))


@dataclass(frozen=True)
class QueueConfig:
    """What the queue holds.

    Args:
        queue_size: K, rows in the queue. None: the seed's rule
            ``min(65536, 4 * train_dataset_size / global_batch)`` at the first training step.
        momentum: EMA coefficient of a momentum key encoder that embeds what is enqueued (MoCo,
            e.g. 0.999); None = enqueue the online encoder's detached positives.
        gather_across_devices: all-gather what is enqueued under DDP (same queue on every rank).
        dual_bank: bank the anchors beside their documents (positives and mined negatives), as
            ContAccum does (:class:`~contrastive_bert.memory_bank.DualMemoryBank`): each banked
            anchor is scored against this batch's documents and the bank's, so the documents get
            gradient from banked queries too (a bank of documents alone unbalances the two sides).
        bank_scope: ``"fifo"``: the bank keeps the last ``queue_size`` rows across optimizer
            steps; ``"step"``: it holds only the current optimizer step's earlier micro-batches
            (cleared at every optimizer step, so nothing in it is stale; it grows to hold a whole
            step): gradient accumulation whose negatives span the whole step.
    """

    queue_size: int | None = None
    momentum: float | None = None
    gather_across_devices: bool = True
    dual_bank: bool = False
    bank_scope: Literal["fifo", "step"] = "fifo"

    def __post_init__(self) -> None:
        options = vars(self)
        check_number(options, "queue_size", "a positive integer", lambda v: v > 0, integer=True, allow_none=True)
        check_number(options, "momentum", "a number in [0, 1)", lambda v: 0 <= v < 1, allow_none=True)
        check_flags(options, ("gather_across_devices", "dual_bank"))
        check_choice(options, "bank_scope", ("fifo", "step"))
        if self.dual_bank and self.momentum is not None:
            raise option_error("momentum", "null with dual_bank (the bank holds what the online encoder produced; "
                               "a momentum encoder embeds the document queue only)", self.momentum)


_GROUPS: dict[str, type] = {
    "infonce": InfoNCEConfig, "queue": QueueConfig, "mining": MiningConfig,
    "filters": FalseNegativeFilters, "guide": GuideConfig,
}


@dataclass(frozen=True)
class QueueInfoNCEConfig:
    """Every option of :class:`~contrastive_bert.losses.queue_infonce.QueueInfoNCELoss`, by concern."""

    infonce: InfoNCEConfig = field(default_factory=InfoNCEConfig)
    queue: QueueConfig = field(default_factory=QueueConfig)
    mining: MiningConfig = field(default_factory=MiningConfig)
    filters: FalseNegativeFilters = field(default_factory=FalseNegativeFilters)
    guide: GuideConfig = field(default_factory=GuideConfig)

    def __post_init__(self) -> None:
        size, k = self.queue.queue_size, self.mining.num_hard_negatives
        if size is not None and k > size and not self.queue.dual_bank:
            raise option_error("num_hard_negatives", f"at most queue_size ({size})", k)
        if self.queue.dual_bank and self.guide.guide_model is not None:
            raise option_error("guide_model", "null with dual_bank (the bank keeps no guide embeddings)", self.guide.guide_model)
        if self.queue.dual_bank and self.mining.distinct_queue_rows:
            raise option_error("distinct_queue_rows", "false with dual_bank", True)

    @classmethod
    def option_names(cls) -> tuple[str, ...]:
        """The flat option names (each group's field names)."""
        return tuple(name for group in _GROUPS.values() for name in option_names(group))

    @classmethod
    def from_options(cls, options: Mapping[str, Any], owner: str = "QueueInfoNCELoss") -> QueueInfoNCEConfig:
        """The config of flat ``options`` (absent ones take their defaults); ``ValueError`` naming
        ``loss_options.<name>`` for an unknown name (``owner``: the loss named in that message) or a bad value."""
        check_unknown(options, cls.option_names(), owner)
        return cls(**{
            group: config_class(**{name: options[name] for name in option_names(config_class) if name in options})
            for group, config_class in _GROUPS.items()
        })

    def as_options(self) -> dict[str, Any]:
        """The flat options, JSON-friendly (a guide model given as an object: its class name)."""
        return {name: value for group in fields(self) for name, value in config_dict(getattr(self, group.name)).items()}
