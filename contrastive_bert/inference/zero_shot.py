"""Zero-shot classification by label embeddings: embed label names (or descriptions) through a
template, classify texts by cosine similarity.

Works with any SentenceTransformer; after ACL training the label names and the sentence
embeddings share one space, which is what makes unseen labels classifiable.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence

import numpy as np
import torch
from torch import nn

from contrastive_bert.embeddings import encode_normalized
from contrastive_bert.heads.label_embedding import _check_label_names, _check_texts
from contrastive_bert.models import unwrap_model

__all__ = ["ZeroShotClassifier"]


class ZeroShotClassifier:
    """Classify texts against label embeddings built from their names.

    Args:
        model: a SentenceTransformer.
        labels: K >= 2 label names, or a mapping name -> description (the description is embedded).
        template: format string with ``{}`` for the name/description.
        multi_label: ``predict`` returns, per text, every label whose cosine >= ``threshold``.
        threshold: cosine threshold for multi-label prediction, in [-1, 1].
        scale: inverse temperature: single-label probabilities are ``softmax(scale * cos)``,
            multi-label ones ``sigmoid(scale * (cos - threshold))``.
        batch_size: encoding batch size.
    """

    def __init__(
        self,
        model: nn.Module,
        labels: Sequence[str] | Mapping[str, str],
        template: str = "This text is about {}.",
        multi_label: bool = False,
        threshold: float = 0.5,
        scale: float = 20.0,
        batch_size: int = 32,
    ) -> None:
        if isinstance(labels, Mapping):
            names = _check_label_names(list(labels.keys()), "labels")
            descriptions = [labels[name] for name in names]
            for name, description in zip(names, descriptions):
                if not isinstance(description, str) or not description.strip():
                    raise ValueError(f"labels: the description of {name!r} must be a non-empty string")
        else:
            names = _check_label_names(labels, "labels")
            descriptions = names
        if not isinstance(template, str) or "{}" not in template:
            raise ValueError(f"template: must be a string containing '{{}}', got {template!r}")
        if not -1.0 <= threshold <= 1.0:
            raise ValueError(f"threshold: a cosine threshold in [-1, 1], got {threshold}")
        if not scale > 0:
            raise ValueError(f"scale: must be > 0, got {scale}")
        if batch_size < 1:
            raise ValueError(f"batch_size: must be >= 1, got {batch_size}")
        self.model = unwrap_model(model)
        self.labels = names
        self.template = template
        self.multi_label = bool(multi_label)
        self.threshold = float(threshold)
        self.scale = float(scale)
        self.batch_size = batch_size
        self.label_texts = [template.format(description) for description in descriptions]
        self.label_embeddings = self._encode(self.label_texts)  # (K, d), unit rows

    def _encode(self, texts: list[str]) -> torch.Tensor:
        """(n, d) unit rows, float32 on the CPU (the package's one encode helper)."""
        return encode_normalized(self.model, texts, batch_size=self.batch_size)

    def similarities(self, texts: Iterable[str]) -> np.ndarray:
        """Cosine similarity (n, K) between texts and label embeddings."""
        embeddings = self._encode(_check_texts(texts))
        return (embeddings @ self.label_embeddings.T).numpy()

    def predict_proba(self, texts: Iterable[str]) -> np.ndarray:
        """(n, K) probabilities: softmax over labels, or per-label sigmoids when ``multi_label``."""
        scores = torch.from_numpy(self.similarities(texts))
        if self.multi_label:
            return torch.sigmoid(self.scale * (scores - self.threshold)).numpy()
        return torch.softmax(self.scale * scores, dim=-1).numpy()

    def predict(self, texts: Iterable[str]) -> list[str] | list[list[str]]:
        """Label name per text, or (``multi_label``) the list of names with cosine >= threshold."""
        scores = self.similarities(texts)
        if self.multi_label:
            return [[self.labels[k] for k in np.flatnonzero(row >= self.threshold)] for row in scores]
        return [self.labels[k] for k in scores.argmax(axis=1)]
