"""CachedQueueInfoNCELoss: QueueInfoNCELoss with GradCache, for batches larger than memory allows.

Built on sentence-transformers' :class:`~sentence_transformers.base.losses.gradcache.CachedLossMixin`:
(1) embed all mini-batches without a graph, (2) compute the queue InfoNCE loss over the whole batch
in chunks of ``mini_batch_size`` anchors, back-propagating each chunk to the embeddings (the
gradient cache), (3) re-embed each mini-batch with a graph and push the cached gradients through.
Loss and gradients equal the uncached loss (up to dropout sampling, which RandContext replays).
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import torch
from sentence_transformers.base.losses.gradcache import (
    CachedLossMixin,
    _validate_mini_batch_num_tokens,
    has_static_embedding_input,
)
from torch import Tensor, nn

from contrastive_bert.losses.queue_infonce import QueueInfoNCELoss, feature_ids
from contrastive_bert.models import unwrap_model

__all__ = ["CachedQueueInfoNCELoss"]


class CachedQueueInfoNCELoss(CachedLossMixin, QueueInfoNCELoss):
    def __init__(
        self,
        model: nn.Module,
        mini_batch_size: int = 32,
        mini_batch_num_tokens: int | None = None,
        show_progress_bar: bool = False,
        **kwargs: Any,
    ) -> None:
        """Same arguments as :class:`QueueInfoNCELoss`, plus GradCache's ``mini_batch_size``
        (rows embedded / loss rows computed at once, bounds the memory) and
        ``mini_batch_num_tokens`` (token budget per mini-batch instead of a row count)."""
        if not isinstance(mini_batch_size, int) or mini_batch_size <= 0:
            raise ValueError(f"mini_batch_size: expected a positive int, got {mini_batch_size!r}")
        _validate_mini_batch_num_tokens(mini_batch_num_tokens)
        if has_static_embedding_input(unwrap_model(model)):
            raise ValueError("model: a StaticEmbedding model cannot be split into mini-batches; use QueueInfoNCELoss")
        QueueInfoNCELoss.__init__(self, model, **kwargs)
        self.mini_batch_size = mini_batch_size
        self.mini_batch_num_tokens = mini_batch_num_tokens
        self.show_progress_bar = show_progress_bar
        self._pending_ids: tuple[Tensor, Tensor] | None = None
        self._last_parts: dict[str, Tensor] = {}
        self._last_positives: Tensor | None = None

    def get_config_dict(self) -> dict[str, Any]:
        return {
            **super().get_config_dict(),
            "mini_batch_size": self.mini_batch_size,
            "mini_batch_num_tokens": self.mini_batch_num_tokens,
        }

    def calculate_loss(
        self, reps: list[list[Tensor]], labels: Tensor | None = None, *, with_backward: bool = False
    ) -> Tensor:
        """reps: per column, the mini-batch embeddings ``(mb, D)``. Returns the total loss (detached
        after the chunked backward when ``with_backward``); the parts go to ``self._last_parts``."""
        embeddings = [torch.cat(column) for column in reps]
        anchor_ids, positive_ids = self._pending_ids if self._pending_ids is not None else (None, None)
        batch = self.prepare_batch(embeddings, labels, anchor_ids, positive_ids)
        batch_size = batch.anchors.shape[0]
        sums = {"in_batch": 0.0, "queue": 0.0, "hard": 0.0}
        total = 0.0
        starts = list(range(0, batch_size, self.mini_batch_size))
        for i, begin in enumerate(starts):
            end = min(begin + self.mini_batch_size, batch_size)
            parts = self.loss_rows(batch, begin, end)
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
        anchor_ids = feature_ids(sentence_features[0])
        positive_ids = feature_ids(sentence_features[1])
        training = unwrap_model(self.model).training and torch.is_grad_enabled()
        if training:
            self.update_momentum_encoder()
        self._pending_ids = (anchor_ids, positive_ids)
        try:
            loss = self.forward_cached(sentence_features, labels)
        finally:
            self._pending_ids = None
        queue_part, hard_part = self._last_parts["queue"], self._last_parts["hard"]
        if training:
            keys = self.key_embeddings(sentence_features[1], self._last_positives)
            self.after_training_step(keys, positive_ids, labels, anchor_ids)
        # in_batch carries the GradCache hook; the parts still add up to the total loss
        return {"in_batch": loss - (queue_part + hard_part), "queue": queue_part, "hard": hard_part}
