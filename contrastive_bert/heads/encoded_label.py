"""Encoded label head: the label embeddings are the encoder's own embeddings of the label names.

``EncodedLabelClassifier`` is a :class:`~contrastive_bert.heads.label_embedding.LabelEmbeddingClassifier`
whose (K, d) rows are not free parameters but ``encoder(label_template.format(name))``: a buffer
holding the latest encoding, saved with the model so that a loaded model classifies at once.
Training (``ACLEmbedLoss(label_embedding="encoded")``) back-propagates through the encoding of
the label names, so what the encoder learns about labels carries over to names it never saw: a
new label is added by its name alone (:func:`~contrastive_bert.heads.label_embedding.add_labels_from_names`)
and lands in the space the training shaped.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import Any

import torch
from sentence_transformers.util import batch_to_device
from torch import Tensor, nn

from contrastive_bert.heads.label_embedding import LabelEmbeddingClassifier, _check_label_names, find_label_head
from contrastive_bert.models import unwrap_model

logger = logging.getLogger(__name__)

__all__ = ["EncodedLabelClassifier", "attach_encoded_label_head", "encode_label_texts"]


def encode_label_texts(model: nn.Module, texts: Sequence[str]) -> Tensor:
    """Sentence embeddings (n, d) of ``texts`` through ``model``'s forward, with graph when grad is on
    (``model.encode`` always runs without gradients and in eval mode)."""
    base = unwrap_model(model)
    features = batch_to_device(base.preprocess(list(texts)), base.device)
    return base(features)["sentence_embedding"]


class EncodedLabelClassifier(LabelEmbeddingClassifier):
    """Label head whose row k is the encoder's embedding of ``label_template.format(label_names[k])``.

    Args:
        *args, **kwargs: as :class:`LabelEmbeddingClassifier` (``in_features``, ``label_names``,
            ``scale``, ...); the rows are random until :meth:`refresh` (or a load) fills them.
        label_template: format string with ``{}`` for the label name.
    """

    config_keys: list[str] = [*LabelEmbeddingClassifier.config_keys, "label_template"]

    def __init__(self, *args: Any, label_template: str = "{}", **kwargs: Any) -> None:
        if not isinstance(label_template, str) or "{}" not in label_template:
            raise ValueError(f"label_template: must be a string containing '{{}}', got {label_template!r}")
        super().__init__(*args, **kwargs)
        self.label_template = label_template

    def _set_weight(self, weight: Tensor) -> None:
        """The rows are a buffer (saved, not trained): the encoder is what training updates."""
        if "weight" in self._parameters:
            del self._parameters["weight"]
        self.register_buffer("weight", weight.detach().clone())

    @property
    def label_texts(self) -> list[str]:
        """The texts the rows encode, ``label_template.format(name)`` per label."""
        return [self.label_template.format(name) for name in self.label_names]

    @torch.no_grad()
    def refresh(self, model: nn.Module, batch_size: int = 64) -> Tensor:
        """Re-encode every label text with ``model`` (eval mode, no dropout) into the rows; returns them (K, d)."""
        base = unwrap_model(model)
        was_training = base.training
        embeddings = base.encode(self.label_texts, batch_size=batch_size, convert_to_tensor=True)
        base.train(was_training)  # encode() leaves the model in eval mode
        self.weight.copy_(embeddings.to(device=self.weight.device, dtype=self.weight.dtype))
        return self.weight

    def label_embeddings_with_grad(self, model: nn.Module, label_ids: Tensor) -> Tensor:
        """All K rows (K, d) where the rows of ``label_ids`` (n,) are encoded now, with graph (model in
        its current mode), and the others are the stored rows (no graph). The stored rows of
        ``label_ids`` are updated with the new encodings."""
        ids = torch.as_tensor(label_ids, device=self.weight.device).unique()
        fresh = encode_label_texts(model, [self.label_texts[int(k)] for k in ids.tolist()])
        with torch.no_grad():
            self.weight[ids] = fresh.detach().to(self.weight.dtype)
        rows = self.weight.detach().to(fresh.dtype)
        return rows.index_put((ids.to(rows.device),), fresh)

    def __repr__(self) -> str:
        return f"EncodedLabelClassifier({self.extra_repr()}, label_template={self.label_template!r})"


def attach_encoded_label_head(model: nn.Module, label_names: Sequence[str], label_template: str = "{}", **head_kwargs: Any) -> EncodedLabelClassifier:
    """Return the model's encoded label head, appending one (rows encoded now) if it has none;
    an existing head must be an ``EncodedLabelClassifier`` with exactly ``label_names``."""
    names = _check_label_names(label_names)
    head = find_label_head(model, head_kwargs.get("module_output_name", "logits"))
    if head is not None:
        if not isinstance(head, EncodedLabelClassifier) or head.label_names != names:
            raise ValueError(
                "model: already has a label head that is not an EncodedLabelClassifier with these label_names "
                f"({type(head).__name__}, {head.num_labels} labels)"
            )
        return head
    base = unwrap_model(model)
    dim = base.get_embedding_dimension()
    if dim is None:
        raise ValueError("model: cannot determine the sentence-embedding dimension to size the head")
    head = EncodedLabelClassifier(dim, names, label_template=label_template, **head_kwargs)
    head.refresh(base)
    base.append(head.to(base.device))
    return head
