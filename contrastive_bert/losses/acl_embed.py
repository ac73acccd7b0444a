"""ACL-Embed (label-anchored supervised contrastive loss) with ACL-Grad (gradient-conflict gating).

Loss = CE(logits, y) + lambda' * SupCon([h; l_1..l_K], [y; 0..K-1], tau)

- ``h`` (B, d): sentence embeddings; ``l_k`` (K, d): rows of the model's
  :class:`~contrastive_bert.heads.label_embedding.LabelEmbeddingClassifier` (the CE weight).
  The head is a module of the SentenceTransformer, so it is saved with the model and in every
  trainer checkpoint; the loss owns no parameters.
- SupCon (Khosla et al. 2020, "L_out") on L2-normalised rows, averaged over the anchors that
  have at least one positive: sample-sample, sample-label and label-label terms.
- ``mode="supcon"``: plain SupCon over the samples only (CE + SCL baseline); ``mode="ce"``: CE only.
- ACL-Grad (``gradient_gating=True``): lambda' = lambda if the angle between grad(CE) and
  grad(SupCon) is <= ``angle_threshold`` degrees, else 0; by default the angle is taken over the
  head and the encoder's last layer (see "Cheaper ACL-Grad" below), exactly over every shared
  trainable parameter with ``angle_parameters="all"`` (as described next).

How ACL-Grad fits the sentence-transformers trainer (which calls ``forward`` and then runs
``backward`` on the returned loss itself): ``forward`` computes the two per-term gradients
exactly with ``torch.autograd.grad`` (two passes over the graph instead of the trainer's one:
one extra backward per step) and returns the loss values plus a surrogate
``sum_p <p, g_p>`` (value 0) whose backward writes exactly the gated gradient g into ``p.grad``,
so the trainer's loss scaling (gradient accumulation, fp16 GradScaler), clipping and DDP
all-reduce apply unchanged; the trainer's own backward only touches the parameters.

- Gradient accumulation: the decision is taken once per optimizer step on the gradients summed
  over the micro-batches of the step (accelerate's ``sync_gradients`` marks the last one); the
  earlier micro-batches contribute their CE gradient, the last adds lambda' x the summed
  contrastive gradient. Outside an accelerate/Trainer loop every forward is its own step.
- Mixed precision: per-term gradients are taken of the loss times a power-of-two scale (dynamic,
  as a GradScaler) and divided back, exact in fp32/bf16 and safe from fp16 underflow; a
  non-finite gradient halves the scale and is passed on, so the trainer's GradScaler skips the step.
- DDP: the dot product and squared norms are all-reduced (summed over ranks) before the angle
  is compared, so every rank takes the same decision.
- Needs non-reentrant gradient checkpointing if checkpointing is on (``use_reentrant=False``).

Cheaper ACL-Grad (``angle_parameters="head_last_layer"`` and/or ``angle_every=N``): the two
per-term gradients are taken only over the head and the encoder's last layer (a backward through
one layer), on the first micro-batch of every N-th optimizer step; the decision holds until the
next one and the loss returns ``CE + lambda' x SupCon`` for the trainer's single backward.
``angle_audit_every`` also records the exact angle on some decisions, to measure how often the two
decisions agree.

Encoded labels (``label_embedding="encoded"``): the K label embeddings are the encoder's own
embeddings of ``label_template.format(name)``; each step re-encodes the names of the batch's classes
with gradients (the others come from the head's stored rows, re-encoded every
``label_refresh_every`` steps and at the end of training), so CE and SupCon train the encoder
through the label names and a new label is added by its name alone.

The per-step angles are kept in ``angle_history``; log them with
:class:`contrastive_bert.losses.acl_grad.GradientAngleCallback` (``trainer_callbacks`` does).
"""

from __future__ import annotations

import logging
import math
import time
import warnings
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from typing import Any, Literal

import torch
import torch.nn.functional as F
from sentence_transformers.base.sampler import DefaultBatchSampler
from torch import Tensor, nn
from transformers import TrainerCallback

from contrastive_bert.heads.encoded_label import EncodedLabelClassifier, attach_encoded_label_head
from contrastive_bert.heads.label_embedding import LabelEmbeddingClassifier, attach_label_head, find_label_head
from contrastive_bert.losses.acl_grad import (
    ANGLE_PARAMETERS,
    GradientAngleCallback,
    gating_parameters,
    gradient_angle,
    is_optimizer_sync_step,
)
from contrastive_bert.losses.supcon import SUPCON_CITATION, check_labels, label_anchored_supcon

