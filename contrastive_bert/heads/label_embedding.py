"""Label-embedding classifier head: the rows of the weight matrix are label embeddings.

``LabelEmbeddingClassifier`` is a sentence-transformers module appended after pooling
(and ``Normalize``, when the model has one). It reads ``features["sentence_embedding"]``
(B, d), leaves it untouched and writes ``features["logits"]`` (B, K). Because it is a
module of the ``SentenceTransformer`` (not of a loss), its weight and ``label_names`` are
saved with ``model.save(...)``, written in every trainer checkpoint and restored on resume.

Stable interface (reused by the multi-exit heads):

- ``LabelEmbeddingClassifier(in_features, label_names, scale=20.0, normalize=True)``
- ``weight``: ``nn.Parameter`` (K, d), row k = embedding of ``label_names[k]``
- ``label_names``: ``list[str]`` of length K
- ``logits(embeddings)``: (B, d) -> (B, K)

Logits are ``scale * cos(h, l_k)`` by default (``normalize=True``), so label embeddings live
in the cosine space of the sentence embeddings and new labels can be added by embedding
their names; ``normalize=False`` gives the plain linear form ``h @ W.T`` of the seed design.

Reloading: sentence-transformers >= 6 imports module classes outside its own namespace only
with ``trust_remote_code=True``. ``SentenceTransformer(path, trust_remote_code=True)`` works;
``load_model_with_head(path)`` loads without that flag by resolving only ``contrastive_bert``
module classes.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F
from sentence_transformers.sentence_transformer.modules import Module
from torch import Tensor, nn

from contrastive_bert.models import unwrap_model

try:
    from typing import Self
except ImportError:  # pragma: no cover - python < 3.11
    from typing_extensions import Self

__all__ = [
    "LabelEmbeddingClassifier",
    "find_label_head",
    "attach_label_head",
    "add_labels_from_names",
    "load_model_with_head",
    "predict",
    "predict_proba",
]


def _check_label_names(label_names: Sequence[str], name: str = "label_names", min_count: int = 2) -> list[str]:
    """Validate a list of label names: strings, non-empty, unique, at least ``min_count``."""
    if isinstance(label_names, str) or not isinstance(label_names, Sequence):
        raise ValueError(f"{name}: expected a list of strings, got {type(label_names).__name__}")
    names = list(label_names)
    if len(names) < min_count:
        raise ValueError(f"{name}: need at least {min_count} labels, got {len(names)}")
    for label in names:
        if not isinstance(label, str) or not label.strip():
            raise ValueError(f"{name}: every label name must be a non-empty string, got {label!r}")
    duplicates = sorted({label for label in names if names.count(label) > 1})
    if duplicates:
        raise ValueError(f"{name}: duplicate label names {duplicates}")
    return names


class LabelEmbeddingClassifier(Module):
    """Classifier whose weight rows are label embeddings in the sentence-embedding space.

    Args:
        in_features: embedding size d of ``features[module_input_name]``.
        label_names: K >= 2 unique class names; row k of ``weight`` embeds ``label_names[k]``.
        scale: logit scale (inverse temperature) applied to cosine similarities
            (ignored when ``normalize=False``).
        normalize: ``True``: logits = scale * cos(h, l_k); ``False``: logits = h @ W.T.
        init_weight: optional (K, d) initial label embeddings; default Xavier-normal.
        module_input_name: features key read, (B, d). Default ``"sentence_embedding"``.
        module_output_name: features key written, (B, K). Default ``"logits"``.
    """

    config_keys: list[str] = [
        "in_features",
        "label_names",
        "scale",
        "normalize",
        "module_input_name",
        "module_output_name",
    ]

    def __init__(
        self,
        in_features: int,
        label_names: Sequence[str],
        scale: float = 20.0,
        normalize: bool = True,
        init_weight: Tensor | None = None,
        module_input_name: str = "sentence_embedding",
        module_output_name: str = "logits",
    ) -> None:
        super().__init__()
        if isinstance(in_features, bool) or not isinstance(in_features, int) or in_features < 1:
            raise ValueError(f"in_features: expected a positive int, got {in_features!r}")
        if not isinstance(scale, (int, float)) or isinstance(scale, bool) or not scale > 0:
            raise ValueError(f"scale: expected a positive number, got {scale!r}")
        if module_input_name == module_output_name:
            raise ValueError("module_output_name: must differ from module_input_name (the embedding is kept)")
        self.label_names = _check_label_names(label_names)
        self.in_features = in_features
        self.scale = float(scale)
        self.normalize = bool(normalize)
        self.module_input_name = module_input_name
        self.module_output_name = module_output_name
        if init_weight is not None:
            if tuple(init_weight.shape) != (len(self.label_names), in_features):
                raise ValueError(
                    f"init_weight: expected shape ({len(self.label_names)}, {in_features}) "
                    f"(len(label_names), in_features), got {tuple(init_weight.shape)}"
                )
            weight = init_weight.detach().clone().float()
        else:
            weight = torch.empty(len(self.label_names), in_features)
            nn.init.xavier_normal_(weight)
        self._set_weight(weight)

    def _set_weight(self, weight: Tensor) -> None:
        """Store the (K, d) label embeddings: a trainable parameter here (free label vectors)."""
        self.weight = nn.Parameter(weight)

    @property
    def num_labels(self) -> int:
        """K, the number of labels."""
        return len(self.label_names)

    def label_embeddings(self, normalized: bool | None = None) -> Tensor:
        """The label embeddings (K, d); unit-norm rows when ``normalized`` (default: ``self.normalize``)."""
        normalized = self.normalize if normalized is None else normalized
        return F.normalize(self.weight, p=2, dim=-1) if normalized else self.weight

    def logits(self, embeddings: Tensor, label_embeddings: Tensor | None = None) -> Tensor:
        """Class scores for embeddings (B, d) -> (B, K), against ``label_embeddings`` (K, d) if given
        (e.g. freshly encoded label names) instead of the stored rows."""
        if embeddings.dim() != 2 or embeddings.shape[-1] != self.in_features:
            raise ValueError(
                f"embeddings: expected shape (B, {self.in_features}), got {tuple(embeddings.shape)}"
            )
        weight = (self.weight if label_embeddings is None else label_embeddings).to(embeddings.dtype)
        if self.normalize:
            return self.scale * F.normalize(embeddings, p=2, dim=-1) @ F.normalize(weight, p=2, dim=-1).T
        return embeddings @ weight.T

    def forward(self, features: dict[str, Any], **kwargs: Any) -> dict[str, Any]:
        """Add ``features[module_output_name]`` (B, K); ``features[module_input_name]`` is unchanged."""
        embeddings = features.get(self.module_input_name)
        if embeddings is not None:
            features[self.module_output_name] = self.logits(embeddings)
        return features

    @torch.no_grad()
    def add_labels(self, label_names: Sequence[str], embeddings: Tensor) -> None:
        """Append new labels with their embeddings (n, d) as new weight rows.

        The weight is replaced by a larger one: rebuild any optimizer that holds the old one.
        """
        names = _check_label_names(label_names, "label_names", min_count=1)
        clash = sorted(set(names) & set(self.label_names))
        if clash:
            raise ValueError(f"label_names: labels already in the head: {clash}")
        if embeddings.dim() != 2 or tuple(embeddings.shape) != (len(names), self.in_features):
            raise ValueError(
                f"embeddings: expected shape ({len(names)}, {self.in_features}), got {tuple(embeddings.shape)}"
            )
        new_rows = embeddings.detach().to(device=self.weight.device, dtype=self.weight.dtype)
        self._set_weight(torch.cat([self.weight.detach(), new_rows], dim=0))
        self.label_names = self.label_names + names

    def get_config_dict(self) -> dict[str, Any]:
        return {key: getattr(self, key) for key in self.config_keys}

    def save(self, output_path: str, *args: Any, safe_serialization: bool = True, **kwargs: Any) -> None:
        self.save_config(output_path)
        self.save_torch_weights(output_path, safe_serialization=safe_serialization)

    @classmethod
    def load(
        cls,
        model_name_or_path: str,
        subfolder: str = "",
        token: bool | str | None = None,
        cache_folder: str | None = None,
        revision: str | None = None,
        local_files_only: bool = False,
        **kwargs: Any,
    ) -> Self:
        hub_kwargs = {
            "subfolder": subfolder,
            "token": token,
            "cache_folder": cache_folder,
            "revision": revision,
            "local_files_only": local_files_only,
        }
        config = cls.load_config(model_name_or_path=model_name_or_path, **hub_kwargs)
        config = {key: value for key, value in config.items() if key in cls.config_keys}
        model = cls(**config)
        return cls.load_torch_weights(model_name_or_path=model_name_or_path, model=model, **hub_kwargs)

    def extra_repr(self) -> str:
        return f"in_features={self.in_features}, num_labels={self.num_labels}, scale={self.scale}, normalize={self.normalize}"

    def __repr__(self) -> str:
        return f"LabelEmbeddingClassifier({self.extra_repr()})"


# --------------------------------------------------------------------------- model helpers


def find_label_head(model: nn.Module, output_name: str = "logits") -> LabelEmbeddingClassifier | None:
    """The top-level ``LabelEmbeddingClassifier`` of ``model`` writing ``output_name``, or None."""
    for module in unwrap_model(model).children():
        if isinstance(module, LabelEmbeddingClassifier) and module.module_output_name == output_name:
            return module
    return None


def attach_label_head(model: nn.Module, label_names: Sequence[str], **head_kwargs: Any) -> LabelEmbeddingClassifier:
    """Return the model's label head, appending a new one (Xavier-normal) if it has none.

    An existing head must carry exactly ``label_names``; otherwise ValueError.
    """
    names = _check_label_names(label_names)
    output_name = head_kwargs.get("module_output_name", "logits")
    head = find_label_head(model, output_name)
    if head is not None:
        if head.label_names != names:
            raise ValueError(
                f"label_names: the model's head has {head.num_labels} labels {head.label_names[:5]}..., "
                f"got {len(names)} labels {names[:5]}...; the names and their order must match"
            )
        return head
    base = unwrap_model(model)
    dim = base.get_embedding_dimension()
    if dim is None:
        raise ValueError("model: cannot determine the sentence-embedding dimension to size the head")
    head = LabelEmbeddingClassifier(dim, names, **head_kwargs)
    try:
        device = next(base.parameters()).device
    except StopIteration:  # pragma: no cover - parameterless model
        device = torch.device("cpu")
    base.append(head.to(device))
    return head


def _require_head(model: nn.Module) -> LabelEmbeddingClassifier:
    head = find_label_head(model)
    if head is None:
        raise ValueError("model: has no LabelEmbeddingClassifier; train with ACLEmbedLoss or attach_label_head first")
    return head


def _check_texts(texts: Iterable[str], name: str = "texts") -> list[str]:
    """Validate texts: a non-empty iterable (list, dataset column, ...) of strings, not one string."""
    if isinstance(texts, str) or not isinstance(texts, Iterable):
        raise ValueError(f"{name}: expected a list of strings, got {type(texts).__name__}")
    texts = list(texts)
    if not texts:
        raise ValueError(f"{name}: is empty")
    for text in texts:
        if not isinstance(text, str):
            raise ValueError(f"{name}: every item must be a string, got {type(text).__name__}")
    return texts


@torch.no_grad()
def add_labels_from_names(
    model: nn.Module,
    label_names: Sequence[str],
    template: str | None = None,
    batch_size: int = 32,
) -> LabelEmbeddingClassifier:
    """Embed ``template.format(name)`` for each new label with ``model`` and append them to its head.

    Use after ACL training to add labels unseen in training (the head and the sentence
    embeddings share one space). ``template`` defaults to the head's ``label_template`` (an
    encoded label head) or ``"{}"``. Returns the head.
    """
    head = _require_head(model)
    names = _check_label_names(label_names, "label_names", min_count=1)
    template = getattr(head, "label_template", "{}") if template is None else template
    if not isinstance(template, str) or "{}" not in template:
        raise ValueError(f"template: must contain '{{}}' for the label name, got {template!r}")
    if getattr(head, "label_template", template) != template:
        raise ValueError(f"template: the head encodes its labels through {head.label_template!r}, got {template!r}")
    base = unwrap_model(model)
    was_training = base.training
    embeddings = base.encode([template.format(name) for name in names], batch_size=batch_size, convert_to_tensor=True)
    base.train(was_training)  # encode() leaves the model in eval mode
    head.add_labels(names, embeddings.float())
    return head


@torch.no_grad()
def predict_proba(model: nn.Module, texts: Iterable[str], batch_size: int = 32) -> np.ndarray:
    """Softmax class probabilities (n, K) from the model's label head, in ``head.label_names`` order."""
    head = _require_head(model)
    texts = _check_texts(texts)
    embeddings = unwrap_model(model).encode(texts, batch_size=batch_size, convert_to_tensor=True)
    logits = head.logits(embeddings.to(head.weight.device).float())
    return torch.softmax(logits, dim=-1).cpu().numpy()


def predict(model: nn.Module, texts: Iterable[str], batch_size: int = 32) -> list[str]:
    """Predicted label name for each text (argmax of ``predict_proba``)."""
    head = _require_head(model)
    probabilities = predict_proba(model, texts, batch_size=batch_size)
    return [head.label_names[i] for i in probabilities.argmax(axis=1)]


def load_model_with_head(model_name_or_path: str, device: str | None = None, **kwargs: Any):
    """Load a saved SentenceTransformer whose modules include ``contrastive_bert`` modules
    (same as :func:`contrastive_bert.models.load_model`, kept for discoverability next to the head)."""
    from contrastive_bert.models import load_model

    return load_model(model_name_or_path, device=device, **kwargs)
