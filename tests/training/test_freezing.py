"""Layer freezing: exactly the embeddings and the lowest layers stop training."""

from __future__ import annotations

import pytest

from contrastive_bert.encoder import LayerwiseEncoder
from contrastive_bert.training.freezing import freeze_layers


def test_freeze_layers_counts_and_flags(tiny_model):
    encoder = LayerwiseEncoder.from_model(tiny_model)
    frozen = freeze_layers(tiny_model, 1, freeze_embeddings=True)
    assert frozen == sum(p.numel() for p in encoder.embeddings.parameters()) + sum(
        p.numel() for p in encoder.layers[0].parameters()
    )
    assert not any(p.requires_grad for p in encoder.layers[0].parameters())
    assert all(p.requires_grad for p in encoder.layers[1].parameters())
    assert freeze_layers(tiny_model, 1) == 0  # already frozen: nothing more
    with pytest.raises(ValueError, match="num_layers"):
        freeze_layers(tiny_model, 3)
    with pytest.raises(ValueError, match="num_layers"):
        freeze_layers(tiny_model, -1)
