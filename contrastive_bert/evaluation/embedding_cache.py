"""Encode each distinct text once: evaluation sets repeat sentences across pairs and candidates."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np


def encode_unique(model, texts: Sequence[str], batch_size: int = 64, show_progress_bar: bool = False) -> np.ndarray:
    """Embeddings of ``texts`` (n, d), L2-normalised, computing each distinct text once."""
    unique = list(dict.fromkeys(texts))
    embeddings = model.encode(
        unique, batch_size=batch_size, convert_to_numpy=True, normalize_embeddings=True, show_progress_bar=show_progress_bar
    )
    index = {text: i for i, text in enumerate(unique)}
    return embeddings[[index[t] for t in texts]]
