"""QueueInfoNCELoss: InfoNCE over in-batch negatives + a FIFO queue of past positives + hard
negatives mined from that queue, with false-negative control.

Each step: embed the columns, let :class:`~contrastive_bert.losses.hard_negative_miner.HardNegativeMiner`
choose each anchor's queue negatives and hard negatives (after the false-negative filters and,
with ``guide_model``, the guide's veto), score them with
:func:`~contrastive_bert.losses.infonce_math.queue_infonce_loss` (the formula is in its module
docstring), then enqueue this batch's positives (embedded by the momentum encoder if any).

The returned dict splits the loss into parts that add up to it (the ST trainer sums and logs them):
``in_batch`` = the MNRL loss, ``queue`` = what the queue negatives add, ``hard`` = what the hard
negatives add.
"""

from __future__ import annotations

import inspect
import logging
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from contrastive_bert.losses.guide_filter import GuideFilter
from contrastive_bert.losses.hard_negative_miner import HardNegativeMiner
from contrastive_bert.losses.infonce_math import queue_infonce_loss
from contrastive_bert.losses.momentum_encoder import MomentumEncoder
from contrastive_bert.losses.option_checks import check_choice, check_flags, check_number, check_unknown, option_error
from contrastive_bert.mining import HardnessSchedule
from contrastive_bert.models import unwrap_model
from contrastive_bert.queue import NO_ID, EmbeddingQueue, default_queue_size, hash_token_ids

logger = logging.getLogger(__name__)

__all__ = ["QueueInfoNCELoss", "build_queue_infonce_loss", "feature_ids"]


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
    """One step's inputs (normalised embeddings keep their graph).

    anchors ``(B, D)``, docs ``(N, D)`` (positives first), queue ``(n, D)`` detached, queue_ids /
    queue_groups ``(n,)``, anchor_ids / positive_ids / groups ``(B,)``, step: for the curriculum;
    with a guide model: guide_anchors ``(B, G)``, guide_docs ``(N, G)``, guide_queue ``(n, G)``.
    """

    anchors: Tensor
    docs: Tensor
    queue: Tensor
    queue_ids: Tensor
    queue_groups: Tensor
    anchor_ids: Tensor | None
    positive_ids: Tensor | None
    groups: Tensor | None
    step: int
    guide_anchors: Tensor | None = None
    guide_docs: Tensor | None = None
    guide_queue: Tensor | None = None


