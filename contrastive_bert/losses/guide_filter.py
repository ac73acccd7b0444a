"""A frozen guide model that vetoes false negatives, as sentence-transformers' ``GISTEmbedLoss``.

The guide embeds every column of the batch (and the queue keeps the guide's embedding of each
row it stores). A candidate is dropped as a negative of anchor ``a`` when its guide similarity
to ``a`` exceeds the guide similarity of ``a``'s own positive minus ``margin``::

    keep(a, c) = g(a) . g(c) <= g(a) . g(p_a) - margin      (g: the guide's normalised embedding)
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from contrastive_bert.losses.option_checks import check_number, option_error
from contrastive_bert.topk_search import ScoreMargins, false_negative_mask
from contrastive_bert.models import unwrap_model

logger = logging.getLogger(__name__)

__all__ = ["GuideConfig", "GuideFilter", "load_guide_model"]


@dataclass(frozen=True)
class GuideConfig:
    """The queue losses' guide options; each value checked on creation (``ValueError("loss_options.<name>: ...")``).

    Args:
        guide_model: GISTEmbedLoss's guide: a frozen SentenceTransformer, or its name/path
            (``"default"`` = the bundled all-MiniLM-L6-v2). A batch, queue or mined negative whose
            guide similarity to the anchor exceeds the guide similarity of the anchor's positive
            minus ``guide_margin`` is not a negative. None = off.
        guide_margin: GISTEmbedLoss's absolute margin (finite).
    """

    guide_model: nn.Module | str | None = None
    guide_margin: float = 0.0

    def __post_init__(self) -> None:
        if self.guide_model is not None and not isinstance(self.guide_model, (str, nn.Module)):
            raise option_error("guide_model", "a model name or path, a SentenceTransformer, or null", self.guide_model)
        check_number(vars(self), "guide_margin", "a finite number")
        object.__setattr__(self, "guide_margin", float(self.guide_margin))


def load_guide_model(guide: nn.Module | str, model: nn.Module) -> nn.Module:
    """A frozen guide for ``model``: a SentenceTransformer as given, or a name/path loaded with
    :func:`contrastive_bert.models.load_model` (``"default"``: the bundled all-MiniLM-L6-v2) on
    ``model``'s device with ``model``'s ``max_seq_length`` (the guide then reads the same tokens).
    Its parameters need no gradient and it is in eval mode."""
    if isinstance(guide, str):
        from contrastive_bert.models import load_model

        trained = unwrap_model(model)
        guide = load_model(guide, device=str(next(trained.parameters()).device))
        if getattr(trained, "max_seq_length", None) is not None:
            guide.max_seq_length = trained.max_seq_length
    elif not isinstance(guide, nn.Module):
        raise ValueError(f"guide_model: expected a model name or path, or a SentenceTransformer, got {guide!r}")
    guide.requires_grad_(False)
    guide.eval()
    return guide


class GuideFilter(nn.Module):
    """Args:
        guide: a SentenceTransformer, or a name/path (``"default"``: the bundled all-MiniLM-L6-v2),
            made ready by :func:`load_guide_model` (frozen, eval mode; as GISTEmbed's guide in the registry).
        model: the model being trained (its tokenizer decides whether the guide re-tokenises).
        margin: GISTEmbedLoss's absolute margin (0 = drop anything the guide ranks above the positive).
    """

    def __init__(self, guide: nn.Module | str, model: nn.Module, margin: float = 0.0) -> None:
        super().__init__()
        self.guide = load_guide_model(guide, model)
        self.margin = float(margin)
        self.margins = ScoreMargins(absolute_margin=self.margin)
        trained = unwrap_model(model)
        self.must_retokenize = _tokenizer_vocab(trained) != _tokenizer_vocab(guide) or (
            getattr(guide, "max_seq_length", 0) < getattr(trained, "max_seq_length", 0)
        )
        self._tokenizer = getattr(trained, "tokenizer", None)

    @property
    def dim(self) -> int:
        get_dim = getattr(self.guide, "get_embedding_dimension", None) or self.guide.get_sentence_embedding_dimension
        return int(get_dim())

    @torch.no_grad()
    def embed(self, sentence_features: Sequence[dict[str, Tensor]]) -> list[Tensor]:
        """Normalised guide embeddings ``(B, D_guide)`` of each tokenised column."""
        self.guide.eval()
        device = _features_device(sentence_features[0]) or next(self.guide.parameters()).device
        if next(self.guide.parameters()).device != device:  # follow the trained model (e.g. onto the GPU)
            self.guide.to(device)
        out = []
        for features in sentence_features:
            if self.must_retokenize:
                texts = self._tokenizer.batch_decode(features["input_ids"], skip_special_tokens=True)
                features = self.guide.preprocess(texts)
            features = {k: v.to(device) if isinstance(v, Tensor) else v for k, v in features.items()}
            out.append(F.normalize(self.guide(features)["sentence_embedding"].detach(), p=2, dim=1))
        return out

    def keep(self, guide_anchors: Tensor, guide_positives: Tensor, guide_candidates: Tensor) -> Tensor:
        """``(b, n)`` True where candidate ``j`` may stay a negative of anchor ``i``.

        guide_anchors, guide_positives: ``(b, D)`` (row i: anchor i and its positive);
        guide_candidates: ``(n, D)``; all normalised."""
        scores = guide_anchors @ guide_candidates.T.to(guide_anchors.dtype)
        positive_scores = (guide_anchors * guide_positives).sum(dim=1)
        return false_negative_mask(scores, positive_scores, margins=self.margins)


def _features_device(features: dict[str, Tensor]) -> torch.device | None:
    return next((v.device for v in features.values() if isinstance(v, Tensor)), None)


def _tokenizer_vocab(model: nn.Module) -> dict | None:
    tokenizer = getattr(model, "tokenizer", None)
    return tokenizer.get_vocab() if tokenizer is not None and hasattr(tokenizer, "get_vocab") else None
