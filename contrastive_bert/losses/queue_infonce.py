"""QueueInfoNCELoss: InfoNCE over in-batch negatives + a FIFO queue of past positives + hard
negatives mined from that queue, with false-negative control.

Measured against sentence-transformers' losses (docs/results.md, every figure there): the queue,
in each form tried, adds nothing beyond the seed noise over MNRL on the same data at batch 32
(SciFact's mined triplets, answer selection; on NFCorpus's one-epoch protocol the queue never
filled), and under gradient accumulation at micro-batch 8 its dual bank (ContAccum) trails plain
accumulated MNRL and CachedMNRL on SciFact (on NFCorpus: level with accumulation, below CachedMNRL).
So nothing defaults to it: for retrieval train MNRL on mined triplets, in small memory CachedMNRL
at the full batch. It stays for study, and for regimes not measured here (larger models, far
smaller batches).

One step, as :meth:`QueueInfoNCELoss.forward` reads top to bottom:

1. :meth:`~QueueInfoNCELoss.start_step`: the columns' text ids (for the id filters), the guide's
   embeddings (with ``guide_model``) and the momentum encoder's EMA update;
2. embed the columns (sentence-transformers' ``embed_columns``, as MNRL);
3. :meth:`~QueueInfoNCELoss.compute_loss_from_embeddings`: normalise and snapshot the queue
   (:meth:`~QueueInfoNCELoss.prepare_batch`), then per anchor (:meth:`~QueueInfoNCELoss.loss_rows`)
   the miner (:class:`~contrastive_bert.losses.hard_negative_miner.HardNegativeMiner`) chooses its
   queue negatives and hard negatives after the false-negative filters and the guide's veto, and
   :func:`~contrastive_bert.losses.infonce_math.queue_infonce_loss` scores them (the formula is in
   its module docstring);
4. :meth:`~QueueInfoNCELoss.end_step`: enqueue this batch's positives (embedded by the momentum
   encoder if any); on the last micro-batch of an optimizer step
   (:func:`~contrastive_bert.losses.optimizer_step.is_optimizer_sync_step`) count the step (the
   hardness schedule counts optimizer steps) and, with ``bank_scope="step"``, empty the bank. The
   momentum encoder moves once per optimizer step, on its first micro-batch (under gradient
   accumulation the weights do not change in between).

With ``dual_bank`` (ContAccum) the bank is a :class:`~contrastive_bert.memory_bank.DualMemoryBank`
of past rows, anchors and all their documents: its documents are the queue of this batch's
anchors, and its anchors are extra rows scored against this batch's documents and the bank's
(:meth:`~QueueInfoNCELoss.bank_rows`); the loss is the mean over the ``B + m`` rows, so with an
empty bank it is MNRL's.

The cached loss runs the same steps 1 and 4 around GradCache. The returned dict splits the loss
into parts that add up to it (the ST trainer sums and logs them): ``in_batch`` = the MNRL loss,
``queue`` = what the queue negatives add, ``hard`` = what the hard negatives add.

The options are grouped by concern in :class:`~contrastive_bert.losses.queue_config.QueueInfoNCEConfig`
(scoring, queue, mining, false-negative filters, guide), each group checked once when it is made;
the loss reads them from :attr:`QueueInfoNCELoss.config`.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from contrastive_bert.losses.guide_filter import GuideFilter
from contrastive_bert.losses.hard_negative_miner import HardNegativeMiner
from contrastive_bert.losses.infonce_math import queue_infonce_loss
from contrastive_bert.losses.momentum_encoder import MomentumEncoder
from contrastive_bert.losses.optimizer_step import is_optimizer_sync_step
from contrastive_bert.losses.option_checks import check_number
from contrastive_bert.losses.queue_config import QueueInfoNCEConfig
from contrastive_bert.memory_bank import DualMemoryBank
from contrastive_bert.models import unwrap_model
from contrastive_bert.queue import NO_ID, NO_LABEL, EmbeddingQueue, default_queue_size, hash_token_ids

logger = logging.getLogger(__name__)

__all__ = ["QueueInfoNCELoss", "StepInputs", "build_queue_infonce_loss", "feature_ids"]


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
    queue_keep ``(n,)``: the rows that may be negatives at all (None: every row; see
    ``distinct_queue_rows``); with a guide model: guide_anchors ``(B, G)``, guide_docs ``(N, G)``, guide_queue ``(n, G)``.
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
    queue_keep: Tensor | None = None
    guide_anchors: Tensor | None = None
    guide_docs: Tensor | None = None
    guide_queue: Tensor | None = None
    doc_ids: Tensor | None = None  # (N,) text ids of docs (None: unknown)
    bank_anchors: Tensor | None = None  # (m, D) banked anchors (dual bank), detached
    bank_groups: Tensor | None = None  # (m,)
    bank_columns: int = 1  # documents per banked row: row j's positive is queue row j * bank_columns

    @property
    def rows(self) -> int:
        """Loss rows: this batch's anchors and the banked ones (the mean's denominator)."""
        return self.anchors.shape[0] + (0 if self.bank_anchors is None else self.bank_anchors.shape[0])


@dataclass
class StepInputs:
    """What one loss call knows before it embeds (:meth:`QueueInfoNCELoss.start_step`): the
    tokenised columns, the text ids ``(B,)`` of the anchor and positive columns, the guide's
    embedding of each column (None without a guide), and whether it trains."""

    features: list[dict[str, Tensor]]
    anchor_ids: Tensor
    positive_ids: Tensor
    guide: list[Tensor] | None
    training: bool
    column_ids: list[Tensor] | None = None  # (B,) text ids of every column

    @property
    def doc_ids(self) -> Tensor | None:
        """``(N,)`` ids of the document columns in the loss's order (column-major)."""
        return None if self.column_ids is None else torch.cat(self.column_ids[1:])


