"""Choose each anchor's negatives in the queue: which rows count as plain negatives, which are
its hard negatives. Scoring them is :func:`contrastive_bert.losses.infonce_math.queue_infonce_loss`.

The false-negative filters (:func:`contrastive_bert.topk_search.false_negative_mask`) drop the anchor's
and positive's own text, rows of the same group (label or anchor text), rows scoring above the
margins relative to the positive, above ``max_score`` or above ``perc_pos`` x the positive score,
and rows an outside ``keep`` mask rejects (the guide model's filter). The hard negatives are the
filtered rows ranked ``[offset, offset + k)`` (curriculum: :class:`~contrastive_bert.topk_search.HardnessSchedule`).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

import torch
from torch import Tensor

from contrastive_bert.losses.false_negative_filters import FalseNegativeFilters
from contrastive_bert.losses.option_checks import check_choice, check_flags, check_number, option_error
from contrastive_bert.topk_search import (
    HardnessSchedule,
    faiss_available,
    false_negative_mask,
    search_hard_negatives,
    select_top_ranked,
)

__all__ = ["HardNegativeMiner", "MinedNegatives", "MiningConfig"]


@dataclass(frozen=True)
class MiningConfig:
    """Options of the queue losses that choose negatives in the queue; each value checked on
    creation (``ValueError("loss_options.<name>: ...")``).

    Args:
        num_hard_negatives: k hard negatives mined from the queue per anchor (0 = none). More than
            the queue can supply after filtering is clamped (the rest is padding).
        use_queue_negatives: use all (filtered) queue rows as negatives, MoCo style. ``False``
            keeps only the hard negatives mined from the queue, the past batches' documents (not
            ANCE, which refreshes negatives from the whole corpus with the model being trained;
            then FAISS can do the search).
        hardness_schedule: curriculum from easy to hard (a :class:`~contrastive_bert.topk_search.HardnessSchedule`
            or the mapping of its fields, as in a recipe); None = always the hardest.
        mining_backend / mining_index / use_gpu_index: see :func:`contrastive_bert.topk_search.search_topk`.
            ``auto`` uses torch when the queue scores are computed anyway, else FAISS.
        distinct_queue_rows: a document in the queue more than once (enqueued again in a later
            epoch) counts once, as its newest copy (:meth:`~contrastive_bert.queue.EmbeddingQueue.newest_copies`),
            for plain and hard negatives alike. On SciFact a queue of 1,024 over 747 rows held a
            third of its hard negatives as stale second copies (docs/results.md#retrieval).
    """

    num_hard_negatives: int = 0
    use_queue_negatives: bool = True
    distinct_queue_rows: bool = False
    hardness_schedule: HardnessSchedule | Mapping[str, Any] | None = None
    mining_backend: Literal["auto", "faiss", "torch"] = "auto"
    mining_index: Literal["flat", "ivf", "hnsw"] = "flat"
    use_gpu_index: bool | None = None

    def __post_init__(self) -> None:
        options = vars(self)
        check_number(options, "num_hard_negatives", "an integer >= 0", lambda v: v >= 0, integer=True)
        check_flags(options, ("use_queue_negatives", "distinct_queue_rows"))
        check_choice(options, "mining_backend", ("auto", "faiss", "torch"))
        check_choice(options, "mining_index", ("flat", "ivf", "hnsw"))
        if self.use_gpu_index is not None and not isinstance(self.use_gpu_index, bool):
            raise option_error("use_gpu_index", "true, false or null", self.use_gpu_index)
        schedule = self.hardness_schedule
        if isinstance(schedule, Mapping):  # from a YAML/JSON recipe
            try:
                schedule = HardnessSchedule(**schedule)
            except (TypeError, ValueError) as error:
                raise ValueError(f"loss_options.hardness_schedule: {error}") from None
        elif schedule is None:
            schedule = HardnessSchedule()
        elif not isinstance(schedule, HardnessSchedule):
            raise option_error("hardness_schedule", "a mapping of start, end, warmup_steps, pool_factor", schedule)
        object.__setattr__(self, "hardness_schedule", schedule)


@dataclass
class MinedNegatives:
    """queue_mask ``(b, n)``: rows used as plain negatives (None: none); hard_index ``(b, k)``:
    each anchor's hard-negative rows, ``-1`` = padding (None: none)."""

    queue_mask: Tensor | None = None
    hard_index: Tensor | None = None

    def hard_keys(self, keys: Tensor) -> tuple[Tensor | None, Tensor | None]:
        """``(b, k, d)`` hard-negative vectors and their ``(b, k)`` validity mask."""
        if self.hard_index is None:
            return None, None
        return keys[self.hard_index.clamp(min=0)], self.hard_index >= 0


@dataclass
class HardNegativeMiner:
    """Chooses each anchor's negatives in the queue (see the module docstring).

    Args:
        mining: how many hard negatives, whether the plain queue rows are negatives too, the
            curriculum and the search backend.
        filters: which rows may not be negatives (their score margins made and checked once, with
            the config; nothing is checked per step).
    """

    mining: MiningConfig = field(default_factory=MiningConfig)
    filters: FalseNegativeFilters = field(default_factory=FalseNegativeFilters)

    @torch.no_grad()
    def select(
        self,
        anchors: Tensor,
        positive_scores: Tensor,
        keys: Tensor,
        step: int,
        *,
        key_ids: Tensor | None = None,
        key_groups: Tensor | None = None,
        anchor_ids: Tensor | None = None,
        positive_ids: Tensor | None = None,
        anchor_groups: Tensor | None = None,
        keep: Tensor | None = None,
    ) -> MinedNegatives:
        """anchors ``(b, d)`` and keys ``(n, d)`` normalised, positive_scores ``(b,)`` cosines;
        ids/groups ``(n,)`` / ``(b,)``; keep ``(b, n)`` an extra filter; step: for the curriculum."""
        k, use_queue_negatives = self.mining.num_hard_negatives, self.mining.use_queue_negatives
        if keys.shape[0] == 0 or not (use_queue_negatives or k > 0):
            return MinedNegatives()
        anchors, keys = anchors.detach(), keys.detach()
        offset = self.mining.hardness_schedule.offset(step, k)
        margins = self.filters.margins
        groups = key_groups if anchor_groups is not None else None
        if not use_queue_negatives:
            scores = None
            if keep is not None:  # the outside filter needs every score: exact search
                scores = (anchors @ keys.T.to(anchors.dtype)).masked_fill(~keep, -math.inf)
            backend = self.mining.mining_backend
            if backend == "auto":
                backend = "faiss" if faiss_available() else "torch"
            hard_index = search_hard_negatives(
                anchors, positive_scores, keys, k, key_ids=key_ids, anchor_ids=anchor_ids, positive_ids=positive_ids,
                key_labels=key_groups, anchor_labels=anchor_groups, margins=margins, offset=offset, scores=scores,
                backend=backend, index_type=self.mining.mining_index, use_gpu=self.mining.use_gpu_index,
            )
            return MinedNegatives(hard_index=hard_index)
        scores = anchors @ keys.T.to(anchors.dtype)
        filtered = false_negative_mask(scores, positive_scores, key_ids, anchor_ids, positive_ids, groups, anchor_groups, margins)
        if keep is not None:
            filtered &= keep
        if self.filters.filter_queue_negatives:
            queue_mask = filtered.clone()
        else:
            queue_mask = false_negative_mask(scores, positive_scores, key_ids, anchor_ids, positive_ids)
            if keep is not None:
                queue_mask &= keep
        if k == 0:
            return MinedNegatives(queue_mask=queue_mask)
        hard_index = select_top_ranked(scores, filtered, k, offset)
        # each row counts once: the mined rows leave the plain negatives for the hard block
        chosen = torch.zeros(queue_mask.shape, dtype=torch.int32, device=queue_mask.device)
        chosen.scatter_add_(1, hard_index.clamp(min=0), (hard_index >= 0).to(torch.int32))
        return MinedNegatives(queue_mask=queue_mask & (chosen == 0), hard_index=hard_index)
