"""Which queue rows may not be an anchor's negative: the false-negative filters of the queue losses.

Scores relative to the anchor-positive score (``absolute_margin``, ``relative_margin``,
``max_score``, ``perc_pos``: :class:`contrastive_bert.topk_search.ScoreMargins`), and rows of the
anchor's group: its integer label (``filter_same_label``) or, without labels, its anchor text
(``filter_same_anchor``). The guide model's veto is :mod:`contrastive_bert.losses.guide_filter`.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import Tensor

from contrastive_bert.losses.option_checks import check_flags
from contrastive_bert.topk_search import ScoreMargins
from contrastive_bert.queue import NO_ID

__all__ = ["FalseNegativeFilters"]


@dataclass(frozen=True)
class FalseNegativeFilters:
    """Options of the queue losses that drop false negatives; each value checked on creation
    (``ValueError("loss_options.<name>: ...")``).

    Args:
        absolute_margin / relative_margin / max_score: drop rows scoring above the anchor-positive
            score minus the margin (as ``sentence_transformers.util.mine_hard_negatives``) or above
            ``max_score``; None = off.
        perc_pos: NV-Retriever's TopK-PercPos: drop rows scoring above ``perc_pos`` x the
            anchor-positive score (e.g. 0.95); None = off.
        filter_same_label: drop rows with the batch row's label (needs integer labels).
        filter_same_anchor: without such labels, drop rows that were the positive of a pair with
            the same anchor text (a query with several correct answers).
        filter_queue_negatives: apply the filters to the plain queue negatives too, not only to
            the mined hard negatives.

    Attributes:
        margins: the four score filters as one :class:`~contrastive_bert.topk_search.ScoreMargins`, made
            (and so checked) once, on creation; the miner applies it every step.
    """

    absolute_margin: float | None = None
    relative_margin: float | None = 0.05
    max_score: float | None = None
    perc_pos: float | None = None
    filter_same_label: bool = False
    filter_same_anchor: bool = True
    filter_queue_negatives: bool = True

    def __post_init__(self) -> None:
        try:
            margins = ScoreMargins(self.absolute_margin, self.relative_margin, self.max_score, self.perc_pos)
        except ValueError as error:
            raise ValueError(f"loss_options.{error}") from None
        check_flags(vars(self), ("filter_same_label", "filter_same_anchor", "filter_queue_negatives"))
        object.__setattr__(self, "margins", margins)  # an attribute, not a field: not an option of its own

    def groups(self, labels: Tensor | None, anchor_ids: Tensor | None) -> Tensor | None:
        """``(B,)`` group of each row for the same-group filter: integer ``labels`` when
        ``filter_same_label``, else the anchor's text id when ``filter_same_anchor``, else None."""
        if self.filter_same_label and _integer_labels(labels):
            return labels.to(torch.int64)
        if self.filter_same_anchor and anchor_ids is not None and not bool((anchor_ids == NO_ID).any()):
            return anchor_ids
        return None


def _integer_labels(labels: Tensor | None) -> bool:
    return isinstance(labels, Tensor) and labels.ndim == 1 and not labels.is_floating_point()
