"""CachedQueueInfoNCELoss: the queue InfoNCE loss with GradCache, for batches larger than memory allows.

Built on sentence-transformers' :class:`~sentence_transformers.base.losses.gradcache.CachedLossMixin`
the way ``CachedMultipleNegativesRankingLoss`` wraps ``MultipleNegativesRankingLoss``: the wrapped
:class:`QueueInfoNCELoss` (``self.loss``) owns the options, the queue and the momentum encoder;
this class adds (1) embedding all mini-batches without a graph, (2) the loss over the whole batch
in chunks of ``mini_batch_size`` anchors, back-propagating each chunk to the embeddings (the
gradient cache), (3) re-embedding each mini-batch with a graph and pushing the cached gradients
through. Loss and gradients equal the uncached loss (dropout is replayed by RandContext). The
step around it is the plain loss's: :meth:`QueueInfoNCELoss.start_step` (ids, guide, momentum
update) before, :meth:`QueueInfoNCELoss.end_step` (enqueue) after.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

import torch
from sentence_transformers.base.losses.gradcache import CachedLossMixin, has_static_embedding_input
from torch import Tensor, nn

from contrastive_bert.losses.option_checks import check_flags, check_number, config_dict, option_names
from contrastive_bert.losses.queue_infonce import QueueInfoNCELoss, StepInputs, seed_rule_queue_size
from contrastive_bert.models import unwrap_model
from contrastive_bert.queue import EmbeddingQueue

__all__ = ["CachedQueueInfoNCELoss", "GradCacheConfig", "build_cached_queue_infonce_loss"]

@dataclass(frozen=True)
class GradCacheConfig:
    """GradCache's options; each value checked on creation (``ValueError("loss_options.<name>: ...")``).

    Args:
        mini_batch_size: rows embedded / loss rows computed at once (bounds the memory).
        mini_batch_num_tokens: a token budget per mini-batch instead of a row count; None = off.
        show_progress_bar: a progress bar over the mini-batches.
    """

    mini_batch_size: int = 32
    mini_batch_num_tokens: int | None = None
    show_progress_bar: bool = False

    def __post_init__(self) -> None:
        options = vars(self)
        check_number(options, "mini_batch_size", "a positive integer", lambda v: v > 0, integer=True)
        check_number(options, "mini_batch_num_tokens", "a positive integer", lambda v: v > 0, integer=True, allow_none=True)
        check_flags(options, ("show_progress_bar",))


class CachedQueueInfoNCELoss(CachedLossMixin, nn.Module):
    """:class:`QueueInfoNCELoss` with GradCache, for batches larger than memory allows.

    Loss and gradients equal the uncached loss (dropout is replayed by RandContext); memory is
    bounded by ``mini_batch_size`` rows instead of the batch size.

    Args:
        model: the SentenceTransformer being trained.
        mini_batch_size / mini_batch_num_tokens / show_progress_bar: GradCache's options
            (:class:`GradCacheConfig`; default 32 rows, no token budget, no bar).
        train_dataset_size: as :class:`QueueInfoNCELoss`'s.
        **options: every option of :class:`QueueInfoNCELoss` (queue_size, temperature, ...).

    Inputs:
        Those of :class:`QueueInfoNCELoss`: (anchor, positive) pairs, (anchor, positive,
        negative_1, ..., negative_n) rows, or labelled pairs (with ``filter_same_label``).
        Registered as ``cached_queue_infonce`` (data format ``pairs``).

    Recommendations:
        - Use ``BatchSamplers.NO_DUPLICATES``, as for :class:`QueueInfoNCELoss`.
        - Only for batches that do not fit in memory (e.g. 256 and up): it embeds every row twice,
          so at a batch that fits it is slower than :class:`QueueInfoNCELoss` for the same result.
        - A ``mini_batch_size`` as large as memory allows; it changes speed and memory, never the loss.
        - Not for a StaticEmbedding model (it cannot be split into mini-batches).

    Relations:
        - Wraps :class:`QueueInfoNCELoss` (``self.loss``, which owns the options, queue and momentum
          encoder) the way :class:`sentence_transformers.losses.CachedMultipleNegativesRankingLoss`
          wraps MultipleNegativesRankingLoss; both run :meth:`QueueInfoNCELoss.start_step` and
          :meth:`QueueInfoNCELoss.end_step` around their loss.
        - Resembles :class:`sentence_transformers.losses.CachedGISTEmbedLoss` when ``guide_model`` is set.
    """

    def __init__(
        self,
        model: nn.Module,
        mini_batch_size: int = 32,
        mini_batch_num_tokens: int | None = None,
        show_progress_bar: bool = False,
        **kwargs: Any,
    ) -> None:
        super().__init__()
        self.cache_config = GradCacheConfig(mini_batch_size, mini_batch_num_tokens, show_progress_bar)
        if has_static_embedding_input(unwrap_model(model)):
            raise ValueError("model: a StaticEmbedding model cannot be split into mini-batches; use QueueInfoNCELoss")
        self.model = model
        self.loss = QueueInfoNCELoss(model, **kwargs)
        self.mini_batch_size = mini_batch_size
        self.mini_batch_num_tokens = mini_batch_num_tokens
        self.show_progress_bar = show_progress_bar
        self._pending: StepInputs | None = None
        self._last_parts: dict[str, Tensor] = {}
        self._last_embeddings: list[Tensor] | None = None

    @classmethod
    def option_names(cls) -> tuple[str, ...]:
        """GradCache's options and every option of :class:`QueueInfoNCELoss`."""
        return option_names(GradCacheConfig) + QueueInfoNCELoss.option_names()

    @classmethod
    def check_options(cls, options: Mapping[str, Any]) -> None:
        """GradCache's options by :class:`GradCacheConfig`, every other one by :meth:`QueueInfoNCELoss.check_options`."""
        own = option_names(GradCacheConfig)
        GradCacheConfig(**{k: v for k, v in options.items() if k in own})
        QueueInfoNCELoss.check_options({k: v for k, v in options.items() if k not in own})

    @property
    def queue(self) -> EmbeddingQueue | None:
        return self.loss.queue

    @property
    def num_steps(self) -> Tensor:
        return self.loss.num_steps

    @property
    def temperature(self) -> float:
        return self.loss.temperature

    @property
    def queue_size(self) -> int | None:
        return self.loss.queue_size

    @property
    def citation(self) -> str:
        return self.loss.citation

    def get_config_dict(self) -> dict[str, Any]:
        return {**self.loss.get_config_dict(), **config_dict(self.cache_config)}

    def calculate_loss(
        self, reps: list[list[Tensor]], labels: Tensor | None = None, *, with_backward: bool = False
    ) -> Tensor:
        """reps: per column, the mini-batch embeddings ``(mb, D)``. Returns the total loss (detached
        after the chunked backward when ``with_backward``); the parts go to ``self._last_parts``."""
        embeddings = [torch.cat(column) for column in reps]
        step = self._pending
        known = (None, None, None) if step is None else (step.anchor_ids, step.positive_ids, step.guide)
        batch = self.loss.prepare_batch(embeddings, labels, *known, doc_ids=None if step is None else step.doc_ids)
        batch_size, rows = batch.anchors.shape[0], batch.rows  # rows: with a dual bank, the banked anchors too
        sums = {"in_batch": 0.0, "queue": 0.0, "hard": 0.0}
        total = 0.0
        chunks = [lambda b=begin: self.loss.loss_rows(batch, b, min(b + self.mini_batch_size, batch_size))
                  for begin in range(0, batch_size, self.mini_batch_size)]
        if batch.bank_anchors is not None:
            sums["bank"] = 0.0
            chunks.append(lambda: {"bank": self.loss.bank_rows(batch)})
        for i, chunk_parts in enumerate(chunks):
            parts = chunk_parts()
            chunk = sum(parts.values()) / rows
            if with_backward:
                # the normalised batch is shared by all chunks: keep its graph until the last one
                chunk.backward(retain_graph=i < len(chunks) - 1)
                chunk = chunk.detach()
            total = total + chunk
            for name, value in parts.items():
                sums[name] = sums[name] + value.detach() / rows
        self._last_parts = sums
        self._last_embeddings = [e.detach() for e in embeddings]
        return total

    def forward(self, sentence_features: Iterable[dict[str, Tensor]], labels: Tensor | None = None) -> dict[str, Tensor]:
        """Same contract as :meth:`QueueInfoNCELoss.forward`: returns ``{"in_batch", "queue", "hard"}``."""
        inputs = self.loss.start_step(sentence_features)  # text ids, guide embeddings, momentum update
        self._pending = inputs  # read by calculate_loss, which GradCache calls
        try:
            loss = self.forward_cached(inputs.features, labels)
        finally:
            self._pending = None
        others = {name: value for name, value in self._last_parts.items() if name != "in_batch"}
        self.loss.end_step(inputs, self._last_embeddings, labels)  # enqueue this batch's positives (or bank its rows)
        # in_batch carries the GradCache hook; the parts still add up to the total loss
        return {"in_batch": loss - sum(others.values()), **others}


def build_cached_queue_infonce_loss(
    model: nn.Module, train_dataset_size: int | None, batch_size: int | None, **options: Any
) -> CachedQueueInfoNCELoss:
    """The ``cached_queue_infonce`` loss for recipes: as :func:`build_queue_infonce_loss`, plus GradCache's options."""
    options = seed_rule_queue_size(options, train_dataset_size, batch_size)
    return CachedQueueInfoNCELoss(model, train_dataset_size=train_dataset_size, **options)
