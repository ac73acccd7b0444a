"""Per-exit evaluation of a multi-exit model: the test accuracy of every exit in one pass.

Training a multi-exit model is a two-stage recipe (:mod:`contrastive_bert.training.stages`):
stage 1 trains the backbone and its final classifier (loss ``acl``), stage 2 the exit heads
with the cross-layer loss (``cross_layer``), both in ``SentenceTransformerTrainer``.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence

import torch
from torch import nn

from contrastive_bert.heads.exits import exit_outputs, get_exit_heads

logger = logging.getLogger(__name__)

__all__ = ["evaluate_exits"]


@torch.no_grad()
def evaluate_exits(model: nn.Module, texts: Sequence[str], labels: Sequence[int], batch_size: int = 64) -> dict[int, float]:
    """Accuracy (percent) of every head of ``model`` (each exit and the final classifier) on
    (texts, labels): {layer: accuracy}.
    One forward per batch gives every exit's logits."""
    if len(texts) != len(labels) or len(texts) == 0:
        raise ValueError(f"texts/labels: need equal non-zero lengths, got {len(texts)} and {len(labels)}")
    heads = get_exit_heads(model)
    was_training = model.training
    model.eval()
    correct = {m: 0 for m in heads.head_layers}
    device = next(heads.parameters()).device
    try:
        for start in range(0, len(texts), batch_size):
            features = model.preprocess(list(texts[start : start + batch_size]))
            features = {k: v.to(device) if isinstance(v, torch.Tensor) else v for k, v in features.items()}
            gold = torch.as_tensor(list(labels[start : start + batch_size]), device=device)
            logits = exit_outputs(model, features)["exit_logits"]
            for m in heads.head_layers:
                correct[m] += int((logits[m].argmax(-1) == gold).sum())
    finally:
        model.train(was_training)
    return {m: round(100.0 * c / len(texts), 2) for m, c in correct.items()}
