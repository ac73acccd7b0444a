"""Supervised contrastive loss (SupCon, Khosla et al. 2020), plain and label-anchored.

``label_anchored_supcon`` is the one place where the label-anchored batch of ACL-Embed and
ACL-CL is assembled: sample embeddings (one or more views of the batch) interleaved with label
embeddings whose class is their row index, contrasted with :func:`supervised_contrastive_loss`.
``check_labels`` is the one label check of the losses that take class labels.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence

import torch
import torch.nn.functional as F
from torch import Tensor

logger = logging.getLogger(__name__)

__all__ = ["SUPCON_CITATION", "check_labels", "label_anchored_supcon", "supervised_contrastive_loss"]

SUPCON_CITATION = """
@inproceedings{khosla2020supervised,
    title={Supervised Contrastive Learning},
    author={Khosla, Prannay and Teterwak, Piotr and Wang, Chen and Sarna, Aaron and Tian, Yonglong and Isola, Phillip and Maschinot, Aaron and Liu, Ce and Krishnan, Dilip},
    booktitle={Advances in Neural Information Processing Systems},
    year={2020}
}
"""


def check_labels(labels: Tensor | None, num_labels: int, owner: str = "the loss") -> Tensor:
    """Class labels (B,) as a 1-D integer tensor with values in [0, num_labels); ValueError otherwise.

    ``owner`` names the caller in the message (e.g. ``"ACLEmbedLoss"``).
    """
    if labels is None:
        raise ValueError(f"labels: {owner} needs integer class labels, got None")
    labels = torch.as_tensor(labels)
    if labels.dim() != 1 or labels.dtype.is_floating_point or labels.dtype == torch.bool:
        raise ValueError(f"labels: expected a 1-D integer tensor, got dtype {labels.dtype} shape {tuple(labels.shape)}")
    if labels.numel() and (int(labels.min()) < 0 or int(labels.max()) >= num_labels):
        bad = sorted({int(x) for x in labels.tolist() if not 0 <= int(x) < num_labels})
        raise ValueError(f"labels: values {bad} are outside the label set [0, {num_labels})")
    return labels


def supervised_contrastive_loss(embeddings: Tensor, labels: Tensor, temperature: float = 0.5) -> Tensor:
    """SupCon ``L_out`` over L2-normalised rows.

    Args:
        embeddings: (M, d) rows to contrast.
        labels: (M,) integer classes; rows with equal labels are positives of each other.
        temperature: tau in exp(cos / tau).

    Returns:
        Scalar: mean over anchors i with >= 1 positive of
        ``-1/|P(i)| sum_{p in P(i)} log(exp(s_ip) / sum_{a != i} exp(s_ia))``; 0 (with graph) if none.

    Inputs:
        +----------------------------+-------------------+
        | Embeddings                 | Labels            |
        +============================+===================+
        | (M, d) rows (any encoder)  | (M,) int classes  |
        +----------------------------+-------------------+

    Recommendations:
        - Batches with several rows per class (a ``group_by_label`` sampler): rows without a
          positive are left out of the mean.
        - tau 0.1-0.5; lower sharpens the contrast and needs more rows per class.

    Relations:
        - The contrastive term of :class:`~contrastive_bert.losses.acl_embed.ACLEmbedLoss` with
          ``mode="supcon"``; :func:`label_anchored_supcon` adds label anchors to its rows.
        - With one positive per anchor it is InfoNCE over the batch
          (:class:`sentence_transformers.losses.MultipleNegativesRankingLoss`'s ``query_to_query``
          terms); resembles :class:`sentence_transformers.losses.BatchAllTripletLoss` on labels.
    """
    if embeddings.dim() != 2 or labels.dim() != 1 or labels.shape[0] != embeddings.shape[0]:
        raise ValueError(
            f"embeddings/labels: expected (M, d) and (M,), got {tuple(embeddings.shape)} and {tuple(labels.shape)}"
        )
    if not temperature > 0:
        raise ValueError(f"temperature: must be > 0, got {temperature}")
    z = F.normalize(embeddings.float(), p=2, dim=-1)
    similarity = z @ z.T / temperature  # (M, M)
    eye = torch.eye(similarity.shape[0], dtype=torch.bool, device=similarity.device)
    log_denominator = torch.logsumexp(similarity.masked_fill(eye, float("-inf")), dim=1, keepdim=True)
    log_prob = (similarity - log_denominator).masked_fill(eye, 0.0)
    positives = (labels[:, None] == labels[None, :]) & ~eye
    num_positives = positives.sum(dim=1)
    has_positive = num_positives > 0
    if not bool(has_positive.any()):
        return similarity.sum() * 0.0
    per_anchor = -(log_prob * positives).sum(dim=1) / num_positives.clamp(min=1)
    return per_anchor[has_positive].mean()


def _as_views(tensors: Tensor | Sequence[Tensor], name: str) -> list[Tensor]:
    views = [tensors] if isinstance(tensors, Tensor) else list(tensors)
    if not views or any(not isinstance(v, Tensor) or v.dim() != 2 for v in views):
        raise ValueError(f"{name}: expected a (N, d) tensor or a non-empty list of them")
    if any(v.shape != views[0].shape for v in views):
        raise ValueError(f"{name}: every view must have one shape, got {[tuple(v.shape) for v in views]}")
    return views


def label_anchored_supcon(
    embeddings: Tensor | Sequence[Tensor],
    labels: Tensor,
    label_embeddings: Tensor | Sequence[Tensor] | None = None,
    temperature: float = 0.5,
) -> Tensor:
    """SupCon over samples and label anchors: rows ``[h_1; l_1; h_2; l_2; ...]`` with labels
    ``[y; 0..C-1; y; 0..C-1; ...]`` (row k of a label view is class k's anchor).

    Args:
        embeddings: (B, d) sample embeddings, or a list of V views of the same batch (each (B, d)),
            e.g. student and teacher layers.
        labels: (B,) integer classes in [0, C).
        label_embeddings: (C, d), or a list of V such views (one per sample view); None = plain
            SupCon over the samples only.
        temperature: tau.

    Returns:
        Scalar loss (float32), with graph.

    Inputs:
        +--------------------------------------------+-------------------+
        | Embeddings                                 | Labels            |
        +============================================+===================+
        | V views of (B, d) + V views of (C, d) rows | (B,) int classes  |
        +--------------------------------------------+-------------------+

    Recommendations:
        - Label rows from the classifier's weight (ACL-Embed) or from encoded label names; with
          them every anchor has a positive (its class's row) even in a batch with one row per class.

    Relations:
        - :func:`supervised_contrastive_loss` over the concatenated rows; ``label_embeddings=None`` is exactly it.
        - The contrastive term of :class:`~contrastive_bert.losses.acl_embed.ACLEmbedLoss`
          (``mode="acl"``) and of the cross-layer loss's ACL-CL (student and teacher views).
    """
    views = _as_views(embeddings, "embeddings")
    if views[0].shape[0] != labels.shape[0]:
        raise ValueError(f"labels: expected {views[0].shape[0]} labels (one per row), got {tuple(labels.shape)}")
    dtype = views[0].dtype
    if label_embeddings is None:
        rows, row_labels = views, [labels] * len(views)
    else:
        label_views = _as_views(label_embeddings, "label_embeddings")
        if len(label_views) != len(views):
            raise ValueError(
                f"label_embeddings: expected {len(views)} label views (one per embeddings view), got {len(label_views)}"
            )
        if label_views[0].shape[1] != views[0].shape[1]:
            raise ValueError(
                f"label_embeddings: dimension {label_views[0].shape[1]} differs from the embeddings' {views[0].shape[1]}"
            )
        anchors = torch.arange(label_views[0].shape[0], device=labels.device, dtype=labels.dtype)
        rows, row_labels = [], []
        for view, label_view in zip(views, label_views):
            rows += [view, label_view.to(dtype)]
            row_labels += [labels, anchors]
    return supervised_contrastive_loss(torch.cat([r.to(dtype) for r in rows], dim=0), torch.cat(row_labels), temperature)
