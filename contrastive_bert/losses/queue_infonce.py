"""QueueInfoNCELoss: InfoNCE over in-batch negatives + a FIFO queue of past positives + hard
negatives mined from that queue, with false-negative control.

For anchor ``a_i`` (all embeddings L2-normalised, ``s(x, y) = x . y / temperature``)::

    loss_i = -s(a_i, p_i) + log( sum_{d in batch docs} e^{s(a_i, d)}
                                 + sum_{q in queue_i} e^{s(a_i, q)}
                                 + w_i * sum_{h in hard_i} e^{s(a_i, h)} )

* batch docs: every positive and explicit negative in the batch (exactly MultipleNegativesRankingLoss);
* ``hard_i``: the ``num_hard_negatives`` queue rows mined for ``a_i`` (:mod:`contrastive_bert.mining`,
  after dropping the anchor's/positive's own text, rows above the score margins, optionally same label);
* ``queue_i``: the other filled queue rows (the same false-negative filter applies when
  ``filter_queue_negatives``), so no row is counted twice;
* ``w_i``: with ``hard_negative_share = s`` the hard negatives are weighted so that they make up the
  fraction ``s`` of all negatives (as if each were repeated ``w_i`` times); ``None`` means ``w_i = 1``.

The returned dict splits the loss into parts that add up to it (the ST trainer sums and logs them):
``in_batch`` = the MNRL loss, ``queue`` = what the queue negatives add, ``hard`` = what the hard
negatives add (each a difference of log-partition functions, so ``queue, hard >= 0``).
"""

from __future__ import annotations

import copy
import logging
import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any, Literal

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from contrastive_bert.mining import (
    HardnessSchedule,
    faiss_available,
    false_negative_mask,
    mine_hard_negatives,
    select_top_ranked,
)
from contrastive_bert.models import unwrap_model
from contrastive_bert.queue import NO_ID, NO_LABEL, EmbeddingQueue, default_queue_size, hash_token_ids

logger = logging.getLogger(__name__)

__all__ = ["QueueInfoNCELoss", "build_queue_infonce_loss"]

PART_NAMES = ("in_batch", "queue", "hard")


def feature_ids(features: dict[str, Any]) -> Tensor:
    """Text ids of a tokenised column: ``(batch,)`` int64 hashes of the non-padding token ids."""
    input_ids = features.get("input_ids")
    if not isinstance(input_ids, Tensor) or input_ids.ndim != 2:
        batch = next(v.shape[0] for v in features.values() if isinstance(v, Tensor) and v.ndim > 0)
        device = next(v.device for v in features.values() if isinstance(v, Tensor))
        return torch.full((batch,), NO_ID, dtype=torch.int64, device=device)
    return hash_token_ids(input_ids, features.get("attention_mask"))


@dataclass
class _Batch:
    """Everything the row-wise loss needs for one step (normalised embeddings keep their graph).

    anchors ``(B, D)``, docs ``(B * (1 + n_neg), D)`` (positives first), queue ``(n, D)`` detached,
    queue_ids/labels ``(n,)``, anchor_ids/positive_ids/labels ``(B,)``, offset: curriculum rank offset.
    """

    anchors: Tensor
    docs: Tensor
    queue: Tensor
    queue_ids: Tensor
    queue_labels: Tensor
    anchor_ids: Tensor | None
    positive_ids: Tensor | None
    labels: Tensor | None
    offset: int