class QueueInfoNCELoss(nn.Module):
    """InfoNCE with a MoCo-style embedding queue and hard negatives mined from it.

    Drop-in for ``MultipleNegativesRankingLoss(model, scale=1/temperature)``: same data, same loss
    while the queue is empty. Each step the anchors are scored against their positive, the other
    rows' positives (and negatives), every queue row that passes the false-negative filters, and
    ``num_hard_negatives`` hard negatives mined from those rows; then this batch's positives are
    enqueued (embedded by the momentum encoder if any). The loss is returned as parts that add up
    to it: ``in_batch`` (the MNRL loss), ``queue`` and ``hard`` (what the queue and hard negatives add).

    Args:
        model: the SentenceTransformer being trained.
        config: a :class:`~contrastive_bert.losses.queue_config.QueueInfoNCEConfig`; or give its
            options by name instead (below; checked once, when the config is made).
        train_dataset_size: rows of the training set, for the seed's queue-size rule (set by
            :class:`~contrastive_bert.training.queue_checkpoint.QueueCheckpointCallback` when None).
        **options: scoring (:class:`~contrastive_bert.losses.queue_config.InfoNCEConfig`):
            ``temperature`` (0.05), ``hard_negative_share`` (None), ``symmetric`` (False),
            ``check_finite`` (True); queue (:class:`~contrastive_bert.losses.queue_config.QueueConfig`):
            ``queue_size`` (None: ``min(65536, 4 * train_dataset_size / global_batch)``),
            ``momentum`` (None), ``gather_across_devices`` (True); mining
            (:class:`~contrastive_bert.losses.hard_negative_miner.MiningConfig`):
            ``num_hard_negatives`` (0), ``use_queue_negatives`` (True), ``hardness_schedule``,
            ``mining_backend``, ``mining_index``, ``use_gpu_index``; false-negative filters
            (:class:`~contrastive_bert.losses.false_negative_filters.FalseNegativeFilters`):
            ``absolute_margin``, ``relative_margin`` (0.05), ``max_score``, ``perc_pos``,
            ``filter_same_label``, ``filter_same_anchor`` (True), ``filter_queue_negatives`` (True);
            guide (:class:`~contrastive_bert.losses.guide_filter.GuideConfig`): ``guide_model``
            (None; ``"default"`` = the bundled all-MiniLM-L6-v2), ``guide_margin`` (0.0).
            Each option is documented in its config class.

    Inputs:
        +-------------------------------------------------+--------------------------------------------+
        | Texts                                           | Labels                                     |
        +=================================================+============================================+
        | (anchor, positive) pairs                        | none                                       |
        +-------------------------------------------------+--------------------------------------------+
        | (anchor, positive, negative_1, ..., negative_n) | none                                       |
        +-------------------------------------------------+--------------------------------------------+
        | (anchor, positive) pairs                        | integer class (with ``filter_same_label``) |
        +-------------------------------------------------+--------------------------------------------+

        Registered as ``queue_infonce`` (data format ``pairs``: columns ``anchor``, ``positive``).

    Recommendations:
        - Use ``BatchSamplers.NO_DUPLICATES`` (the registry's sampler for this loss), as for MNRL.
        - Small batches (16-64) are where the queue helps: it adds thousands of negatives a batch
          cannot hold. Leave ``queue_size`` to the seed rule unless the data set is tiny; a queue
          much larger than the data set turns every earlier positive into a negative.
        - Data with several positives per anchor (a query with many answers): keep
          ``filter_same_anchor``; with integer labels, ``filter_same_label``; with a good frozen
          model at hand, ``guide_model`` vetoes the remaining false negatives.

    Relations:
        - Extends :class:`sentence_transformers.losses.MultipleNegativesRankingLoss`: with an empty
          queue (or ``use_queue_negatives=False, num_hard_negatives=0``) it is that loss with
          ``scale = 1 / temperature``.
        - :class:`~contrastive_bert.losses.cached_queue_infonce.CachedQueueInfoNCELoss` is this loss
          with GradCache (equal loss and gradients, any batch size in bounded memory).
        - :class:`~contrastive_bert.losses.queue_cosent.QueueCoSENTLoss` uses it on the high-score
          rows of scored pairs, next to CoSENT/AnglE.
        - With ``guide_model`` its negatives are vetoed by GISTEmbedLoss's rule
          (:class:`sentence_transformers.losses.GISTEmbedLoss`), over the queue as well as the batch.
        - MoCo (``momentum``); ``use_queue_negatives=False`` keeps only the hard negatives mined
          from the queue of past batches' documents (not ANCE, which refreshes negatives from the
          whole corpus with the model being trained).

    Example:
        ::

            from datasets import Dataset
            from sentence_transformers import SentenceTransformerTrainer

            from contrastive_bert.losses import QueueInfoNCELoss
            from contrastive_bert.models import load_model

            model = load_model("default")  # the bundled all-MiniLM-L6-v2, or any SentenceTransformer
            train_dataset = Dataset.from_dict({
                "anchor": ["It's nice weather outside today.", "He drove to work."],
                "positive": ["It's so sunny.", "He took the car to the office."],
            })
            loss = QueueInfoNCELoss(model, queue_size=1024, num_hard_negatives=4)

            trainer = SentenceTransformerTrainer(
                model=model,
                train_dataset=train_dataset,
                loss=loss,
            )
            trainer.train()
    """

    def __init__(
        self,
        model: nn.Module,
        *,
        config: QueueInfoNCEConfig | None = None,
        train_dataset_size: int | None = None,
        **options: Any,
    ) -> None:
        super().__init__()
        if config is not None and options:
            raise ValueError(f"config: give a QueueInfoNCEConfig or options by name, not both (got {sorted(options)})")
        check_number({"train_dataset_size": train_dataset_size}, "train_dataset_size", "a positive integer",
                     lambda v: v > 0, integer=True, allow_none=True)
        self.config = config if config is not None else QueueInfoNCEConfig.from_options(options, type(self).__name__)
        if not self.config.mining.use_queue_negatives and self.config.mining.num_hard_negatives == 0:
            logger.warning("use_queue_negatives=False and num_hard_negatives=0: the queue is never used")
        self.model = model
        self.train_dataset_size = train_dataset_size
        self.miner = HardNegativeMiner(self.config.mining, self.config.filters)
        bare = unwrap_model(model)
        get_dim = getattr(bare, "get_embedding_dimension", None) or bare.get_sentence_embedding_dimension
        self.dim = int(get_dim())
        guide = self.config.guide
        self.guide = None if guide.guide_model is None else GuideFilter(guide.guide_model, model, guide.guide_margin)
        self.queue: EmbeddingQueue | None = None
        self.guide_queue: EmbeddingQueue | None = None
        self.bank: DualMemoryBank | None = None
        if self.config.queue.queue_size is not None:
            self._make_queues(self.config.queue.queue_size)
        self.register_buffer("num_steps", torch.zeros((), dtype=torch.int64))
        self._step_open = False  # a micro-batch of the current optimizer step has run
        #: a list to append ``[||dL/d anchors||, ||dL/d documents||]`` to at every training call
        #: (the anchor side and the document side of ContAccum's diagnosis); None: not recorded
        self.gradient_norms: list | None = None
        momentum = self.config.queue.momentum
        self.momentum_encoder = None if momentum is None else MomentumEncoder(model, momentum)

    @classmethod
    def option_names(cls) -> tuple[str, ...]:
        """The options this loss takes by name (``loss_options`` of a recipe)."""
        return QueueInfoNCEConfig.option_names()

    @classmethod
    def check_options(cls, options: Mapping[str, Any]) -> None:
        """Raise ``ValueError("loss_options.<name>: ...")`` for an unknown name or a bad value (no
        model needed): the checks that making the config runs."""
        QueueInfoNCEConfig.from_options(options, cls.__name__)

    # ------------------------------------------------------------------ properties
    # (every option is read from ``self.config``; these few are what MNRL users and the queue's
    # size rule ask for)
    @property
    def temperature(self) -> float:
        return self.config.infonce.temperature

    @property
    def scale(self) -> float:
        """``1 / temperature``: MultipleNegativesRankingLoss's name for it."""
        return 1.0 / self.temperature

    @property
    def queue_size(self) -> int | None:
        """Rows of the queue (or the dual bank) once it exists (None before a lazily sized one is made)."""
        store = self.bank if self.config.queue.dual_bank else self.queue
        return None if store is None else store.size

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
        """The options (derived from :attr:`config`), with the queue's actual size once it exists."""
        return {**self.config.as_options(), "queue_size": self.queue_size if self.queue_size is not None else self.config.queue.queue_size}

    # ------------------------------------------------------------------ queue management
    def _make_queues(self, size: int) -> None:
        device = next(unwrap_model(self.model).parameters()).device
        gather = self.config.queue.gather_across_devices
        if self.config.queue.dual_bank:
            growable = self.config.queue.bank_scope == "step"
            self.bank = DualMemoryBank(size, self.dim, growable=growable, gather_distributed=gather).to(device)
            return
        self.queue = EmbeddingQueue(size, self.dim, gather_distributed=gather).to(device)
        if self.guide is not None:
            self.guide_queue = EmbeddingQueue(size, self.guide.dim, gather_distributed=gather).to(device)

    def ensure_queue(self, global_batch_size: int) -> EmbeddingQueue | DualMemoryBank:
        """Create the queue (or the dual bank) on first use (seed rule when ``queue_size`` is None;
        a step-scoped dual bank starts at one batch and grows) and check it fits."""
        if self.config.queue.dual_bank:
            if self.bank is None:
                step = self.config.queue.bank_scope == "step"
                self._make_queues(global_batch_size if step else default_queue_size(self.train_dataset_size or 2**40, global_batch_size))
            if global_batch_size > self.bank.size and not self.bank.growable:
                raise ValueError(f"queue_size: {self.bank.size} is smaller than the (global) batch size {global_batch_size}; "
                                 "the bank must hold at least one batch")
            return self.bank
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

        ema_model = None if self.momentum_encoder is None else self.momentum_encoder.model
        return {"queue": cpu(self.queue), "num_steps": int(self.num_steps.item()), "ema_model": cpu(ema_model),
                "guide_queue": cpu(self.guide_queue), "bank": cpu(self.bank), "dim": self.dim}

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
        if state.get("bank") is not None:
            if not self.config.queue.dual_bank:
                raise ValueError("state: it holds a dual bank but this loss has dual_bank=False")
            if self.bank is None:
                self._make_queues(int(state["bank"]["bank_anchors"].shape[0]))
            self.bank.load_state_dict(state["bank"])
        self.num_steps.fill_(int(state.get("num_steps", 0)))
        self._step_open = False  # checkpoints are written between optimizer steps
        if state.get("ema_model") is not None:
            if self.momentum_encoder is None:
                raise ValueError("state: it holds a momentum encoder but this loss has momentum=None")
            self.momentum_encoder.model.load_state_dict(state["ema_model"])

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

    def begin_micro_batch(self) -> None:
        """Before a training call: on the first micro-batch of an optimizer step, the momentum
        encoder's EMA update (once per optimizer step: the weights do not move in between)."""
        if not self._step_open:
            self.update_momentum_encoder()
            self._step_open = True

    @torch.no_grad()
    def end_micro_batch(self) -> None:
        """After a training call: on the last micro-batch of an optimizer step, count the step and,
        with ``bank_scope="step"``, empty the bank (or queue)."""
        if not is_optimizer_sync_step():
            return
        self.num_steps += 1
        self._step_open = False
        if self.config.queue.bank_scope == "step":
            for store in (self.bank, self.queue, self.guide_queue):
                if store is not None:
                    store.reset()

    @torch.no_grad()
    def after_training_step(
        self,
        keys: Tensor,
        positive_ids: Tensor | None,
        labels: Tensor | None,
        anchor_ids: Tensor | None = None,
        guide_keys: Tensor | None = None,
    ) -> None:
        """Enqueue the keys ``(B, D)`` (and their guide embeddings), then :meth:`end_micro_batch`."""
        groups = self.config.filters.groups(labels, anchor_ids)
        self.queue.enqueue(keys, ids=positive_ids, labels=groups)
        if self.guide_queue is not None:
            self.guide_queue.enqueue(guide_keys, ids=positive_ids, labels=groups)
        self.end_micro_batch()

    @torch.no_grad()
    def bank_training_rows(self, embeddings: Sequence[Tensor], column_ids: Sequence[Tensor] | None,
                           labels: Tensor | None) -> None:
        """Dual bank: append this batch's rows (anchors ``(B, D)``, documents ``(B, C, D)``), then
        :meth:`end_micro_batch`."""
        anchor_ids = None if column_ids is None else column_ids[0]
        self.ensure_queue(embeddings[0].shape[0])
        self.bank.append(embeddings[0], torch.stack([e.detach() for e in embeddings[1:]], dim=1), anchor_ids=anchor_ids,
                         document_ids=None if column_ids is None else torch.stack(list(column_ids[1:]), dim=1),
                         groups=self.config.filters.groups(labels, anchor_ids))
        self.end_micro_batch()

    # ------------------------------------------------------------------ loss
    def forward(self, sentence_features: Iterable[dict[str, Tensor]], labels: Tensor | None = None) -> dict[str, Tensor]:
        """sentence_features: (anchor, positive[, negative_1, ...]) tokenised columns of ``B`` rows.
        Returns ``{"in_batch", "queue", "hard"}`` scalar parts (their sum is the loss)."""
        from sentence_transformers.base.losses.merged_forward import embed_columns

        inputs = self.start_step(sentence_features)  # text ids, guide embeddings, momentum update
        embeddings = embed_columns(self.model, inputs.features)
        parts = self.compute_loss_from_embeddings(
            embeddings, labels, anchor_ids=inputs.anchor_ids, positive_ids=inputs.positive_ids, guide_embeddings=inputs.guide,
            doc_ids=inputs.doc_ids,
        )
        self.end_step(inputs, embeddings, labels)  # enqueue this batch's positives (the dual bank: its rows)
        return parts

    def start_step(self, sentence_features: Iterable[dict[str, Tensor]]) -> StepInputs:
        """What a loss call needs before it embeds (shared with the cached loss): the columns' text
        ids and guide embeddings; when training, the momentum encoder's EMA update."""
        features = list(sentence_features)
        if len(features) < 2:
            raise ValueError(f"sentence_features: expected at least 2 columns (anchor, positive), got {len(features)}")
        column_ids = [feature_ids(f) for f in features]
        inputs = StepInputs(
            features=features,
            anchor_ids=column_ids[0],
            positive_ids=column_ids[1],
            guide=None if self.guide is None else self.guide.embed(features),
            training=unwrap_model(self.model).training and torch.is_grad_enabled(),
            column_ids=column_ids,
        )
        if inputs.training:
            self.begin_micro_batch()
        return inputs

    def compute_loss_from_embeddings(
        self,
        embeddings: Sequence[Tensor],
        labels: Tensor | None = None,
        anchor_ids: Tensor | None = None,
        positive_ids: Tensor | None = None,
        guide_embeddings: Sequence[Tensor] | None = None,
        extra_docs: Tensor | None = None,
        guide_extra_docs: Tensor | None = None,
        doc_ids: Tensor | None = None,
    ) -> dict[str, Tensor]:
        """embeddings: (anchor, positive[, negatives...]) each ``(B, D)``; doc_ids: ``(N,)`` text
        ids of the document columns (the dual bank's filters). Returns the named parts (means over
        the loss rows; with a dual bank also ``bank``: the banked anchors' rows)."""
        batch = self.prepare_batch(embeddings, labels, anchor_ids, positive_ids, guide_embeddings, extra_docs, guide_extra_docs,
                                   doc_ids=doc_ids)
        parts = self.loss_rows(batch, 0, batch.anchors.shape[0])
        if batch.bank_anchors is not None:
            parts["bank"] = self.bank_rows(batch)
        return {name: value / batch.rows for name, value in parts.items()}

    def prepare_batch(
        self,
        embeddings: Sequence[Tensor],
        labels: Tensor | None,
        anchor_ids: Tensor | None = None,
        positive_ids: Tensor | None = None,
        guide_embeddings: Sequence[Tensor] | None = None,
        extra_docs: Tensor | None = None,
        guide_extra_docs: Tensor | None = None,
        doc_ids: Tensor | None = None,
    ) -> _Batch:
        """Normalise, concatenate the candidate columns (then ``extra_docs`` ``(m, D)``, in-batch
        negatives of every anchor) and snapshot the queue (or the dual bank) for this step."""
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
            self.config.queue.gather_across_devices and torch.distributed.is_available() and torch.distributed.is_initialized()
        ) else 1
        queue = self.ensure_queue(batch_size * world)
        if next(iter(queue.buffers())).device != anchors.device:
            queue.to(anchors.device)
        bank = None
        if isinstance(queue, DualMemoryBank):
            bank = queue.contents()
            q_emb, q_ids, q_groups = bank.flat_documents()
        else:
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
            groups=self.config.filters.groups(labels, anchor_ids),
            step=int(self.num_steps.item()),
            queue_keep=queue.newest_copies() if self.config.mining.distinct_queue_rows else None,
            doc_ids=doc_ids,
        )
        if bank is not None:
            batch.bank_anchors = bank.anchors.to(anchors.dtype)
            batch.bank_groups = bank.groups
            batch.bank_columns = bank.documents.shape[1]
        if self.guide is not None:
            guide_docs = list(guide_embeddings[1:]) + ([] if guide_extra_docs is None else [guide_extra_docs])
            batch.guide_anchors = guide_embeddings[0]
            batch.guide_docs = torch.cat(guide_docs, dim=0)
            batch.guide_queue = self.guide_queue.filled()[0].to(anchors.device)
        if torch.is_grad_enabled() and batch.queue.numel() > 0:
            # the backward pass runs after this step's enqueue, which writes the buffer in place:
            # give autograd its own copy of the rows it saved
            batch.queue = batch.queue.clone()
        if self.gradient_norms is not None and batch.anchors.requires_grad and batch.docs.requires_grad:
            self._record_gradient_norms(batch.anchors, batch.docs)
        return batch

    def _record_gradient_norms(self, anchors: Tensor, docs: Tensor) -> None:
        """Append ``[||dL/d anchors||, ||dL/d docs||]`` to :attr:`gradient_norms`, filled in by the backward pass."""
        record = [0.0, 0.0]
        self.gradient_norms.append(record)

        def hook(side: int):
            def save(grad: Tensor) -> None:
                record[side] = float(grad.detach().float().norm())
            return save

        anchors.register_hook(hook(0))
        docs.register_hook(hook(1))

    def bank_rows(self, batch: _Batch) -> Tensor:
        """Dual bank: the summed loss of the ``m`` banked anchors, each scored against this batch's
        documents (with gradient) and the bank's (its positive among them): ContAccum's extra rows,
        through which the batch's documents get gradient from banked queries. Left out as
        negatives: copies of the row's positive (same text id), positives of the same group (the
        same query text, or label), and, with ``filter_queue_negatives``, what the score margins drop."""
        anchors = batch.bank_anchors
        m, n = anchors.shape[0], batch.docs.shape[0]
        if m == 0:
            return batch.anchors.new_zeros(())
        columns = torch.cat([batch.docs, batch.queue])  # (N + m * C, D)
        rows = torch.arange(m, device=anchors.device)
        positive_index = n + rows * batch.bank_columns
        no_ids = torch.full((n,), NO_ID, dtype=torch.int64, device=anchors.device)
        column_ids = torch.cat([no_ids if batch.doc_ids is None else batch.doc_ids.to(anchors.device), batch.queue_ids])
        column_groups = torch.full((n,), NO_LABEL, dtype=torch.int64, device=anchors.device)
        if batch.groups is not None:
            column_groups[: batch.anchors.shape[0]] = batch.groups
        column_groups = torch.cat([column_groups, batch.queue_groups])
        positive_ids, groups = column_ids[positive_index], batch.bank_groups
        keep = ~((column_ids.unsqueeze(0) == positive_ids.unsqueeze(1)) & (positive_ids != NO_ID).unsqueeze(1))
        keep &= ~((column_groups.unsqueeze(0) == groups.unsqueeze(1)) & (groups != NO_LABEL).unsqueeze(1))
        if self.config.filters.filter_queue_negatives:
            with torch.no_grad():
                scores = anchors @ columns.detach().T
                keep &= self.config.filters.margins.keep(scores, scores[rows, positive_index])
        _, parts = queue_infonce_loss(anchors, columns, temperature=self.temperature, positive_index=positive_index,
                                      doc_mask=keep, reduction="sum")
        return parts["in_batch"]

    def loss_rows(self, batch: _Batch, begin: int, end: int) -> dict[str, Tensor]:
        """Sum over anchors ``begin:end`` of each loss part (divide by ``B`` for the mean):
        choose the negatives (miner, guide), then score them (:func:`queue_infonce_loss`)."""
        anchors = batch.anchors[begin:end]
        rows = torch.arange(begin, end, device=anchors.device)
        positives = batch.docs[begin:end]

        def rows_of(values: Tensor | None) -> Tensor | None:
            return None if values is None else values[begin:end]

        doc_mask = keep = None
        if batch.guide_anchors is not None:
            guide_anchors, guide_positives = batch.guide_anchors[begin:end], batch.guide_docs[begin:end]
            doc_mask = self.guide.keep(guide_anchors, guide_positives, batch.guide_docs)
            keep = self.guide.keep(guide_anchors, guide_positives, batch.guide_queue)
        if batch.queue_keep is not None:
            distinct = batch.queue_keep.unsqueeze(0).expand(anchors.shape[0], -1)
            keep = distinct if keep is None else keep & distinct
        with torch.no_grad():
            positive_scores = (anchors.detach() * positives.detach()).sum(dim=1)
        mined = self.miner.select(
            anchors, positive_scores, batch.queue, batch.step, key_ids=batch.queue_ids, key_groups=batch.queue_groups,
            anchor_ids=rows_of(batch.anchor_ids), positive_ids=rows_of(batch.positive_ids),
            anchor_groups=rows_of(batch.groups), keep=keep,
        )
        hard_keys, hard_mask = mined.hard_keys(batch.queue)
        scoring = self.config.infonce
        _, parts = queue_infonce_loss(
            anchors, batch.docs, batch.queue if mined.queue_mask is not None else None, hard_keys,
            temperature=scoring.temperature, positive_index=rows, doc_mask=doc_mask, queue_mask=mined.queue_mask,
            hard_mask=hard_mask, hard_negative_share=scoring.hard_negative_share,
            reverse_anchors=batch.anchors if scoring.symmetric else None, reduction="sum",
        )
        if scoring.check_finite:
            bad = [name for name, value in parts.items() if not torch.isfinite(value)]
            if bad:
                raise ValueError(
                    f"loss: the {', '.join(bad)} part(s) are NaN/inf (temperature={self.temperature}); "
                    "check the inputs, the learning rate and mixed-precision settings"
                )
        return parts

    def end_step(self, inputs: StepInputs, embeddings: Sequence[Tensor], labels: Tensor | None) -> None:
        """After the loss (shared with the cached loss): when training, enqueue this batch's
        positives ``(B, D)`` (re-embedded by the momentum encoder if any; with a dual bank, bank
        its rows: anchors and every document column), then :meth:`end_micro_batch`."""
        if inputs.training and self.config.queue.dual_bank:
            self.bank_training_rows(embeddings, inputs.column_ids, labels)
        elif inputs.training:
            positives = embeddings[1]
            keys = self.key_embeddings(inputs.features[1], positives)
            guide_keys = None if inputs.guide is None else inputs.guide[1]
            self.after_training_step(keys, inputs.positive_ids, labels, inputs.anchor_ids, guide_keys)


def build_queue_infonce_loss(
    model: nn.Module, train_dataset_size: int | None, batch_size: int | None, **options: Any
) -> QueueInfoNCELoss:
    """The loss for the ``train`` command / recipes: seed-rule queue size from the data set and
    batch size (unless ``queue_size`` is given), everything else from ``options``."""
    if "cached" in options:  # the old second name of cached_queue_infonce
        raise ValueError("loss_options.cached: not an option of QueueInfoNCELoss; use the loss name 'cached_queue_infonce'")
    return QueueInfoNCELoss(model, train_dataset_size=train_dataset_size, **seed_rule_queue_size(options, train_dataset_size, batch_size))


def seed_rule_queue_size(options: Mapping[str, Any], train_dataset_size: int | None, batch_size: int | None) -> dict[str, Any]:
    """``options`` with ``queue_size`` set by the seed's rule when it is missing and the sizes are known."""
    options = dict(options)
    if options.get("queue_size") is None and train_dataset_size is not None and batch_size is not None:
        options["queue_size"] = default_queue_size(int(train_dataset_size), int(batch_size))
    return options