logger = logging.getLogger(__name__)

__all__ = ["ACLEmbedLoss", "ClassMixedBatchSampler", "build_acl_loss", "dataset_label_names"]

MODES = ("acl", "supcon", "ce")
LABEL_EMBEDDINGS = ("free", "encoded")


def _positive_int(options: Mapping[str, Any], name: str, minimum: int) -> None:
    value = options[name]
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        raise ValueError(f"loss_options.{name}: expected an integer >= {minimum}, got {value!r}")


class ACLEmbedLoss(nn.Module):
    """Cross-entropy + lambda x label-anchored supervised contrastive loss, with ACL-Grad gating.

    Args:
        model: SentenceTransformer; a label head with ``label_names`` is appended if it has none
            (an existing head must carry the same names in the same order).
        label_names: the K >= 2 class names; dataset labels are ints in [0, K).
        temperature: SupCon temperature tau.
        contrastive_weight: lambda.
        gradient_gating: ACL-Grad on/off.
        angle_threshold: gamma_thres in degrees, in [0, 180].
        mode: ``"acl"`` (label anchors), ``"supcon"`` (plain SupCon, no anchors) or ``"ce"`` (CE only).
        head_scale: logit scale of a newly created head (cosine logits x scale).
        initial_grad_scale: first power-of-two scale for the per-term gradients (see module doc).
        label_embedding: ``"free"``: the head's rows are free vectors
            (:class:`~contrastive_bert.heads.label_embedding.LabelEmbeddingClassifier`);
            ``"encoded"``: the rows are the encoder's embeddings of ``label_template.format(name)``
            (:class:`~contrastive_bert.heads.encoded_label.EncodedLabelClassifier`), re-encoded with
            gradients each step for the classes of the batch, so a new label is added by its name.
        label_template: template of the encoded label texts (``"{}"`` = the bare name).
        label_refresh_every: encoded head only: re-encode all K rows (no gradient) every this many steps.
        angle_parameters: ``"head_last_layer"`` (default: the angle over the head and the encoder's
            last layer only, a short partial backward; a step takes 1.2x CE's) or ``"all"`` (exact
            ACL-Grad: the angle over every trainable parameter, one extra backward, 2.1x CE's).
        angle_every: take the gating decision every this many optimizer steps and keep it in between.
        angle_audit_every: with a cheaper estimate, also compute the exact angle on every this many
            decisions and record it (``exact_angle`` / ``exact_gated`` in ``angle_history``); 0 = never.

    Returns ``{"ce": ..., "contrastive": lambda * SupCon}`` (the objective's parts; with gating on,
    their gradient is the gated one).

    Inputs:
        +------------+-----------------------------------+
        | Texts      | Labels                            |
        +============+===================================+
        | single     | class (int in [0, K))             |
        +------------+-----------------------------------+

        Registered as ``acl`` (data format ``labelled``: ``text``, ``label``; a ``ClassLabel``
        column gives ``label_names``).

    Recommendations:
        - Use :class:`ClassMixedBatchSampler` (the registry's for this loss): SupCon needs rows of
          the same class in a batch (anchors without a positive are left out), and the label head
          needs every class all epoch long; sentence-transformers' ``group_by_label`` order ends
          each epoch with batches of the largest classes only (see the sampler).
        - Batches of 32+ rows with several classes each; a single-class batch adds no contrast
          (counted in ``single_class_batches``).
        - A small ``contrastive_weight`` (0.02-0.1) and a higher learning rate for the new head
          (``head_learning_rate``); ``angle_parameters="head_last_layer"`` unless the exact angle
          is wanted (``"all"``: one extra backward per step).

    Relations:
        - ``mode="ce"`` is :class:`sentence_transformers.losses.SoftmaxLoss`-like cross-entropy on
          one text; ``mode="supcon"`` is CE + :func:`~contrastive_bert.losses.supcon.supervised_contrastive_loss`
          (the CE + SCL baseline); ``mode="acl"`` adds the label rows as anchors
          (:func:`~contrastive_bert.losses.supcon.label_anchored_supcon`).
        - Resembles :class:`sentence_transformers.losses.BatchAllTripletLoss` and the other
          label-based losses, which contrast samples only, with no classifier.
        - :class:`~contrastive_bert.losses.cross_layer.CrossLayerLoss` applies the same
          label-anchored SupCon to exit heads on intermediate layers.
    """

    def __init__(
        self,
        model: nn.Module,
        label_names: Sequence[str],
        temperature: float = 0.5,
        contrastive_weight: float = 0.02,
        gradient_gating: bool = True,
        angle_threshold: float = 90.0,
        mode: Literal["acl", "supcon", "ce"] = "acl",
        head_scale: float = 20.0,
        initial_grad_scale: float = 2.0**16,
        label_embedding: Literal["free", "encoded"] = "free",
        label_template: str = "{}",
        label_refresh_every: int = 50,
        angle_parameters: Literal["all", "head_last_layer"] = "head_last_layer",
        angle_every: int = 1,
        angle_audit_every: int = 0,
    ) -> None:
        super().__init__()
        options = {k: v for k, v in locals().items() if k not in ("self", "model", "label_names", "__class__")}
        self.check_options(options)
        self.model = model
        if label_embedding == "encoded":
            head = attach_encoded_label_head(model, label_names, label_template=label_template, scale=head_scale)
        else:
            head = attach_label_head(model, label_names, scale=head_scale)
        self.label_names = list(head.label_names)
        self.temperature = float(temperature)
        self.contrastive_weight = float(contrastive_weight)
        self.gradient_gating = bool(gradient_gating)
        self.angle_threshold = float(angle_threshold)
        self.mode = mode
        self.label_embedding = label_embedding
        self.label_template = label_template
        self.label_refresh_every = label_refresh_every
        self.angle_parameters = angle_parameters
        self.angle_every = angle_every
        self.angle_audit_every = angle_audit_every
        self.grad_scale = float(2.0 ** round(math.log2(initial_grad_scale)))
        self._finite_steps = 0
        self._accumulated_ce: list[Tensor | None] | None = None
        self._accumulated_contrastive: list[Tensor | None] | None = None
        self._pending_decision = True
        self._current_weight = self.contrastive_weight
        self._optimizer_steps = 0
        self._training_forwards = 0
        self.audit_seconds = 0.0
        self.angle_history: list[dict[str, float | int | bool]] = []
        self.single_class_batches = 0

    @classmethod
    def check_options(cls, options: Mapping[str, Any]) -> None:
        """Value checks of the options given (a recipe's ``loss_options``), without a model."""
        def number(name: str) -> float | None:
            value = options.get(name)
            if name not in options:
                return None
            if isinstance(value, bool) or not isinstance(value, (int, float)):
                raise ValueError(f"loss_options.{name}: expected a number, got {value!r}")
            return float(value)

        choices = {"mode": MODES, "label_embedding": LABEL_EMBEDDINGS, "angle_parameters": ANGLE_PARAMETERS}
        for name, allowed in choices.items():
            if name in options and options[name] not in allowed:
                raise ValueError(f"loss_options.{name}: expected one of {allowed}, got {options[name]!r}")
        if (value := number("temperature")) is not None and not value > 0:
            raise ValueError(f"loss_options.temperature: expected a positive number, got {options['temperature']!r}")
        if (value := number("contrastive_weight")) is not None and value < 0:
            raise ValueError(f"loss_options.contrastive_weight: expected a number >= 0, got {options['contrastive_weight']!r}")
        if (value := number("angle_threshold")) is not None and not 0.0 <= value <= 180.0:
            raise ValueError(f"loss_options.angle_threshold: expected degrees in [0, 180], got {options['angle_threshold']!r}")
        for name in ("initial_grad_scale", "head_scale"):
            if (value := number(name)) is not None and not value > 0:
                raise ValueError(f"loss_options.{name}: expected a positive number, got {options[name]!r}")
        if "gradient_gating" in options and not isinstance(options["gradient_gating"], bool):
            raise ValueError(f"loss_options.gradient_gating: expected true or false, got {options['gradient_gating']!r}")
        template = options.get("label_template", "{}")
        if not isinstance(template, str) or "{}" not in template:
            raise ValueError(f"loss_options.label_template: expected a string containing '{{}}', got {template!r}")
        for name, minimum in (("label_refresh_every", 1), ("angle_every", 1), ("angle_audit_every", 0)):
            if name in options:
                _positive_int(options, name, minimum)

    # ----------------------------------------------------------------- helpers

    @property
    def head(self) -> LabelEmbeddingClassifier:
        """The label head inside the model (looked up each time: the trainer may re-wrap the model)."""
        head = find_label_head(self.model)
        if head is None:
            raise ValueError("model: the LabelEmbeddingClassifier was removed from the model")
        return head

    @property
    def uses_contrastive(self) -> bool:
        return self.mode != "ce" and self.contrastive_weight > 0

    @property
    def exact_gating(self) -> bool:
        """True when every step's decision uses the exact angle over all parameters."""
        return self.angle_parameters == "all" and self.angle_every == 1

    def contrastive_term(self, embeddings: Tensor, labels: Tensor, label_embeddings: Tensor | None = None) -> Tensor:
        """SupCon over [embeddings (B, d); label embeddings (K, d)] (``acl``) or embeddings only (``supcon``).
        ``label_embeddings`` default to the head's rows."""
        if self.mode != "acl":
            return label_anchored_supcon(embeddings, labels, None, self.temperature)
        if label_embeddings is None:
            label_embeddings = self.head.label_embeddings(normalized=True)
        return label_anchored_supcon(embeddings, labels, label_embeddings, self.temperature)

    def _label_rows(self, head: LabelEmbeddingClassifier, labels: Tensor) -> Tensor | None:
        """Encoded head with gradients on: the K rows with the batch's classes encoded now (with graph)."""
        if not isinstance(head, EncodedLabelClassifier) or not torch.is_grad_enabled():
            return None
        if self._training_forwards % self.label_refresh_every == 0:
            head.refresh(self.model)
        self._training_forwards += 1
        return head.label_embeddings_with_grad(self.model, labels)

    def compute_terms(self, sentence_features: Iterable[dict[str, Tensor]], labels: Tensor) -> tuple[Tensor, Tensor | None]:
        """Forward the model; return (CE, SupCon or None), both scalars with graph."""
        features = list(sentence_features)
        if len(features) != 1:
            raise ValueError(f"sentence_features: ACLEmbedLoss takes one text column, got {len(features)}")
        head = self.head
        labels = check_labels(labels, head.num_labels, "ACLEmbedLoss")
        output = self.model(features[0])
        embeddings = output["sentence_embedding"]
        labels = labels.to(embeddings.device)
        label_rows = self._label_rows(head, labels)
        logits = output[head.module_output_name] if label_rows is None else head.logits(embeddings, label_rows)
        ce = F.cross_entropy(logits.float(), labels)
        if not self.uses_contrastive:
            return ce, None
        if labels.numel() and int(labels.unique().numel()) < 2:
            self.single_class_batches += 1
            warnings.warn(
                "ACLEmbedLoss: a training batch has a single class, so the contrastive term has no negatives "
                "among samples; train with SentenceTransformerTrainingArguments(batch_sampler=ClassMixedBatchSampler) "
                "(contrastive_bert.losses), as the acl loss of a recipe does",
                UserWarning,
                stacklevel=2,
            )
        return ce, self.contrastive_term(embeddings, labels, label_rows)

    # ----------------------------------------------------------------- forward

    def forward(self, sentence_features: Iterable[dict[str, Tensor]], labels: Tensor) -> dict[str, Tensor]:
        ce, contrastive = self.compute_terms(sentence_features, labels)
        if contrastive is None:
            return {"ce": ce}
        weighted = self.contrastive_weight * contrastive
        if not (self.gradient_gating and torch.is_grad_enabled() and ce.requires_grad):
            return {"ce": ce, "contrastive": weighted}
        if self.exact_gating:
            surrogate = self._gated_surrogate(ce, contrastive)
            return {"ce": ce.detach() + (surrogate - surrogate.detach()), "contrastive": weighted.detach()}
        weight = self._estimated_weight(ce, contrastive)
        return {"ce": ce, "contrastive": weight * contrastive + (self.contrastive_weight - weight) * contrastive.detach()}

    def _term_gradients(
        self, ce: Tensor, contrastive: Tensor, params: list[Tensor], keep_graph: bool
    ) -> tuple[list[Tensor | None], list[Tensor | None]]:
        """grad(CE) and grad(SupCon) over ``params`` (scaled and unscaled, see module doc)."""
        scale = self.grad_scale
        grads_ce = torch.autograd.grad(ce * scale, params, retain_graph=True, allow_unused=True)
        grads_con = torch.autograd.grad(contrastive * scale, params, retain_graph=keep_graph, allow_unused=True)
        grads_ce = [None if g is None else g / scale for g in grads_ce]
        grads_con = [None if g is None else g / scale for g in grads_con]
        finite = all(bool(torch.isfinite(g).all()) for g in (*grads_ce, *grads_con) if g is not None)
        self._update_grad_scale(finite)
        return grads_ce, grads_con

    def _record(self, angle: float, cosine: float, norm_ce: float, norm_con: float, weight: float, **extra: Any) -> None:
        self.angle_history.append(
            {
                "step": len(self.angle_history),
                "angle": angle,
                "cosine": cosine,
                "grad_norm_ce": norm_ce,
                "grad_norm_contrastive": norm_con,
                "gated": weight == 0.0,
                "weight": weight,
                **extra,
            }
        )

    def _estimated_weight(self, ce: Tensor, contrastive: Tensor) -> float:
        """lambda' from the cheaper estimate: the angle over ``angle_parameters``, decided every
        ``angle_every`` optimizer steps (on the step's first micro-batch) and kept in between."""
        if self._pending_decision:
            params = gating_parameters(self.model, self.angle_parameters)
            angle, cosine, norm_ce, norm_con = gradient_angle(*self._term_gradients(ce, contrastive, params, True))
            self._current_weight = self.contrastive_weight if angle <= self.angle_threshold else 0.0
            extra: dict[str, Any] = {"estimate": self.angle_parameters}
            if self.angle_audit_every and len(self.angle_history) % self.angle_audit_every == 0:
                start = time.perf_counter()
                exact = angle
                if self.angle_parameters != "all":
                    all_params = gating_parameters(self.model, "all")
                    exact = gradient_angle(*self._term_gradients(ce, contrastive, all_params, True))[0]
                extra.update(exact_angle=exact, exact_gated=not exact <= self.angle_threshold)
                self.audit_seconds += time.perf_counter() - start
            self._record(angle, cosine, norm_ce, norm_con, self._current_weight, **extra)
            self._pending_decision = False
        if is_optimizer_sync_step():
            self._optimizer_steps += 1
            self._pending_decision = self._optimizer_steps % self.angle_every == 0
        return self._current_weight

    def _gated_surrogate(self, ce: Tensor, contrastive: Tensor) -> Tensor:
        """Per-term gradients, ACL-Grad decision, and a value-0 surrogate whose gradient is the gated one."""
        params = gating_parameters(self.model, "all")
        grads_ce, grads_con = self._term_gradients(ce, contrastive, params, False)
        self._accumulated_ce = _add(self._accumulated_ce, grads_ce)
        self._accumulated_contrastive = _add(self._accumulated_contrastive, grads_con)
        coefficients: list[Tensor | None] = list(grads_ce)
        if is_optimizer_sync_step():
            angle, cosine, norm_ce, norm_con = gradient_angle(self._accumulated_ce, self._accumulated_contrastive)
            keep = angle <= self.angle_threshold  # False for nan
            weight = self.contrastive_weight if keep else 0.0
            if weight:
                coefficients = [
                    c if s is None else (s * weight if c is None else c + weight * s)
                    for c, s in zip(coefficients, self._accumulated_contrastive)
                ]
            self._record(angle, cosine, norm_ce, norm_con, weight)
            self._accumulated_ce = self._accumulated_contrastive = None
        surrogate = ce.new_zeros(())
        for param, coefficient in zip(params, coefficients):
            if coefficient is not None:
                surrogate = surrogate + (param * coefficient.to(param.dtype)).sum()
        return surrogate

    def _update_grad_scale(self, finite: bool) -> None:
        """Dynamic power-of-two scale (GradScaler rules: halve on overflow, double after 2000 good steps)."""
        if not finite:
            self.grad_scale = max(self.grad_scale / 2.0, 1.0)
            self._finite_steps = 0
            logger.warning("ACLEmbedLoss: non-finite per-term gradient; scale reduced to %s", self.grad_scale)
            return
        self._finite_steps += 1
        if self._finite_steps >= 2000 and self.grad_scale < 2.0**24:
            self.grad_scale *= 2.0
            self._finite_steps = 0

    def trainer_callbacks(self) -> list:
        """Callbacks the training runner adds: gradient-angle logging when ACL-Grad is on
        (``angle_threshold=180`` logs the angle without ever gating a finite one), and a last
        re-encoding of the label names at the end of training for an encoded head."""
        callbacks: list = []
        if self.gradient_gating and self.uses_contrastive:
            callbacks.append(GradientAngleCallback(self))
        if self.label_embedding == "encoded":
            callbacks.append(EncodedLabelRefreshCallback(self.model))
        return callbacks

    def get_config_dict(self) -> dict[str, Any]:
        return {
            "label_names": self.label_names,
            "temperature": self.temperature,
            "contrastive_weight": self.contrastive_weight,
            "gradient_gating": self.gradient_gating,
            "angle_threshold": self.angle_threshold,
            "mode": self.mode,
            "label_embedding": self.label_embedding,
            "label_template": self.label_template,
            "angle_parameters": self.angle_parameters,
            "angle_every": self.angle_every,
        }

    @property
    def citation(self) -> str:
        return SUPCON_CITATION