class QueueInfoNCELoss(nn.Module):
    def __init__(
        self,
        model: nn.Module,
        queue_size: int | None = None,
        temperature: float = 0.05,
        num_hard_negatives: int = 0,
        hard_negative_share: float | None = None,
        use_queue_negatives: bool = True,
        symmetric: bool = False,
        momentum: float | None = None,
        absolute_margin: float | None = None,
        relative_margin: float | None = 0.05,
        max_score: float | None = None,
        filter_same_label: bool = False,
        filter_same_anchor: bool = True,
        filter_queue_negatives: bool = True,
        hardness_schedule: HardnessSchedule | dict[str, Any] | None = None,
        mining_backend: Literal["auto", "faiss", "torch"] = "auto",
        mining_index: Literal["flat", "ivf", "hnsw"] = "flat",
        use_gpu_index: bool | None = None,
        train_dataset_size: int | None = None,
        gather_across_devices: bool = True,
        check_finite: bool = True,
    ) -> None:
        """InfoNCE with a MoCo-style embedding queue and hard negatives mined from it.

        Drop-in for ``MultipleNegativesRankingLoss(model, scale=1/temperature)``: same data
        ((anchor, positive) pairs or (anchor, positive, negative_1, ..., negative_n) tuples), same
        loss while the queue is empty.

        Args:
            model: the SentenceTransformer being trained.
            queue_size: K, rows in the queue. ``None``: the seed's rule
                ``min(65536, 4 * train_dataset_size / global_batch)`` at the first training step
                (65536 if ``train_dataset_size`` is unknown; ``QueueCheckpointCallback`` sets it).
            temperature: softmax temperature (``scale = 1 / temperature``), > 0.
            num_hard_negatives: k hard negatives mined from the queue per anchor (0 = none). More
                than the queue can supply after filtering is clamped (the rest is padding).
            hard_negative_share: weight the hard negatives as this fraction of all negatives
                (seed: 0.1-0.2); ``None`` = unweighted (each counts once, like any queue row).
            use_queue_negatives: use all (filtered) queue rows as negatives, MoCo style. ``False``
                keeps only the mined hard negatives (ANCE style; then FAISS can do the search).
            symmetric: also the positive->anchor direction over the batch, averaged with the
                anchor->candidates direction (like MNRL's ``per_direction`` symmetric loss).
            momentum: EMA coefficient of a momentum key encoder that embeds what is enqueued
                (MoCo, e.g. 0.999); ``None`` = enqueue the online encoder's detached positives.
            absolute_margin / relative_margin / max_score: false-negative filters relative to the
                anchor-positive score (as ``sentence_transformers.util.mine_hard_negatives``).
            filter_same_label: drop queue rows with the batch row's label (needs integer labels).
            filter_same_anchor: without such labels, drop queue rows that were the positive of a pair
                with the same anchor text (a query with several correct answers: those answers are
                false negatives by construction, whatever their text).
            filter_queue_negatives: apply the false-negative filters to the queue negatives too.
            hardness_schedule: curriculum from easy to hard; default always the hardest.
            mining_backend / mining_index / use_gpu_index: see :func:`contrastive_bert.mining.search_topk`.
                ``auto`` uses torch when the queue scores are computed anyway, else FAISS.
            gather_across_devices: all-gather what is enqueued under DDP (same queue on every rank).
            check_finite: raise ``ValueError`` when the loss is NaN/inf.
        """
        super().__init__()
        if not (isinstance(temperature, (int, float)) and math.isfinite(temperature) and temperature > 0):
            raise ValueError(f"temperature: expected a float > 0, got {temperature!r}")
        if queue_size is not None and (not isinstance(queue_size, int) or queue_size <= 0):
            raise ValueError(f"queue_size: expected a positive int or None, got {queue_size!r}")
        if not isinstance(num_hard_negatives, int) or num_hard_negatives < 0:
            raise ValueError(f"num_hard_negatives: expected an int >= 0, got {num_hard_negatives!r}")
        if queue_size is not None and num_hard_negatives > queue_size:
            raise ValueError(f"num_hard_negatives: {num_hard_negatives} exceeds queue_size {queue_size}")
        if hard_negative_share is not None and not (0.0 < hard_negative_share < 1.0):
            raise ValueError(f"hard_negative_share: expected a float in (0, 1) or None, got {hard_negative_share!r}")
        if momentum is not None and not (0.0 <= momentum < 1.0):
            raise ValueError(f"momentum: expected a float in [0, 1) or None, got {momentum!r}")
        if relative_margin is not None and not (0.0 <= relative_margin <= 1.0):
            raise ValueError(f"relative_margin: expected a float in [0, 1] or None, got {relative_margin!r}")
        if absolute_margin is not None and not math.isfinite(absolute_margin):
            raise ValueError(f"absolute_margin: expected a finite float or None, got {absolute_margin!r}")
        if mining_backend not in ("auto", "faiss", "torch"):
            raise ValueError(f"mining_backend: expected 'auto', 'faiss' or 'torch', got {mining_backend!r}")
        if mining_index not in ("flat", "ivf", "hnsw"):
            raise ValueError(f"mining_index: expected 'flat', 'ivf' or 'hnsw', got {mining_index!r}")
        if train_dataset_size is not None and (not isinstance(train_dataset_size, int) or train_dataset_size <= 0):
            raise ValueError(f"train_dataset_size: expected a positive int or None, got {train_dataset_size!r}")
        if not use_queue_negatives and num_hard_negatives == 0:
            logger.warning("use_queue_negatives=False and num_hard_negatives=0: the queue is never used")

        self.model = model
        self.temperature = float(temperature)
        self.num_hard_negatives = num_hard_negatives
        self.hard_negative_share = hard_negative_share
        self.use_queue_negatives = use_queue_negatives
        self.symmetric = symmetric
        self.momentum = momentum
        self.absolute_margin = absolute_margin
        self.relative_margin = relative_margin
        self.max_score = max_score
        self.filter_same_label = filter_same_label
        self.filter_same_anchor = filter_same_anchor
        self.filter_queue_negatives = filter_queue_negatives
        if isinstance(hardness_schedule, dict):  # from a YAML/JSON recipe
            hardness_schedule = HardnessSchedule(**hardness_schedule)
        if hardness_schedule is not None and not isinstance(hardness_schedule, HardnessSchedule):
            raise ValueError(f"hardness_schedule: expected a HardnessSchedule or dict, got {type(hardness_schedule).__name__}")
        self.hardness_schedule = hardness_schedule or HardnessSchedule()
        self.mining_backend = mining_backend
        self.mining_index = mining_index
        self.use_gpu_index = use_gpu_index
        self.train_dataset_size = train_dataset_size
        self.gather_across_devices = gather_across_devices
        self.check_finite = check_finite
        self.requested_queue_size = queue_size

        bare = unwrap_model(model)
        get_dim = getattr(bare, "get_embedding_dimension", None) or bare.get_sentence_embedding_dimension
        self.dim = int(get_dim())
        self.queue: EmbeddingQueue | None = None
        if queue_size is not None:
            self.queue = EmbeddingQueue(queue_size, self.dim, gather_distributed=gather_across_devices)
        self.register_buffer("num_steps", torch.zeros((), dtype=torch.int64))
        self.ema_model: nn.Module | None = None
        if momentum is not None:
            self.ema_model = copy.deepcopy(unwrap_model(model))
            self.ema_model.requires_grad_(False)
            self.ema_model.eval()

    # ------------------------------------------------------------------ properties
    @property
    def scale(self) -> float:
        return 1.0 / self.temperature

    @property
    def queue_size(self) -> int | None:
        return None if self.queue is None else self.queue.size

    @property
    def citation(self) -> str:
        return """
@inproceedings{he2020momentum,
    title={Momentum Contrast for Unsupervised Visual Representation Learning},
    author={He, Kaiming and Fan, Haoqi and Wu, Yuxin and Xie, Saining and Girshick, Ross},
    booktitle={CVPR},
    year={2020}
}
@inproceedings{xiong2021approximate,
    title={Approximate Nearest Neighbor Negative Contrastive Learning for Dense Text Retrieval},
    author={Xiong, Lee and Xiong, Chenyan and Li, Ye and Tang, Kwok-Fung and Liu, Jialin and Bennett, Paul and Ahmed, Junaid and Overwijk, Arnold},
    booktitle={ICLR},
    year={2021}
}
"""

    def get_config_dict(self) -> dict[str, Any]:
        return {
            "queue_size": self.queue_size if self.queue is not None else self.requested_queue_size,
            "temperature": self.temperature,
            "num_hard_negatives": self.num_hard_negatives,
            "hard_negative_share": self.hard_negative_share,
            "use_queue_negatives": self.use_queue_negatives,
            "symmetric": self.symmetric,
            "momentum": self.momentum,
            "absolute_margin": self.absolute_margin,
            "relative_margin": self.relative_margin,
            "max_score": self.max_score,
            "filter_same_label": self.filter_same_label,
            "filter_same_anchor": self.filter_same_anchor,
            "filter_queue_negatives": self.filter_queue_negatives,
            "hardness_schedule": vars(self.hardness_schedule),
            "mining_backend": self.mining_backend,
            "mining_index": self.mining_index,
        }

    # ------------------------------------------------------------------ queue management
    def ensure_queue(self, global_batch_size: int) -> EmbeddingQueue:
        """Create the queue on first use (seed rule when ``queue_size`` is None) and check it fits."""
        if self.queue is None:
            if self.train_dataset_size is not None:
                size = default_queue_size(self.train_dataset_size, global_batch_size)
            else:
                size = default_queue_size(2**40, global_batch_size)  # unknown data size: the 65536 cap
                logger.info("queue_size=None and train_dataset_size unknown: using %d rows", size)
            device = next(unwrap_model(self.model).parameters()).device
            self.queue = EmbeddingQueue(size, self.dim, gather_distributed=self.gather_across_devices).to(device)
        if global_batch_size > self.queue.size:
            raise ValueError(
                f"queue_size: {self.queue.size} is smaller than the (global) batch size {global_batch_size}; "
                "the queue must hold at least one batch"
            )
        return self.queue

    def queue_state_dict(self) -> dict[str, Any]:
        """What a checkpoint must keep besides the model: queue buffers, step counter, EMA encoder."""
        return {
            "queue": None if self.queue is None else {k: v.detach().cpu() for k, v in self.queue.state_dict().items()},
            "num_steps": int(self.num_steps.item()),
            "ema_model": None
            if self.ema_model is None
            else {k: v.detach().cpu() for k, v in self.ema_model.state_dict().items()},
            "dim": self.dim,
        }

    def load_queue_state_dict(self, state: dict[str, Any]) -> None:
        """Restore :meth:`queue_state_dict`. ValueError when the embedding size does not match."""
        if not isinstance(state, dict) or "queue" not in state:
            raise ValueError("state: expected the dict written by QueueInfoNCELoss.queue_state_dict()")
        if int(state.get("dim", self.dim)) != self.dim:
            raise ValueError(
                f"state: the saved queue has embedding size {state['dim']} but the model's is {self.dim}"
            )
        device = next(unwrap_model(self.model).parameters()).device
        if state["queue"] is not None:
            saved = state["queue"]["queue_embeddings"]
            if saved.ndim != 2 or saved.shape[1] != self.dim:
                raise ValueError(
                    f"state: the saved queue has embedding size {saved.shape[-1]} but the model's is {self.dim}"
                )
            if self.queue is None:
                self.queue = EmbeddingQueue(int(saved.shape[0]), self.dim, gather_distributed=self.gather_across_devices)
            self.queue.load_state_dict(state["queue"])
            self.queue.to(device)
        self.num_steps.fill_(int(state.get("num_steps", 0)))
        if state.get("ema_model") is not None:
            if self.ema_model is None:
                raise ValueError("state: it holds a momentum encoder but this loss has momentum=None")
            self.ema_model.load_state_dict(state["ema_model"])

    @torch.no_grad()
    def update_momentum_encoder(self) -> None:
        """EMA step ``ema = m * ema + (1 - m) * online`` (parameters; buffers are copied)."""
        if self.ema_model is None:
            return
        online = unwrap_model(self.model)
        m = self.momentum
        for ema_p, p in zip(self.ema_model.parameters(), online.parameters()):
            ema_p.mul_(m).add_(p.detach().to(ema_p.dtype), alpha=1.0 - m)
        for ema_b, b in zip(self.ema_model.buffers(), online.buffers()):
            ema_b.copy_(b)

    @torch.no_grad()
    def key_embeddings(self, positive_features: dict[str, Tensor], positive_embeddings: Tensor) -> Tensor:
        """What is enqueued for this batch: ``(B, D)`` detached positives (momentum encoder if any)."""
        if self.ema_model is None:
            return positive_embeddings.detach()
        if next(self.ema_model.parameters()).device != positive_embeddings.device:
            self.ema_model.to(positive_embeddings.device)
        return self.ema_model(dict(positive_features))["sentence_embedding"].detach()

    @torch.no_grad()
    def after_training_step(
        self, keys: Tensor, positive_ids: Tensor | None, labels: Tensor | None, anchor_ids: Tensor | None = None
    ) -> None:
        """Enqueue the keys ``(B, D)`` and advance the step counter (training mode only)."""
        self.queue.enqueue(keys, ids=positive_ids, labels=self.group_labels(labels, anchor_ids))
        self.num_steps += 1

    def group_labels(self, labels: Tensor | None, anchor_ids: Tensor | None) -> Tensor | None:
        """``(B,)`` group of each row for the same-label filter: integer ``labels`` when
        ``filter_same_label``, else the anchor's text id when ``filter_same_anchor``, else None."""
        if self.filter_same_label and self._usable_labels(labels):
            return labels.to(torch.int64)
        if self.filter_same_anchor and anchor_ids is not None and not bool((anchor_ids == NO_ID).any()):
            return anchor_ids
        return None

    @staticmethod
    def _usable_labels(labels: Tensor | None) -> bool:
        return isinstance(labels, Tensor) and labels.ndim == 1 and not labels.is_floating_point()

    # ------------------------------------------------------------------ loss
    def forward(self, sentence_features: Iterable[dict[str, Tensor]], labels: Tensor | None = None) -> dict[str, Tensor]:
        """sentence_features: (anchor, positive[, negative_1, ...]) tokenised columns of ``B`` rows.
        Returns ``{"in_batch", "queue", "hard"}`` scalar parts (their sum is the loss)."""
        from sentence_transformers.base.losses.merged_forward import embed_columns

        sentence_features = list(sentence_features)
        if len(sentence_features) < 2:
            raise ValueError(f"sentence_features: expected at least 2 columns (anchor, positive), got {len(sentence_features)}")
        anchor_ids = feature_ids(sentence_features[0])
        positive_ids = feature_ids(sentence_features[1])
        embeddings = embed_columns(self.model, sentence_features)
        training = unwrap_model(self.model).training and torch.is_grad_enabled()
        if training:
            self.update_momentum_encoder()
        parts = self.compute_loss_from_embeddings(embeddings, labels, anchor_ids=anchor_ids, positive_ids=positive_ids)
        if training:
            keys = self.key_embeddings(sentence_features[1], embeddings[1])
            self.after_training_step(keys, positive_ids, labels, anchor_ids)
        return parts

    def prepare_batch(
        self,
        embeddings: Sequence[Tensor],
        labels: Tensor | None,
        anchor_ids: Tensor | None = None,
        positive_ids: Tensor | None = None,
    ) -> _Batch:
        """Normalise, concatenate the candidate columns and snapshot the queue for this step."""
        if len(embeddings) < 2:
            raise ValueError(f"embeddings: expected at least 2 columns (anchor, positive), got {len(embeddings)}")
        anchors = embeddings[0]
        batch_size = anchors.shape[0]
        if any(e.shape[0] != batch_size for e in embeddings):
            raise ValueError(f"embeddings: all columns must have {batch_size} rows, got {[e.shape[0] for e in embeddings]}")
        if anchors.shape[1] != self.dim:
            raise ValueError(f"embeddings: the model produces dim {anchors.shape[1]} but the queue expects {self.dim}")
        world = torch.distributed.get_world_size() if (
            self.gather_across_devices and torch.distributed.is_available() and torch.distributed.is_initialized()
        ) else 1
        queue = self.ensure_queue(batch_size * world)
        if queue.queue_embeddings.device != anchors.device:
            queue.to(anchors.device)
        q_emb, q_ids, q_labels = queue.filled()
        return _Batch(
            anchors=F.normalize(anchors, p=2, dim=1),
            docs=F.normalize(torch.cat(list(embeddings[1:]), dim=0), p=2, dim=1),
            queue=q_emb.detach().to(anchors.dtype),
            queue_ids=q_ids,
            queue_labels=q_labels,
            anchor_ids=anchor_ids,
            positive_ids=positive_ids,
            labels=self.group_labels(labels, anchor_ids),
            offset=self.hardness_schedule.offset(int(self.num_steps.item()), self.num_hard_negatives),
        )

    def compute_loss_from_embeddings(
        self,
        embeddings: Sequence[Tensor],
        labels: Tensor | None = None,
        anchor_ids: Tensor | None = None,
        positive_ids: Tensor | None = None,
    ) -> dict[str, Tensor]:
        """embeddings: (anchor, positive[, negatives...]) each ``(B, D)``. Returns the named parts."""
        batch = self.prepare_batch(embeddings, labels, anchor_ids, positive_ids)
        if torch.is_grad_enabled() and batch.queue.numel() > 0:
            # the backward pass runs after this step's enqueue, which writes the buffer in place:
            # give autograd its own copy of the rows it saved
            batch.queue = batch.queue.clone()
        parts = self.loss_rows(batch, 0, batch.anchors.shape[0])
        total = batch.anchors.shape[0]
        return {name: value / total for name, value in parts.items()}

    def loss_rows(self, batch: _Batch, begin: int, end: int) -> dict[str, Tensor]:
        """Sum over anchors ``begin:end`` of each loss part (divide by ``B`` for the mean)."""
        B = batch.anchors.shape[0]
        rows = torch.arange(begin, end, device=batch.anchors.device)
        anchors = batch.anchors[begin:end]  # (b, D)
        scale = self.scale
        batch_logits = anchors @ batch.docs.T * scale  # (b, B * (1 + n_neg))
        positive_logits = batch_logits[torch.arange(end - begin, device=rows.device), rows]  # (b,)
        lse_batch = torch.logsumexp(batch_logits, dim=1)

        n = batch.queue.shape[0]
        k = self.num_hard_negatives
        b = end - begin
        queue_logits = batch_logits.new_empty((b, 0))
        hard_logits = batch_logits.new_empty((b, 0))
        log_w = batch_logits.new_zeros((b,))
        if n > 0 and (self.use_queue_negatives or k > 0):
            with torch.no_grad():
                positive_scores = positive_logits.detach() / scale
                slice_ids = None if batch.anchor_ids is None else batch.anchor_ids[begin:end]
                slice_pids = None if batch.positive_ids is None else batch.positive_ids[begin:end]
                slice_labels = None if batch.labels is None else batch.labels[begin:end]
                filters = dict(
                    absolute_margin=self.absolute_margin,
                    relative_margin=self.relative_margin,
                    max_score=self.max_score,
                )
            if self.use_queue_negatives:
                queue_scores = anchors @ batch.queue.T  # (b, n), with grad wrt anchors
                with torch.no_grad():
                    # one mask for both uses: the hard negatives are always filtered, the queue
                    # negatives too unless filter_queue_negatives=False (then only by id)
                    filtered = false_negative_mask(
                        queue_scores.detach(), positive_scores, batch.queue_ids, slice_ids, slice_pids,
                        batch.queue_labels if slice_labels is not None else None, slice_labels, **filters,
                    )
                    if self.filter_queue_negatives:
                        keep = filtered.clone()
                    else:
                        keep = false_negative_mask(
                            queue_scores.detach(), positive_scores, batch.queue_ids, slice_ids, slice_pids
                        )
                    hard_idx = None
                    if k > 0:
                        hard_idx = select_top_ranked(queue_scores.detach(), filtered, k, batch.offset)
                        valid = hard_idx >= 0
                        # each row is counted once: the mined rows leave the queue block for the hard block
                        chosen = torch.zeros(keep.shape, dtype=torch.int32, device=keep.device)
                        chosen.scatter_add_(1, hard_idx.clamp(min=0), valid.to(torch.int32))
                        keep &= chosen == 0
                queue_logits = (queue_scores * scale).masked_fill(~keep, -math.inf)
                if hard_idx is not None:
                    hard_logits = (queue_scores.gather(1, hard_idx.clamp(min=0)) * scale).masked_fill(~valid, -math.inf)
            else:
                with torch.no_grad():
                    backend = "faiss" if self.mining_backend == "auto" and faiss_available() else self.mining_backend
                    backend = "torch" if backend == "auto" else backend
                    hard_idx = mine_hard_negatives(
                        anchors.detach(), positive_scores, batch.queue, k,
                        key_ids=batch.queue_ids, anchor_ids=slice_ids, positive_ids=slice_pids,
                        key_labels=batch.queue_labels, anchor_labels=slice_labels,
                        offset=batch.offset, backend=backend, index_type=self.mining_index,
                        use_gpu=self.use_gpu_index, **filters,
                    )
                    valid = hard_idx >= 0
                hard_vectors = batch.queue[hard_idx.clamp(min=0)]  # (b, k, D)
                hard_logits = (torch.einsum("bd,bkd->bk", anchors, hard_vectors) * scale).masked_fill(~valid, -math.inf)
            if k > 0 and self.hard_negative_share is not None:
                with torch.no_grad():
                    share = self.hard_negative_share
                    n_hard = valid.sum(dim=1).to(batch_logits.dtype)
                    n_other = (batch_logits.shape[1] - 1) + torch.isfinite(queue_logits).sum(dim=1).to(batch_logits.dtype)
                    weight = share / (1.0 - share) * n_other / n_hard.clamp(min=1.0)
                    log_w = torch.where(n_hard > 0, weight.log(), torch.zeros_like(weight))

        lse_queue = torch.logsumexp(torch.cat([batch_logits, queue_logits], dim=1), dim=1)
        lse_all = torch.logsumexp(torch.cat([batch_logits, queue_logits, hard_logits + log_w.unsqueeze(1)], dim=1), dim=1)
        in_batch = lse_batch - positive_logits
        queue_part = lse_queue - lse_batch
        hard_part = lse_all - lse_queue
        if self.symmetric:
            # positive_i -> anchors of the batch (doc_to_query of MNRL), averaged with the forward direction
            positives = batch.docs[begin:end]
            backward_logits = positives @ batch.anchors.T * scale  # (b, B)
            backward = torch.logsumexp(backward_logits, dim=1) - positive_logits
            in_batch = (in_batch + backward) / 2
            queue_part = queue_part / 2
            hard_part = hard_part / 2
        parts = {"in_batch": in_batch.sum(), "queue": queue_part.sum(), "hard": hard_part.sum()}
        if self.check_finite:
            bad = [name for name, value in parts.items() if not torch.isfinite(value)]
            if bad:
                raise ValueError(
                    f"loss: the {', '.join(bad)} part(s) are NaN/inf (temperature={self.temperature}); "
                    "check the inputs, the learning rate and mixed-precision settings"
                )
        return parts


def build_queue_infonce_loss(
    model: nn.Module, train_dataset_size: int | None, batch_size: int | None, **options: Any
) -> QueueInfoNCELoss:
    """The loss for the ``train`` command / recipes: seed-rule queue size from the data set and
    batch size (unless ``queue_size`` is given), everything else from ``options``.
    ``cached=True`` (with ``mini_batch_size``) returns :class:`CachedQueueInfoNCELoss`."""
    options = dict(options)
    cached = bool(options.pop("cached", False))
    if options.get("queue_size") is None and train_dataset_size is not None and batch_size is not None:
        options["queue_size"] = default_queue_size(int(train_dataset_size), int(batch_size))
    if cached:
        from contrastive_bert.losses.cached_queue_infonce import CachedQueueInfoNCELoss

        return CachedQueueInfoNCELoss(model, train_dataset_size=train_dataset_size, **options)
    return QueueInfoNCELoss(model, train_dataset_size=train_dataset_size, **options)
