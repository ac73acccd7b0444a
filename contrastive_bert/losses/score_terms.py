"""Score-aware ranking terms on graded pairs: CoSENT and AnglE from pair similarities and labels.

``loss = log(1 + sum_{(i, j): label_i > label_j} exp(scale * (s_j - s_i)))`` where ``s_i`` is pair
``i``'s similarity: cosine for CoSENT, sentence-transformers' ``pairwise_angle_sim`` for AnglE.
The same values as sentence-transformers' ``CoSENTLoss`` / ``AnglELoss`` on pairs.
"""

from __future__ import annotations

from typing import Literal

import torch
from sentence_transformers.util import pairwise_angle_sim, pairwise_cos_sim
from torch import Tensor

__all__ = ["SCORE_TERMS", "pair_similarity", "ranking_loss"]

SCORE_TERMS = ("cosent", "angle")


def pair_similarity(first: Tensor, second: Tensor, term: Literal["cosent", "angle"] = "cosent") -> Tensor:
    """``(B,)`` similarity of row ``i`` of ``first`` and ``second`` (``(B, D)`` each, any norm)."""
    if term not in SCORE_TERMS:
        raise ValueError(f"loss_options.score_term: expected one of {SCORE_TERMS}, got {term!r}")
    return pairwise_cos_sim(first, second) if term == "cosent" else pairwise_angle_sim(first, second)


def ranking_loss(similarities: Tensor, labels: Tensor, scale: float = 20.0) -> Tensor:
    """CoSENT's ranking loss over every pair of rows with different labels.

    similarities, labels: ``(B,)``. Returns a scalar (0-graph-safe: ``log 1 = 0`` with no ordered pair)."""
    if similarities.shape != labels.shape or similarities.ndim != 1:
        raise ValueError(f"similarities/labels: expected two (B,) tensors, got {tuple(similarities.shape)} and {tuple(labels.shape)}")
    scores = similarities.float() * scale
    differences = scores.unsqueeze(0) - scores.unsqueeze(1)  # [i, j] = s_j - s_i
    ordered = labels.unsqueeze(1) > labels.unsqueeze(0)  # label_i > label_j
    return torch.logsumexp(torch.cat([scores.new_zeros(1), differences[ordered]]), dim=0)