class EncodedLabelRefreshCallback(TrainerCallback):
    """Re-encode an encoded label head's rows (eval mode) when training ends, so the saved head
    equals the encoder's embeddings of its label names."""

    def __init__(self, model: nn.Module) -> None:
        self.model = model

    def on_train_end(self, args, state, control, **kwargs):
        head = find_label_head(self.model)
        if isinstance(head, EncodedLabelClassifier):
            head.refresh(self.model)


class ClassMixedBatchSampler(DefaultBatchSampler):
    """Batches of same-class pairs whose class mix is the data's all epoch long (the ``acl`` loss's).

    Each class's rows are shuffled and cut into pairs (an odd last row waits for another epoch), and
    pair ``j`` of a class of ``n`` pairs is placed at ``(j + u) / n`` of the epoch (``u`` uniform in
    [0, 1)): every class is spread evenly over the epoch, so every stretch of batches holds the classes
    in their share of the data, and every pair of every class is used. A batch that would still hold
    one class only (one class with nearly all the rows) swaps a pair with a later batch that can spare one.

    Why not sentence-transformers' ``GroupByLabelBatchSampler``: its classes take turns until each
    runs out, so on imbalanced data the small classes are used up early and every epoch ends with
    batches of the two largest classes only (emotion, 16,000 rows: the last 156 of 478 batches are
    sadness and joy only). A label head trained on that order ends each epoch biased towards those two
    classes, and it drops the largest class's rows beyond the second largest's. ``eval/bench_acl.py``'s
    ``emotion/full16k`` regime trains ACL-Embed both ways (``group_by_label`` twin) and probes each
    run's embeddings with logistic regression (``eval/results/acl_quality.json``).

    Signature of a sentence-transformers batch sampler: pass the class as
    ``SentenceTransformerTrainingArguments(batch_sampler=ClassMixedBatchSampler)``.
    """

    def __init__(
        self,
        dataset: Any,
        batch_size: int,
        drop_last: bool,
        valid_label_columns: list[str] | None = None,
        generator: torch.Generator | None = None,
        seed: int = 0,
    ) -> None:
        super().__init__(dataset, batch_size=batch_size, drop_last=drop_last, valid_label_columns=valid_label_columns,
                         generator=generator, seed=seed)
        if batch_size < 4 or batch_size % 2:
            raise ValueError(f"batch_size: ClassMixedBatchSampler needs an even number >= 4, got {batch_size}")
        column = next((c for c in valid_label_columns or [] if c in dataset.column_names), None)
        if column is None:
            raise ValueError(f"dataset: none of the label columns {valid_label_columns} is among {dataset.column_names}")
        groups: dict[Any, list[int]] = {}
        for index, label in enumerate(dataset[column]):
            groups.setdefault(label.item() if hasattr(label, "item") else label, []).append(index)
        self.groups = {label: rows for label, rows in groups.items() if len(rows) >= 2}
        if len(self.groups) < 2:
            raise ValueError(f"dataset: ClassMixedBatchSampler needs at least 2 classes with 2+ rows, got {len(self.groups)}")
        self.pairs = sum(len(rows) // 2 for rows in self.groups.values())

    def _pairs(self) -> list[tuple[Any, list[int]]]:
        """This epoch's (class, [row, row]) pairs in order: every class spread evenly over the epoch."""
        if self.generator is not None and self.seed is not None:
            self.generator.manual_seed(self.seed + self.epoch)
        placed = []
        for label, rows in self.groups.items():
            order = torch.randperm(len(rows), generator=self.generator).tolist()
            n = len(rows) // 2
            offsets = torch.rand(n, generator=self.generator).tolist()
            placed += [((j + offsets[j]) / n, label, [rows[order[2 * j]], rows[order[2 * j + 1]]]) for j in range(n)]
        placed.sort(key=lambda item: item[0])
        return [(label, pair) for _, label, pair in placed]

    def __iter__(self):
        pairs = self._pairs()
        per_batch = self.batch_size // 2
        batches = [pairs[i:i + per_batch] for i in range(0, len(pairs), per_batch)]
        if batches and len(batches[-1]) < per_batch and (self.drop_last or len(batches[-1]) < 2):
            batches.pop()
        self._mix_single_class_batches(batches)
        for batch in batches:
            yield [row for _, pair in batch for row in pair]

    SWAP_SEARCH = 256  # batches searched (after the single-class one, wrapping round) for a pair to swap in

    @staticmethod
    def _mix_single_class_batches(batches: list[list[tuple[Any, list[int]]]]) -> None:
        """In place: a batch of one class only takes a pair of another class from one of the next
        ``SWAP_SEARCH`` batches that keeps two classes after the swap (when there is one)."""
        counts = [Counter(label for label, _ in batch) for batch in batches]
        for i, batch in enumerate(batches):
            if len(batch) < 2 or len(counts[i]) > 1:
                continue
            label = batch[0][0]
            for step in range(1, min(len(batches), ClassMixedBatchSampler.SWAP_SEARCH + 1)):
                j = (i + step) % len(batches)
                # the donor gives a pair of another class and gets one of ``label``: it must keep two classes
                given = next((other for other in counts[j] if other != label), None)
                if given is None or len(set(counts[j]) - ({given} if counts[j][given] == 1 else set()) | {label}) < 2:
                    continue
                k = next(k for k, (other, _) in enumerate(batches[j]) if other == given)
                batch[-1], batches[j][k] = batches[j][k], batch[-1]
                counts[i].update({given: 1, label: -1})
                counts[j].update({label: 1, given: -1})
                counts[j] += Counter()  # drop the classes it no longer holds
                break

    def __len__(self) -> int:
        full, rest = divmod(self.pairs, self.batch_size // 2)
        return full + (1 if rest >= 2 and not self.drop_last else 0)


def _add(total: list[Tensor | None] | None, grads: Sequence[Tensor | None]) -> list[Tensor | None]:
    """Element-wise sum of per-parameter gradient lists (None = no gradient)."""
    if total is None:
        return list(grads)
    return [t if g is None else (g if t is None else t + g) for t, g in zip(total, grads)]


def dataset_label_names(dataset: Any, label_column: str = "label") -> list[str]:
    """Class names of a ``datasets.Dataset`` whose ``label_column`` is a ``ClassLabel``."""
    feature = getattr(dataset, "features", {}).get(label_column) if hasattr(dataset, "features") else None
    names = getattr(feature, "names", None)
    if not names:
        raise ValueError(
            f"train_dataset: column {label_column!r} is not a ClassLabel with names; pass label_names explicitly"
        )
    return list(names)


def build_acl_loss(model: nn.Module, train_dataset: Any, label_names: Sequence[str] | None = None, **options: Any) -> ACLEmbedLoss:
    """``ACLEmbedLoss`` for a labelled dataset (``text``, ``label``); label names from its ClassLabel
    unless given. ``options`` are ``ACLEmbedLoss`` keyword arguments (the registry's ``acl``)."""
    names = list(label_names) if label_names is not None else dataset_label_names(train_dataset)
    return ACLEmbedLoss(model, names, **options)
