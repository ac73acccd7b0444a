"""QueueCoSENTLoss: score-aware training on graded pairs with the queue InfoNCE loss in one loss.

On a batch of ``(sentence1, sentence2, score)`` rows (score in [0, 1])::

    loss = infonce_weight * QueueInfoNCE(anchors = sentence1, positives = sentence2 of the rows
                                         with score >= positive_threshold;
                                         + sentence2 of the rows with score <= negative_threshold
                                         as in-batch negatives)
         + score_weight * CoSENT-or-AnglE(score, similarity) over all rows

A low-score pair's partner is a negative of every anchor, its own anchor included wherever that
text is an anchor of a high-score row (in STS-B + MRPC train, 253 of the 3,136 rows <= 0.4 share a
sentence with a row >= 0.8). The queue holds the high-score rows' positives. With
``infonce_weight = 0`` the loss equals sentence-transformers' ``CoSENTLoss(scale=score_scale)``
(``score_term="cosent"``) or ``AnglELoss(scale=score_scale)`` (``"angle"``).
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

import torch
from torch import Tensor, nn

from contrastive_bert.losses.option_checks import check_choice, check_number, config_dict, option_error, option_names
from contrastive_bert.losses.queue_infonce import QueueInfoNCELoss, feature_ids, seed_rule_queue_size
from contrastive_bert.losses.score_terms import SCORE_TERMS, pair_similarity, ranking_loss
from contrastive_bert.models import unwrap_model

logger = logging.getLogger(__name__)

__all__ = ["QueueCoSENTLoss", "ScoreTermConfig", "build_queue_cosent_loss"]

@dataclass(frozen=True)
class ScoreTermConfig:
    """QueueCoSENTLoss's own options (the queue's are :class:`QueueInfoNCELoss`'s); each value
    checked on creation (``ValueError("loss_options.<name>: ...")``).

    Args:
        infonce_weight: weight of the queue InfoNCE term (>= 0; 0 = CoSENT/AnglE alone).
        score_weight: weight of the score term (>= 0; not both 0).
        score_term: ``"cosent"`` (cosine, CoSENTLoss) or ``"angle"`` (AnglELoss's angle similarity).
        score_scale: the score term's scale (sentence-transformers' default 20), > 0.
        positive_threshold: rows scoring at least this are InfoNCE (anchor, positive) pairs (0.8:
            the threshold ``pairs`` training data uses), in [0, 1].
        negative_threshold: rows scoring at most this give their sentence2 as an in-batch
            negative; None = off. Below ``positive_threshold``.
    """

    infonce_weight: float = 1.0
    score_weight: float = 1.0
    score_term: str = "cosent"
    score_scale: float = 20.0
    positive_threshold: float = 0.8
    negative_threshold: float | None = 0.4

    def __post_init__(self) -> None:
        options = vars(self)
        for name in ("infonce_weight", "score_weight"):
            check_number(options, name, "a number >= 0", lambda v: v >= 0)
        if self.infonce_weight == 0 and self.score_weight == 0:
            raise option_error("score_weight", "a positive number when infonce_weight is 0", self.score_weight)
        check_choice(options, "score_term", SCORE_TERMS)
        check_number(options, "score_scale", "a positive number", lambda v: v > 0)
        check_number(options, "positive_threshold", "a score in [0, 1]", lambda v: 0 <= v <= 1)
        check_number(options, "negative_threshold", "a score in [0, 1]", lambda v: 0 <= v <= 1, allow_none=True)
        if self.negative_threshold is not None and self.negative_threshold >= self.positive_threshold:
            raise option_error("negative_threshold", f"a score below positive_threshold ({self.positive_threshold})",
                               self.negative_threshold)
        for name in ("infonce_weight", "score_weight", "score_scale", "positive_threshold"):
            object.__setattr__(self, name, float(getattr(self, name)))


class QueueCoSENTLoss(nn.Module):
    """Score-aware training on graded pairs: the queue InfoNCE loss over the high-score pairs plus
    CoSENT (or AnglE) over all pairs, in one loss (the formula is in the module docstring).

    Args:
        model: the SentenceTransformer being trained.
        infonce_weight / score_weight / score_term / score_scale / positive_threshold /
            negative_threshold: this loss's options (:class:`ScoreTermConfig`; defaults 1.0, 1.0,
            ``"cosent"``, 20.0, 0.8, 0.4).
        **queue_options: every option of :class:`QueueInfoNCELoss` (queue_size, temperature, ...),
            plus ``train_dataset_size``.

    Inputs:
        +--------------------------------+------------------------------+
        | Texts                          | Labels                       |
        +================================+==============================+
        | (sentence1, sentence2) pairs   | float similarity score [0,1] |
        +--------------------------------+------------------------------+

        Registered as ``queue_cosent`` (data format ``scored_pairs``: ``sentence1``, ``sentence2``, ``score``).

    Recommendations:
        - The default ``BatchSamplers.BATCH_SAMPLER`` (as for CoSENTLoss): rows with equal texts are
          fine, the id filters keep a text from being its own negative.
        - Scores in [0, 1] (STS-B's 0-5 divided by 5). With few high-score rows per batch the
          InfoNCE term sees few anchors: a batch of 32+ rows.
        - CoSENT's gradient is far larger than the InfoNCE parts' at equal weights (about 70x on
          STS-B): an ``infonce_weight`` of 10-30 for the InfoNCE term to matter.

    Relations:
        - With ``infonce_weight=0`` it equals :class:`sentence_transformers.losses.CoSENTLoss`
          (``score_term="cosent"``) or :class:`sentence_transformers.losses.AnglELoss` (``"angle"``)
          at ``scale=score_scale``.
        - Its InfoNCE term is :class:`QueueInfoNCELoss` on the rows scoring ``>= positive_threshold``.
    """

    def __init__(
        self,
        model: nn.Module,
        infonce_weight: float = 1.0,
        score_weight: float = 1.0,
        score_term: str = "cosent",
        score_scale: float = 20.0,
        positive_threshold: float = 0.8,
        negative_threshold: float | None = 0.4,
        **queue_options: Any,
    ) -> None:
        super().__init__()
        self.score_config = ScoreTermConfig(infonce_weight, score_weight, score_term, score_scale,
                                            positive_threshold, negative_threshold)
        self.model = model
        self.infonce_weight = self.score_config.infonce_weight
        self.score_weight = self.score_config.score_weight
        self.score_term = self.score_config.score_term
        self.score_scale = self.score_config.score_scale
        self.positive_threshold = self.score_config.positive_threshold
        self.negative_threshold = self.score_config.negative_threshold
        self.queue_loss = QueueInfoNCELoss(model, **queue_options)
        if self.queue_loss.config.queue.dual_bank:
            raise ValueError("loss_options.dual_bank: not with queue_cosent (it banks scored pairs' positives only); "
                             "use queue_infonce for a dual bank")

    @classmethod
    def option_names(cls) -> tuple[str, ...]:
        """This loss's options and every option of :class:`QueueInfoNCELoss`."""
        return option_names(ScoreTermConfig) + QueueInfoNCELoss.option_names()

    @classmethod
    def check_options(cls, options: Mapping[str, Any]) -> None:
        """This loss's options by :class:`ScoreTermConfig`, the queue's by :meth:`QueueInfoNCELoss.check_options`."""
        own = option_names(ScoreTermConfig)
        ScoreTermConfig(**{k: v for k, v in options.items() if k in own})
        QueueInfoNCELoss.check_options({k: v for k, v in options.items() if k not in own})

    @property
    def queue(self):
        return self.queue_loss.queue

    def get_config_dict(self) -> dict[str, Any]:
        return {**config_dict(self.score_config), **self.queue_loss.get_config_dict()}

    @property
    def citation(self) -> str:
        return self.queue_loss.citation + """
@article{10531646,
    author={Huang, Xiang and Peng, Hao and Zou, Dongcheng and Liu, Zhiwei and Li, Jianxin and Liu, Kay and Wu, Jia and Su, Jianlin and Yu, Philip S.},
    journal={IEEE/ACM Transactions on Audio, Speech, and Language Processing},
    title={CoSENT: Consistent Sentence Embedding via Similarity Ranking},
    year={2024},
    doi={10.1109/TASLP.2024.3402087}
}
"""

    def forward(self, sentence_features: Iterable[dict[str, Tensor]], labels: Tensor) -> dict[str, Tensor]:
        """sentence_features: (sentence1, sentence2) tokenised columns; labels: ``(B,)`` scores in [0, 1].
        Returns ``{"in_batch", "queue", "hard", "score"}`` (weighted; their sum is the loss)."""
        from sentence_transformers.base.losses.merged_forward import embed_columns

        sentence_features = list(sentence_features)
        if len(sentence_features) != 2:
            raise ValueError(f"sentence_features: expected 2 columns (sentence1, sentence2), got {len(sentence_features)}")
        if labels is None or labels.numel() != sentence_features[0]["input_ids"].shape[0]:
            raise ValueError("labels: expected one score in [0, 1] per pair (the data format scored_pairs)")
        scores = labels.view(-1).float()
        inner = self.queue_loss
        training = unwrap_model(self.model).training and torch.is_grad_enabled()
        guide = None if inner.guide is None or self.infonce_weight == 0 else inner.guide.embed(sentence_features)
        embeddings = embed_columns(self.model, sentence_features)
        similarity = pair_similarity(embeddings[0], embeddings[1], self.score_term)
        parts = {"score": self.score_weight * ranking_loss(similarity, scores.to(similarity.device), self.score_scale)}
        high = (scores >= self.positive_threshold).to(embeddings[0].device)
        zero = parts["score"].new_zeros(())
        if self.infonce_weight == 0 or not bool(high.any()):
            if training:
                inner.begin_micro_batch()
                inner.end_micro_batch()  # a training step all the same (the curriculum counts optimizer steps)
            return {"in_batch": zero, "queue": zero, "hard": zero, **parts}
        low = torch.zeros_like(high) if self.negative_threshold is None else (scores <= self.negative_threshold).to(high.device)
        ids = [feature_ids(features) for features in sentence_features]
        if training:
            inner.begin_micro_batch()  # the momentum update, once per optimizer step
        infonce = inner.compute_loss_from_embeddings(
            [embeddings[0][high], embeddings[1][high]], None, anchor_ids=ids[0][high], positive_ids=ids[1][high],
            guide_embeddings=None if guide is None else [guide[0][high], guide[1][high]],
            extra_docs=embeddings[1][low], guide_extra_docs=None if guide is None else guide[1][low],
        )
        if training:
            keys = inner.key_embeddings(sentence_features[1], embeddings[1])[high]
            inner.after_training_step(keys, ids[1][high], None, ids[0][high], None if guide is None else guide[1][high])
        return {**{name: self.infonce_weight * value for name, value in infonce.items()}, **parts}


def build_queue_cosent_loss(
    model: nn.Module, train_dataset_size: int | None, batch_size: int | None, **options: Any
) -> QueueCoSENTLoss:
    """The ``queue_cosent`` loss for recipes: seed-rule queue size as :func:`build_queue_infonce_loss`."""
    options = seed_rule_queue_size(options, train_dataset_size, batch_size)
    return QueueCoSENTLoss(model, train_dataset_size=train_dataset_size, **options)
