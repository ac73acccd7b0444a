"""Multi-exit training loss: ACL-CL cross-layer contrastive distillation and its baselines.

For every intermediate exit m (the student) and the final layer's exit M (the teacher):

- ``method="acl_cl"``: CE(z^m, y) + w * SupCon over the augmented batch
  ``[h^m; l^m; h^M; l^M]`` with labels ``[y; 0..K-1; y; 0..K-1]`` (tau = 0.5): h = exit sentence
  embeddings (B, d), l = the exit's label embeddings (K, d) (classifier weight rows). The student
  learns the teacher's between-sample relations (student-teacher sample pairs) and aligns its
  label space with the teacher's (student labels vs teacher labels and samples).
- ``method="kd"``: CE(z^m, y) + w * T^2 KL(softmax(z^M / T) || softmax(z^m / T)) (logit KD).
- ``method="ce"``: CE(z^m, y) only.

With ``freeze_backbone=True`` (the default: stage 2 of two-stage training) the loss freezes
every parameter but the intermediate exits, and only the students are trained; the frozen
backbone then runs in eval mode (no dropout), so the exits train on the layer states they see at
inference. With
``freeze_backbone=False`` (joint training) the final exit is trained too: CE(z^M, y) +
``final_contrastive_weight`` x ACL-Embed SupCon([h^M; l^M]). The teacher's outputs are detached
in the distillation terms (``detach_teacher=True``).

The loss attaches the exit heads itself when the model has none (``exit_layers``, ``exit_head``,
``head_dim``), the final exit copying the model's trained label head, so a plain
sentence-transformers script needs only ``loss = CrossLayerLoss(model, method="acl_cl", ...)``.

sentence-transformers' :class:`~sentence_transformers.losses.AdaptiveLayerLoss` is the other
baseline where it applies (one shared classifier on every layer, backbone trained):
:func:`adaptive_layer_baseline` wraps :class:`~contrastive_bert.losses.acl_embed.ACLEmbedLoss` in it.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from contrastive_bert.encoder import LayerwiseEncoder, transformer_module
from contrastive_bert.heads.exits import (
    EXIT_HEAD_TYPES,
    MultiExitHeads,
    add_exit_heads,
    check_exit_layers,
    exit_outputs,
    find_exit_heads,
)
from contrastive_bert.heads.label_embedding import find_label_head
from contrastive_bert.losses.acl_embed import ACLEmbedLoss
from contrastive_bert.losses.supcon import SUPCON_CITATION, check_labels, label_anchored_supcon

logger = logging.getLogger(__name__)

__all__ = ["CROSS_LAYER_METHODS", "CrossLayerLoss", "adaptive_layer_baseline", "cross_layer_contrastive_loss", "logit_kd_loss"]

CROSS_LAYER_METHODS: tuple[str, ...] = ("ce", "kd", "acl_cl")


def cross_layer_contrastive_loss(
    student_embeddings: Tensor,
    student_label_embeddings: Tensor,
    teacher_embeddings: Tensor,
    teacher_label_embeddings: Tensor,
    labels: Tensor,
    temperature: float = 0.5,
) -> Tensor:
    """ACL-CL: SupCon over [h_s (B, d); l_s (K, d); h_t (B, d); l_t (K, d)] with labels
    [y; 0..K-1; y; 0..K-1] (rows L2-normalised, temperature tau). Returns a scalar."""
    return label_anchored_supcon(
        [student_embeddings, teacher_embeddings], labels, [student_label_embeddings, teacher_label_embeddings], temperature
    )


def logit_kd_loss(student_logits: Tensor, teacher_logits: Tensor, temperature: float = 2.0) -> Tensor:
    """Logit distillation T^2 * KL(softmax(t/T) || softmax(s/T)), mean over the batch; logits (B, K)."""
    if not temperature > 0:
        raise ValueError(f"kd_temperature: must be > 0, got {temperature}")
    log_student = F.log_softmax(student_logits.float() / temperature, dim=-1)
    log_teacher = F.log_softmax(teacher_logits.float() / temperature, dim=-1)
    return F.kl_div(log_student, log_teacher, reduction="batchmean", log_target=True) * temperature**2


def _number(options: Mapping[str, Any], name: str, expected: str, valid, integer: bool = False) -> None:
    if name not in options:
        return
    value = options[name]
    kinds = (int,) if integer else (int, float)
    if isinstance(value, bool) or not isinstance(value, kinds) or not valid(value):
        raise ValueError(f"loss_options.{name}: expected {expected}, got {value!r}")


class CrossLayerLoss(nn.Module):
    """Loss over all exits of a multi-exit model (sentence-transformers loss contract).

    Args:
        model: SentenceTransformer; exit heads are attached when it has none.
        method: ``"acl_cl"``, ``"kd"`` or ``"ce"`` for the intermediate exits.
        exit_layers: 1-based layers below the last one that get an exit (default: all of them);
            the last layer's exit is always the final classifier.
        exit_head: ``"linear"`` or ``"mha"`` (the intermediate exits' type).
        head_dim: d_e of the MHA exits (a multiple of ``num_heads``).
        temperature: SupCon temperature tau (ACL-CL and the final exit's ACL-Embed term).
        weight: w, the weight of the ACL-CL / KD term of each student.
        kd_temperature: T of logit KD.
        freeze_backbone: freeze all but the intermediate exits (two-stage training, stage 2);
            False trains the backbone and the final exit too (joint training).
        final_contrastive_weight: lambda of the final exit's ACL-Embed term (joint training; 0 = CE only).
        exit_weights: optional {layer: weight} for the students (default 1 each).
        detach_teacher: stop gradients through the teacher in the distillation terms.
        label_names: class names when the model has no label head (joint training from scratch).
        num_heads: attention heads of the MHA exits.

    Input: one text column, labels (B,) ints in [0, K). Returns a dict of named parts
    (``final``, ``exit_ce``, ``distill``) that the trainer sums and logs.
    """

    def __init__(
        self,
        model: nn.Module,
        method: str = "acl_cl",
        exit_layers: Sequence[int] | None = None,
        exit_head: str = "linear",
        head_dim: int = 64,
        temperature: float = 0.5,
        weight: float = 1.0,
        kd_temperature: float = 2.0,
        freeze_backbone: bool = True,
        final_contrastive_weight: float = 0.02,
        exit_weights: Mapping[int, float] | None = None,
        detach_teacher: bool = True,
        label_names: Sequence[str] | None = None,
        num_heads: int = 4,
    ) -> None:
        super().__init__()
        self.check_options({
            "method": method, "exit_layers": exit_layers, "exit_head": exit_head, "head_dim": head_dim,
            "temperature": temperature, "weight": weight, "kd_temperature": kd_temperature,
            "freeze_backbone": freeze_backbone, "final_contrastive_weight": final_contrastive_weight,
            "detach_teacher": detach_teacher, "num_heads": num_heads,
        })
        self.model = model
        heads = self._attach_heads(model, exit_layers, exit_head, head_dim, num_heads, label_names, freeze_backbone)
        weights = {m: 1.0 for m in heads.exit_layers}
        for layer, value in (exit_weights or {}).items():
            if layer not in weights:
                raise ValueError(f"exit_weights: layer {layer} is not an intermediate exit {heads.exit_layers}")
            weights[layer] = float(value)
        self.exit_weights = weights
        self.method = method
        self.weight = float(weight)
        self.temperature = float(temperature)
        self.kd_temperature = float(kd_temperature)
        self.freeze_backbone = bool(freeze_backbone)
        self.final_contrastive_weight = float(final_contrastive_weight)
        self.detach_teacher = bool(detach_teacher)
        if self.freeze_backbone:
            self._freeze_all_but_students(heads)

    @classmethod
    def check_options(cls, options: Mapping[str, Any]) -> None:
        """Value checks of loss options (a recipe's ``loss_options``) without a model; the exit
        layers are checked against the model's depth when the loss is built."""
        if "method" in options and options["method"] not in CROSS_LAYER_METHODS:
            raise ValueError(f"loss_options.method: expected one of {', '.join(CROSS_LAYER_METHODS)}, got {options['method']!r}")
        if "exit_head" in options and options["exit_head"] not in EXIT_HEAD_TYPES:
            raise ValueError(f"loss_options.exit_head: expected one of {', '.join(EXIT_HEAD_TYPES)}, got {options['exit_head']!r}")
        check_exit_layers(options.get("exit_layers"), name="loss_options.exit_layers")
        _number(options, "head_dim", "a positive integer", lambda v: v >= 1, integer=True)
        _number(options, "num_heads", "a positive integer", lambda v: v >= 1, integer=True)
        num_heads = options.get("num_heads", 4)
        if "head_dim" in options and options["head_dim"] % num_heads:
            raise ValueError(f"loss_options.head_dim: expected a multiple of num_heads={num_heads}, got {options['head_dim']!r}")
        for name in ("temperature", "kd_temperature"):
            _number(options, name, "a positive number", lambda v: v > 0)
        for name in ("weight", "final_contrastive_weight"):
            _number(options, name, "a number >= 0", lambda v: v >= 0)
        for name in ("freeze_backbone", "detach_teacher"):
            if name in options and not isinstance(options[name], bool):
                raise ValueError(f"loss_options.{name}: expected true or false, got {options[name]!r}")

    def _attach_heads(self, model, exit_layers, exit_head, head_dim, num_heads, label_names, freeze_backbone) -> MultiExitHeads:
        heads = find_exit_heads(model)
        num_layers = LayerwiseEncoder.from_model(model).num_layers
        exit_layers = check_exit_layers(exit_layers, num_layers, name="loss_options.exit_layers")
        if heads is not None and exit_layers is None:
            return heads
        if heads is not None:
            if exit_layers != heads.exit_layers:
                raise ValueError(f"exit_layers: the model's exits are on layers {heads.exit_layers}, expected {exit_layers}")
            return heads
        label_head = find_label_head(model)
        if label_head is None and (freeze_backbone or label_names is None):
            raise ValueError(
                "model: has no classifier (label head) for the final exit; train one first (e.g. a stage with loss "
                "'acl') or pass label_names with freeze_backbone=false"
            )
        names = list(label_names) if label_names is not None else list(label_head.label_names)
        return add_exit_heads(model, names, exit_layers=exit_layers, head_type=exit_head, exit_dim=head_dim, num_heads=num_heads)

    def _freeze_all_but_students(self, heads: MultiExitHeads) -> None:
        """requires_grad only on the intermediate exits (the optimizer then skips the rest)."""
        trainable = {id(p) for m in heads.exit_layers for p in heads.exit(m).parameters()}
        if not trainable:
            raise ValueError("exit_layers: no intermediate exits to train with a frozen backbone")
        for param in self.model.parameters():
            param.requires_grad_(id(param) in trainable)

    @property
    def heads(self) -> MultiExitHeads:
        heads = find_exit_heads(self.model)
        if heads is None:
            raise ValueError("model: the exit heads were removed from the model")
        return heads

    def compute_loss_from_outputs(
        self, exit_embeddings: Mapping[int, Tensor], exit_logits: Mapping[int, Tensor], labels: Tensor
    ) -> dict[str, Tensor]:
        """Loss parts from exit embeddings {layer: (B, d)} and logits {layer: (B, K)}."""
        heads = self.heads
        final = heads.num_layers
        labels = check_labels(labels, len(heads.label_names), "CrossLayerLoss").to(exit_logits[final].device)
        teacher_embeddings, teacher_logits = exit_embeddings[final], exit_logits[final]
        teacher_labels = heads.final_exit.classifier.label_embeddings(normalized=True)
        parts: dict[str, Tensor] = {}
        if not self.freeze_backbone:
            loss = F.cross_entropy(teacher_logits.float(), labels)
            if self.final_contrastive_weight > 0:
                loss = loss + self.final_contrastive_weight * label_anchored_supcon(
                    teacher_embeddings, labels, teacher_labels, self.temperature
                )
            parts["final"] = loss
        if self.detach_teacher or self.freeze_backbone:
            teacher_embeddings, teacher_logits = teacher_embeddings.detach(), teacher_logits.detach()
            teacher_labels = teacher_labels.detach()
        exit_ce = teacher_logits.new_zeros(())
        distill = teacher_logits.new_zeros(())
        for layer, layer_weight in self.exit_weights.items():
            exit_ce = exit_ce + layer_weight * F.cross_entropy(exit_logits[layer].float(), labels)
            if self.method == "ce" or self.weight == 0:
                continue
            if self.method == "kd":
                term = logit_kd_loss(exit_logits[layer], teacher_logits, self.kd_temperature)
            else:
                term = cross_layer_contrastive_loss(
                    exit_embeddings[layer], heads.exit(layer).classifier.label_embeddings(normalized=True),
                    teacher_embeddings, teacher_labels, labels, self.temperature,
                )
            distill = distill + layer_weight * self.weight * term
        if self.exit_weights:
            parts["exit_ce"] = exit_ce
            if self.method != "ce":
                parts["distill"] = distill
        if not parts:
            raise ValueError("freeze_backbone: nothing to train (a frozen backbone and no intermediate exits)")
        return parts

    def forward(self, sentence_features: Iterable[dict[str, Tensor]], labels: Tensor) -> dict[str, Tensor]:
        features = list(sentence_features)
        if len(features) != 1:
            raise ValueError(f"sentence_features: CrossLayerLoss takes one text column, got {len(features)}")
        with self._frozen_backbone_in_eval_mode():
            output = exit_outputs(self.model, features[0])
        return self.compute_loss_from_outputs(output["exit_embeddings"], output["exit_logits"], labels)

    @contextmanager
    def _frozen_backbone_in_eval_mode(self) -> Iterator[None]:
        """A frozen backbone runs without dropout (the trainer switches the whole model to train
        mode every step): the exits then learn from the very layer states they see at inference,
        as when the states are cached. Only the exits' own dropout stays on."""
        backbone = transformer_module(self.model)
        was_training = backbone.training
        if self.freeze_backbone:
            backbone.eval()
        try:
            yield
        finally:
            backbone.train(was_training)

    def get_config_dict(self) -> dict[str, Any]:
        heads = self.heads
        return {
            "method": self.method,
            "exit_layers": heads.exit_layers,
            "exit_head": heads.head_type,
            "head_dim": heads.exit_dim,
            "temperature": self.temperature,
            "weight": self.weight,
            "kd_temperature": self.kd_temperature,
            "freeze_backbone": self.freeze_backbone,
            "final_contrastive_weight": self.final_contrastive_weight,
            "exit_weights": self.exit_weights,
            "detach_teacher": self.detach_teacher,
        }

    @property
    def citation(self) -> str:
        return SUPCON_CITATION


def build_cross_layer_loss(model: nn.Module, train_dataset: Any = None, **options: Any) -> CrossLayerLoss:
    """The registry's ``cross_layer``: ``CrossLayerLoss(model, **options)``; the label names come
    from the model's label head (stage 1)."""
    return CrossLayerLoss(model, **options)


class SummedLoss(nn.Module):
    """Wrap a loss that returns a dict of parts so that it returns their sum (AdaptiveLayerLoss
    multiplies the inner loss by a float)."""

    def __init__(self, loss: nn.Module) -> None:
        super().__init__()
        self.loss = loss
        self.model = loss.model

    def forward(self, sentence_features: Iterable[dict[str, Tensor]], labels: Tensor) -> Tensor:
        value = self.loss(sentence_features, labels)
        return torch.stack(list(value.values())).sum() if isinstance(value, dict) else value

    def get_config_dict(self) -> dict[str, Any]:
        return self.loss.get_config_dict()


def adaptive_layer_baseline(
    model: nn.Module,
    label_names: Sequence[str],
    n_layers_per_step: int = 1,
    kl_temperature: float = 0.3,
    **acl_kwargs: Any,
) -> nn.Module:
    """sentence-transformers' AdaptiveLayerLoss around ACLEmbedLoss (gating off: the per-layer
    loss calls would each take their own ACL-Grad decision): every sampled layer's pooled
    embedding is classified by the model's one label head, plus AdaptiveLayerLoss's embedding KL
    to the last layer. Evaluate the layers with exit heads that share the final head
    (:func:`contrastive_bert.heads.exits.tie_exits_to_label_head`)."""
    from sentence_transformers.sentence_transformer.losses import AdaptiveLayerLoss

    acl_kwargs.setdefault("gradient_gating", False)
    inner = SummedLoss(ACLEmbedLoss(model, label_names, **acl_kwargs))
    return AdaptiveLayerLoss(model, inner, n_layers_per_step=n_layers_per_step, kl_temperature=kl_temperature)
