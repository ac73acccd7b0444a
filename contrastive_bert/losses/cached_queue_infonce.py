"""CachedQueueInfoNCELoss: the queue InfoNCE loss with GradCache, for batches larger than memory allows.

Built on sentence-transformers' :class:`~sentence_transformers.base.losses.gradcache.CachedLossMixin`
the way ``CachedMultipleNegativesRankingLoss`` wraps ``MultipleNegativesRankingLoss``: the wrapped
:class:`QueueInfoNCELoss` (``self.loss``) owns the options, the queue and the momentum encoder;
this class adds (1) embedding all mini-batches without a graph, (2) the loss over the whole batch
in chunks of ``mini_batch_size`` anchors, back-propagating each chunk to the embeddings (the
gradient cache), (3) re-embedding each mini-batch with a graph and pushing the cached gradients
through. Loss and gradients equal the uncached loss (dropout is replayed by RandContext).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

import torch
from sentence_transformers.base.losses.gradcache import (
    CachedLossMixin,
    _validate_mini_batch_num_tokens,
    has_static_embedding_input,
)
from torch import Tensor, nn

from contrastive_bert.losses.option_checks import check_flags, check_number
from contrastive_bert.losses.queue_infonce import QueueInfoNCELoss, feature_ids, seed_rule_queue_size
from contrastive_bert.models import unwrap_model
from contrastive_bert.queue import EmbeddingQueue

__all__ = ["CachedQueueInfoNCELoss", "build_cached_queue_infonce_loss"]

_OWN_OPTIONS = ("mini_batch_size", "mini_batch_num_tokens", "show_progress_bar")


class CachedQueueInfoNCELoss(CachedLossMixin, nn.Module):
    def __init__(
        self,
        model: nn.Module,
        mini_batch_size: int = 32,
        mini_batch_num_tokens: int | None = None,
        show_progress_bar: bool = False,
        **kwargs: Any,
    ) -> None:
        """Every option of :class:`QueueInfoNCELoss` (``kwargs``), plus GradCache's
        ``mini_batch_size`` (rows embedded / loss rows computed at once, bounds the memory) and
        ``mini_batch_num_tokens`` (token budget per mini-batch instead of a row count)."""
        super().__init__()
        self.check_options({"mini_batch_size": mini_batch_size, "mini_batch_num_tokens": mini_batch_num_tokens,
                            "show_progress_bar": show_progress_bar, **kwargs})
        _validate_mini_batch_num_tokens(mini_batch_num_tokens)
        if has_static_embedding_input(unwrap_model(model)):
            raise ValueError("model: a StaticEmbedding model cannot be split into mini-batches; use QueueInfoNCELoss")
        self.model = model
        self.loss = QueueInfoNCELoss(model, **kwargs)
        self.mini_batch_size = mini_batch_size
        self.mini_batch_num_tokens = mini_batch_num_tokens
        self.show_progress_bar = show_progress_bar
        self._pending: dict[str, Any] = {}
        self._last_parts: dict[str, Tensor] = {}
        self._last_positives: Tensor | None = None

    @classmethod
    def check_options(cls, options: Mapping[str, Any]) -> None:
        """GradCache's options here, every other one by :meth:`QueueInfoNCELoss.check_options`."""
        check_number(options, "mini_batch_size", "a positive integer", lambda v: v > 0, integer=True)
        check_number(options, "mini_batch_num_tokens", "a positive integer", lambda v: v > 0, integer=True, allow_none=True)
        check_flags(options, ("show_progress_bar",))
        QueueInfoNCELoss.check_options({k: v for k, v in options.items() if k not in _OWN_OPTIONS})

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
        return {**self.loss.get_config_dict(), "mini_batch_size": self.mini_batch_size,
                "mini_batch_num_tokens": self.mini_batch_num_tokens}

    def calculate_loss(
        self, reps: list[list[Tensor]], labels: Tensor | None = None, *, with_backward: bool = False
    ) -> Tensor:
        """reps: per column, the mini-batch embeddings ``(mb, D)``. Returns the total loss (detached
        after the chunked backward when ``with_backward``); the parts go to ``self._last_parts``."""
        embeddings = [torch.cat(column) for column in reps]
        batch = self.loss.prepare_batch(embeddings, labels, self._pending.get("anchor_ids"),
                                        self._pending.get("positive_ids"), self._pending.get("guide"))
        batch_size = batch.anchors.shape[0]
        sums = {"in_batch": 0.0, "queue": 0.0, "hard": 0.0}
        total = 0.0
        starts = list(range(0, batch_size, self.mini_batch_size))
        for i, begin in enumerate(starts):
            parts = self.loss.loss_rows(batch, begin, min(begin + self.mini_batch_size, batch_size))
            chunk = sum(parts.values()) / batch_size
            if with_backward:
                # the normalised batch is shared by all chunks: keep its graph until the last one
                chunk.backward(retain_graph=i < len(starts) - 1)
                chunk = chunk.detach()
            total = total + chunk
            for name, value in parts.items():
                sums[name] = sums[name] + value.detach() / batch_size
        self._last_parts = sums
        self._last_positives = embeddings[1].detach()
        return total

    def forward(self, sentence_features: Iterable[dict[str, Tensor]], labels: Tensor | None = None) -> dict[str, Tensor]:
        """Same contract as :meth:`QueueInfoNCELoss.forward`: returns ``{"in_batch", "queue", "hard"}``."""
        sentence_features = list(sentence_features)
        if len(sentence_features) < 2:
            raise ValueError(f"sentence_features: expected at least 2 columns (anchor, positive), got {len(sentence_features)}")
        inner = self.loss
        anchor_ids = feature_ids(sentence_features[0])
        positive_ids = feature_ids(sentence_features[1])
        guide = None if inner.guide is None else inner.guide.embed(sentence_features)
        training = unwrap_model(self.model).training and torch.is_grad_enabled()
        if training:
            inner.update_momentum_encoder()
        self._pending = {"anchor_ids": anchor_ids, "positive_ids": positive_ids, "guide": guide}
        try:
            loss = self.forward_cached(sentence_features, labels)
        finally:
            self._pending = {}
        queue_part, hard_part = self._last_parts["queue"], self._last_parts["hard"]
        if training:
            keys = inner.key_embeddings(sentence_features[1], self._last_positives)
            inner.after_training_step(keys, positive_ids, labels, anchor_ids, None if guide is None else guide[1])
        # in_batch carries the GradCache hook; the parts still add up to the total loss
        return {"in_batch": loss - (queue_part + hard_part), "queue": queue_part, "hard": hard_part}


def build_cached_queue_infonce_loss(
    model: nn.Module, train_dataset_size: int | None, batch_size: int | None, **options: Any
) -> CachedQueueInfoNCELoss:
    """The ``cached_queue_infonce`` loss for recipes: as :func:`build_queue_infonce_loss`, plus GradCache's options."""
    options = seed_rule_queue_size(options, train_dataset_size, batch_size)
    return CachedQueueInfoNCELoss(model, train_dataset_size=train_dataset_size, **options)