def _option_defaults(cls: type) -> dict[str, Any]:
    parameters = inspect.signature(cls.__init__).parameters.values()
    return {p.name: p.default for p in parameters if p.default is not inspect.Parameter.empty}


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
        perc_pos: float | None = None,
        filter_same_label: bool = False,
        filter_same_anchor: bool = True,
        filter_queue_negatives: bool = True,
        guide_model: nn.Module | str | None = None,
        guide_margin: float = 0.0,
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
            perc_pos: NV-Retriever's TopK-PercPos: drop queue candidates scoring above
                ``perc_pos`` x the anchor-positive score (e.g. 0.95); None = off. For positive
                scores this is ``relative_margin = 1 - perc_pos``; the two differ for negative ones.
            filter_same_label: drop queue rows with the batch row's label (needs integer labels).
            filter_same_anchor: without such labels, drop queue rows that were the positive of a pair
                with the same anchor text (a query with several correct answers: those answers are
                false negatives by construction, whatever their text).
            filter_queue_negatives: apply the false-negative filters to the queue negatives too.
            guide_model: GISTEmbedLoss's guide: a frozen SentenceTransformer, or its name/path
                (``"default"`` = the bundled all-MiniLM-L6-v2). A batch, queue or mined negative
                whose guide similarity to the anchor exceeds the guide similarity of the anchor's
                positive minus ``guide_margin`` is not a negative. The queue keeps the guide's
                embedding of each row. None = off.
            guide_margin: GISTEmbedLoss's absolute margin (finite).
            hardness_schedule: curriculum from easy to hard; default always the hardest.
            mining_backend / mining_index / use_gpu_index: see :func:`contrastive_bert.mining.search_topk`.
                ``auto`` uses torch when the queue scores are computed anyway, else FAISS.
            gather_across_devices: all-gather what is enqueued under DDP (same queue on every rank).
            check_finite: raise ``ValueError`` when the loss is NaN/inf.
        """
        super().__init__()
        options = {k: v for k, v in locals().items() if k not in ("self", "model", "__class__")}
        self.check_options(options)
        if not use_queue_negatives and num_hard_negatives == 0:
            logger.warning("use_queue_negatives=False and num_hard_negatives=0: the queue is never used")
        self.model = model
        self.temperature = float(temperature)
        self.hard_negative_share = hard_negative_share
        self.symmetric = symmetric
        self.filter_same_label = filter_same_label
        self.filter_same_anchor = filter_same_anchor
        self.guide_margin = float(guide_margin)
        self.train_dataset_size = train_dataset_size
        self.gather_across_devices = gather_across_devices
        self.check_finite = check_finite
        self.requested_queue_size = queue_size
        if isinstance(hardness_schedule, dict):  # from a YAML/JSON recipe
            hardness_schedule = HardnessSchedule(**hardness_schedule)
        self.miner = HardNegativeMiner(
            num_hard_negatives=num_hard_negatives, use_queue_negatives=use_queue_negatives,
            filter_queue_negatives=filter_queue_negatives, absolute_margin=absolute_margin,
            relative_margin=relative_margin, max_score=max_score, perc_pos=perc_pos,
            schedule=hardness_schedule or HardnessSchedule(), backend=mining_backend, index_type=mining_index,
            use_gpu=use_gpu_index,
        )
        bare = unwrap_model(model)
        get_dim = getattr(bare, "get_embedding_dimension", None) or bare.get_sentence_embedding_dimension
        self.dim = int(get_dim())
        self.guide = None if guide_model is None else GuideFilter(guide_model, model, guide_margin)
        self.queue: EmbeddingQueue | None = None
        self.guide_queue: EmbeddingQueue | None = None
        if queue_size is not None:
            self._make_queues(queue_size)
        self.register_buffer("num_steps", torch.zeros((), dtype=torch.int64))
        self.momentum = momentum
        self.momentum_encoder = None if momentum is None else MomentumEncoder(model, momentum)

    @classmethod
    def check_options(cls, options: Mapping[str, Any]) -> None:
        """Raise ``ValueError("loss_options.<name>: ...")`` for an unknown name or a bad value (no model needed)."""
        check_unknown(options, _option_defaults(cls), cls.__name__)
        check_number(options, "temperature", "a positive number", lambda v: v > 0)
        check_number(options, "queue_size", "a positive integer", lambda v: v > 0, integer=True, allow_none=True)
        check_number(options, "num_hard_negatives", "an integer >= 0", lambda v: v >= 0, integer=True)
        check_number(options, "train_dataset_size", "a positive integer", lambda v: v > 0, integer=True, allow_none=True)
        queue_size, k = options.get("queue_size"), options.get("num_hard_negatives", 0)
        if queue_size is not None and k > queue_size:
            raise option_error("num_hard_negatives", f"at most queue_size ({queue_size})", k)
        check_number(options, "hard_negative_share", "a number in (0, 1)", lambda v: 0 < v < 1, allow_none=True)
        check_number(options, "momentum", "a number in [0, 1)", lambda v: 0 <= v < 1, allow_none=True)
        check_number(options, "relative_margin", "a number in [0, 1]", lambda v: 0 <= v <= 1, allow_none=True)
        check_number(options, "perc_pos", "a number in (0, 1]", lambda v: 0 < v <= 1, allow_none=True)
        for name in ("absolute_margin", "max_score"):
            check_number(options, name, "a finite number", allow_none=True)
        check_number(options, "guide_margin", "a finite number")
        check_flags(options, ("use_queue_negatives", "symmetric", "filter_same_label", "filter_same_anchor",
                              "filter_queue_negatives", "gather_across_devices", "check_finite"))
        check_choice(options, "mining_backend", ("auto", "faiss", "torch"))
        check_choice(options, "mining_index", ("flat", "ivf", "hnsw"))
        if options.get("use_gpu_index") is not None and not isinstance(options["use_gpu_index"], bool):
            raise option_error("use_gpu_index", "true, false or null", options["use_gpu_index"])
        guide = options.get("guide_model")
        if guide is not None and not isinstance(guide, (str, nn.Module)):
            raise option_error("guide_model", "a model name or path, a SentenceTransformer, or null", guide)
        schedule = options.get("hardness_schedule")
        if isinstance(schedule, Mapping):
            try:
                HardnessSchedule(**schedule)
            except (TypeError, ValueError) as error:
                raise ValueError(f"loss_options.hardness_schedule: {error}") from None
        elif schedule is not None and not isinstance(schedule, HardnessSchedule):
            raise option_error("hardness_schedule", "a mapping of start, end, warmup_steps, pool_factor", schedule)

    # ------------------------------------------------------------------ properties
    @property
    def scale(self) -> float:
        return 1.0 / self.temperature

    @property
    def num_hard_negatives(self) -> int:
        return self.miner.num_hard_negatives

    @property
    def use_queue_negatives(self) -> bool:
        return self.miner.use_queue_negatives

    @property
    def hardness_schedule(self) -> HardnessSchedule:
        return self.miner.schedule

    @property
    def ema_model(self) -> nn.Module | None:
        """The momentum encoder's model (None without ``momentum``)."""
        return None if self.momentum_encoder is None else self.momentum_encoder.model

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
        miner = self.miner
        return {
            "queue_size": self.queue_size if self.queue is not None else self.requested_queue_size,
            "temperature": self.temperature,
            "num_hard_negatives": miner.num_hard_negatives,
            "hard_negative_share": self.hard_negative_share,
            "use_queue_negatives": miner.use_queue_negatives,
            "symmetric": self.symmetric,
            "momentum": self.momentum,
            "absolute_margin": miner.absolute_margin,
            "relative_margin": miner.relative_margin,
            "max_score": miner.max_score,
            "perc_pos": miner.perc_pos,
            "filter_same_label": self.filter_same_label,
            "filter_same_anchor": self.filter_same_anchor,
            "filter_queue_negatives": miner.filter_queue_negatives,
            "guide_model": None if self.guide is None else type(self.guide.guide).__name__,
            "guide_margin": self.guide_margin,
            "hardness_schedule": vars(miner.schedule),
            "mining_backend": miner.backend,
            "mining_index": miner.index_type,
        }

    # ------------------------------------------------------------------ queue management
    def _make_queues(self, size: int) -> None:
        device = next(unwrap_model(self.model).parameters()).device
        self.queue = EmbeddingQueue(size, self.dim, gather_distributed=self.gather_across_devices).to(device)
        if self.guide is not None:
            self.guide_queue = EmbeddingQueue(size, self.guide.dim, gather_distributed=self.gather_across_devices).to(device)

    def ensure_queue(self, global_batch_size: int) -> EmbeddingQueue:
        """Create the queue on first use (seed rule when ``queue_size`` is None) and check it fits."""
        if self.queue is None:
            if self.train_dataset_size is not None:
                size = default_queue_size(self.train_dataset_size, global_batch_size)
            else:
                size = default_queue_size(2**40, global_batch_size)  # unknown data size: the 65536 cap
                logger.info("queue_size=None and train_dataset_size unknown: using %d rows", size)
            self._make_queues(size)
        if global_batch_size > self.queue.size:
            raise ValueError(
                f"queue_size: {self.queue.size} is smaller than the (global) batch size {global_batch_size}; "
                "the queue must hold at least one batch"
            )
        return self.queue

    def queue_state_dict(self) -> dict[str, Any]:
        """What a checkpoint must keep besides the model: queue buffers, step counter, EMA encoder."""

        def cpu(module: nn.Module | None) -> dict[str, Tensor] | None:
            return None if module is None else {k: v.detach().cpu() for k, v in module.state_dict().items()}

        return {"queue": cpu(self.queue), "num_steps": int(self.num_steps.item()), "ema_model": cpu(self.ema_model),
                "guide_queue": cpu(self.guide_queue), "dim": self.dim}

    def load_queue_state_dict(self, state: dict[str, Any]) -> None:
        """Restore :meth:`queue_state_dict`. ValueError when the embedding size does not match."""
        if not isinstance(state, dict) or "queue" not in state:
            raise ValueError("state: expected the dict written by QueueInfoNCELoss.queue_state_dict()")
        if int(state.get("dim", self.dim)) != self.dim:
            raise ValueError(f"state: the saved queue has embedding size {state['dim']} but the model's is {self.dim}")
        if state["queue"] is not None:
            saved = state["queue"]["queue_embeddings"]
            if saved.ndim != 2 or saved.shape[1] != self.dim:
                raise ValueError(f"state: the saved queue has embedding size {saved.shape[-1]} but the model's is {self.dim}")
            if self.queue is None:
                self._make_queues(int(saved.shape[0]))
            self.queue.load_state_dict(state["queue"])
            if self.guide_queue is not None:
                if state.get("guide_queue") is None:
                    raise ValueError("state: this loss has a guide model but the saved queue has no guide embeddings")
                self.guide_queue.load_state_dict(state["guide_queue"])
        self.num_steps.fill_(int(state.get("num_steps", 0)))
        if state.get("ema_model") is not None:
            if self.ema_model is None:
                raise ValueError("state: it holds a momentum encoder but this loss has momentum=None")
            self.ema_model.load_state_dict(state["ema_model"])

    @torch.no_grad()
    def update_momentum_encoder(self) -> None:
        """EMA step of the momentum encoder (no-op without ``momentum``)."""
        if self.momentum_encoder is not None:
            self.momentum_encoder.update(self.model)

    @torch.no_grad()
    def key_embeddings(self, positive_features: dict[str, Tensor], positive_embeddings: Tensor) -> Tensor:
        """What is enqueued for this batch: ``(B, D)`` detached positives (momentum encoder if any)."""
        if self.momentum_encoder is None:
            return positive_embeddings.detach()
        return self.momentum_encoder.encode(positive_features).to(positive_embeddings.device)

    @torch.no_grad()
    def after_training_step(
        self,
        keys: Tensor,
        positive_ids: Tensor | None,
        labels: Tensor | None,
        anchor_ids: Tensor | None = None,
        guide_keys: Tensor | None = None,
    ) -> None:
        """Enqueue the keys ``(B, D)`` (and their guide embeddings) and advance the step counter."""
        groups = self.group_labels(labels, anchor_ids)
        self.queue.enqueue(keys, ids=positive_ids, labels=groups)
        if self.guide_queue is not None:
            self.guide_queue.enqueue(guide_keys, ids=positive_ids, labels=groups)
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
        guide_embeddings = None if self.guide is None else self.guide.embed(sentence_features)
        embeddings = embed_columns(self.model, sentence_features)
        training = unwrap_model(self.model).training and torch.is_grad_enabled()
        if training:
            self.update_momentum_encoder()
        parts = self.compute_loss_from_embeddings(
            embeddings, labels, anchor_ids=anchor_ids, positive_ids=positive_ids, guide_embeddings=guide_embeddings
        )
        if training:
            keys = self.key_embeddings(sentence_features[1], embeddings[1])
            guide_keys = None if guide_embeddings is None else guide_embeddings[1]
            self.after_training_step(keys, positive_ids, labels, anchor_ids, guide_keys)
        return parts

    def prepare_batch(
        self,
        embeddings: Sequence[Tensor],
        labels: Tensor | None,
        anchor_ids: Tensor | None = None,
        positive_ids: Tensor | None = None,
        guide_embeddings: Sequence[Tensor] | None = None,
        extra_docs: Tensor | None = None,
        guide_extra_docs: Tensor | None = None,
    ) -> _Batch:
        """Normalise, concatenate the candidate columns (then ``extra_docs`` ``(m, D)``, in-batch
        negatives of every anchor) and snapshot the queue for this step."""
        if len(embeddings) < 2:
            raise ValueError(f"embeddings: expected at least 2 columns (anchor, positive), got {len(embeddings)}")
        anchors = embeddings[0]
        batch_size = anchors.shape[0]
        if any(e.shape[0] != batch_size for e in embeddings):
            raise ValueError(f"embeddings: all columns must have {batch_size} rows, got {[e.shape[0] for e in embeddings]}")
        if anchors.shape[1] != self.dim:
            raise ValueError(f"embeddings: the model produces dim {anchors.shape[1]} but the queue expects {self.dim}")
        if self.guide is not None and guide_embeddings is None:
            raise ValueError("guide_embeddings: this loss has a guide model; pass the guide's embedding of each column")
        world = torch.distributed.get_world_size() if (
            self.gather_across_devices and torch.distributed.is_available() and torch.distributed.is_initialized()
        ) else 1
        queue = self.ensure_queue(batch_size * world)
        if queue.queue_embeddings.device != anchors.device:
            queue.to(anchors.device)
        q_emb, q_ids, q_groups = queue.filled()
        docs = list(embeddings[1:]) + ([] if extra_docs is None else [extra_docs])
        batch = _Batch(
            anchors=F.normalize(anchors, p=2, dim=1),
            docs=F.normalize(torch.cat(docs, dim=0), p=2, dim=1),
            queue=q_emb.detach().to(anchors.dtype),
            queue_ids=q_ids,
            queue_groups=q_groups,
            anchor_ids=anchor_ids,
            positive_ids=positive_ids,
            groups=self.group_labels(labels, anchor_ids),
            step=int(self.num_steps.item()),
        )
        if self.guide is not None:
            guide_docs = list(guide_embeddings[1:]) + ([] if guide_extra_docs is None else [guide_extra_docs])
            batch.guide_anchors = guide_embeddings[0]
            batch.guide_docs = torch.cat(guide_docs, dim=0)
            batch.guide_queue = self.guide_queue.filled()[0].to(anchors.device)
        if torch.is_grad_enabled() and batch.queue.numel() > 0:
            # the backward pass runs after this step's enqueue, which writes the buffer in place:
            # give autograd its own copy of the rows it saved
            batch.queue = batch.queue.clone()
        return batch

    def compute_loss_from_embeddings(
        self,
        embeddings: Sequence[Tensor],
        labels: Tensor | None = None,
        anchor_ids: Tensor | None = None,
        positive_ids: Tensor | None = None,
        guide_embeddings: Sequence[Tensor] | None = None,
        extra_docs: Tensor | None = None,
        guide_extra_docs: Tensor | None = None,
    ) -> dict[str, Tensor]:
        """embeddings: (anchor, positive[, negatives...]) each ``(B, D)``. Returns the named parts (means)."""
        batch = self.prepare_batch(embeddings, labels, anchor_ids, positive_ids, guide_embeddings, extra_docs, guide_extra_docs)
        parts = self.loss_rows(batch, 0, batch.anchors.shape[0])
        total = batch.anchors.shape[0]
        return {name: value / total for name, value in parts.items()}

    def loss_rows(self, batch: _Batch, begin: int, end: int) -> dict[str, Tensor]:
        """Sum over anchors ``begin:end`` of each loss part (divide by ``B`` for the mean):
        choose the negatives (miner, guide), then score them (:func:`queue_infonce_loss`)."""
        anchors = batch.anchors[begin:end]
        rows = torch.arange(begin, end, device=anchors.device)
        positives = batch.docs[begin:end]

        def rows_of(values: Tensor | None) -> Tensor | None:
            return None if values is None else values[begin:end]

        doc_mask = guide_keep = None
        if batch.guide_anchors is not None:
            guide_anchors, guide_positives = batch.guide_anchors[begin:end], batch.guide_docs[begin:end]
            doc_mask = self.guide.keep(guide_anchors, guide_positives, batch.guide_docs)
            guide_keep = self.guide.keep(guide_anchors, guide_positives, batch.guide_queue)
        with torch.no_grad():
            positive_scores = (anchors.detach() * positives.detach()).sum(dim=1)
        mined = self.miner.select(
            anchors, positive_scores, batch.queue, batch.step, key_ids=batch.queue_ids, key_groups=batch.queue_groups,
            anchor_ids=rows_of(batch.anchor_ids), positive_ids=rows_of(batch.positive_ids),
            anchor_groups=rows_of(batch.groups), keep=guide_keep,
        )
        hard_keys, hard_mask = mined.hard_keys(batch.queue)
        _, parts = queue_infonce_loss(
            anchors, batch.docs, batch.queue if mined.queue_mask is not None else None, hard_keys,
            temperature=self.temperature, positive_index=rows, doc_mask=doc_mask, queue_mask=mined.queue_mask,
            hard_mask=hard_mask, hard_negative_share=self.hard_negative_share,
            reverse_anchors=batch.anchors if self.symmetric else None, reduction="sum",
        )
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
    batch size (unless ``queue_size`` is given), everything else from ``options``."""
    if "cached" in options:
        raise ValueError("loss_options.cached: not an option of QueueInfoNCELoss; use the loss name 'cached_queue_infonce'")
    return QueueInfoNCELoss(model, train_dataset_size=train_dataset_size, **seed_rule_queue_size(options, train_dataset_size, batch_size))


def seed_rule_queue_size(options: Mapping[str, Any], train_dataset_size: int | None, batch_size: int | None) -> dict[str, Any]:
    """``options`` with ``queue_size`` set by the seed's rule when it is missing and the sizes are known."""
    options = dict(options)
    if options.get("queue_size") is None and train_dataset_size is not None and batch_size is not None:
        options["queue_size"] = default_queue_size(int(train_dataset_size), int(batch_size))
    return options
