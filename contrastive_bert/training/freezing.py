"""Freeze the embeddings and the lowest encoder layers of a BERT-family SentenceTransformer.

The seed design freezes "the first 6 layers"; here the embeddings and the lowest ``N`` encoder
layers get ``requires_grad=False`` (the optimizer then skips them). The layers are found by
:class:`contrastive_bert.encoder.LayerwiseEncoder` (BERT, RoBERTa, DistilBERT, MPNet).
"""

from __future__ import annotations

import logging

from torch import nn

from contrastive_bert.encoder import LayerwiseEncoder

logger = logging.getLogger(__name__)

__all__ = ["freeze_layers"]


def freeze_layers(model: nn.Module, num_layers: int, freeze_embeddings: bool = True) -> int:
    """Freeze the embeddings (optional) and the lowest ``num_layers`` encoder layers in place.

    Returns the number of parameters frozen. ``num_layers`` larger than the model's depth is an
    error, 0 freezes only the embeddings (if asked).
    """
    if not isinstance(num_layers, int) or isinstance(num_layers, bool) or num_layers < 0:
        raise ValueError(f"num_layers: expected an int >= 0, got {num_layers!r}")
    encoder = LayerwiseEncoder.from_model(model)
    if num_layers > encoder.num_layers:
        raise ValueError(f"num_layers: the model has {encoder.num_layers} layers, cannot freeze {num_layers}")
    if num_layers == encoder.num_layers and freeze_embeddings:
        logger.warning("freezing the embeddings and all %d layers: only the pooling/head modules train", num_layers)
    modules: list[nn.Module] = list(encoder.layers[:num_layers])
    if freeze_embeddings:
        modules.insert(0, encoder.embeddings)
    frozen = 0
    for module in modules:
        for param in module.parameters():
            if param.requires_grad:
                param.requires_grad_(False)
                frozen += param.numel()
    return frozen
