"""MoCo's momentum key encoder: an EMA copy of the online model that embeds what is enqueued."""

from __future__ import annotations

import copy

import torch
from torch import Tensor, nn

from contrastive_bert.models import unwrap_model

__all__ = ["MomentumEncoder"]


class MomentumEncoder(nn.Module):
    """``ema = m * ema + (1 - m) * online`` after each step (parameters; buffers are copied).

    Args:
        model: the online SentenceTransformer (copied once; the copy never gets gradients).
        momentum: m in [0, 1), e.g. 0.999 (MoCo); checked where the option is given
            (:class:`~contrastive_bert.losses.queue_config.QueueConfig`).
    """

    def __init__(self, model: nn.Module, momentum: float) -> None:
        super().__init__()
        self.momentum = float(momentum)
        self.model = copy.deepcopy(unwrap_model(model))
        self.model.requires_grad_(False)
        self.model.eval()

    @torch.no_grad()
    def update(self, online: nn.Module) -> None:
        online = unwrap_model(online)
        m = self.momentum
        for ema_p, p in zip(self.model.parameters(), online.parameters()):
            ema_p.mul_(m).add_(p.detach().to(ema_p.dtype), alpha=1.0 - m)
        for ema_b, b in zip(self.model.buffers(), online.buffers()):
            ema_b.copy_(b)

    @torch.no_grad()
    def encode(self, features: dict[str, Tensor]) -> Tensor:
        """``(B, D)`` detached sentence embeddings of tokenised ``features``."""
        device = features["input_ids"].device if "input_ids" in features else None
        if device is not None and next(self.model.parameters()).device != device:
            self.model.to(device)
        return self.model(dict(features))["sentence_embedding"].detach()
