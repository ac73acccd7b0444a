"""Multi-exit training loss: ACL-CL cross-layer contrastive distillation and its baselines.

For every intermediate exit m (the student) and the final layer's exit M (the teacher):

- ``method="acl_cl"``: CE(z^m, y) + w * SupCon over the augmented batch
  ``[h^m; l^m; h^M; l^M]`` with labels ``[y; 0..K-1; y; 0..K-1]`` (tau = 0.5): h = exit sentence
  embeddings (B, d), l = the exit's label embeddings (K, d) (classifier weight rows). The student
  learns the teacher's between-sample relations (student-teacher sample pairs) and aligns its
  label space with the teacher's (student labels vs teacher labels and samples).
- ``method="kd"``: CE(z^m, y) + w * T^2 KL(softmax(z^M / T) || softmax(z^m / T)) (logit KD).
- ``method="ce"``: CE(z^m, y) only.

The final exit is trained too when ``train_final=True`` (joint training): CE(z^M, y) +
``final_contrastive_weight`` x ACL-Embed SupCon([h^M; l^M]). With ``train_final=False``
(stage 2 of two-stage training, backbone and final exit frozen) only the students are trained.
The teacher's outputs are detached in the distillation terms (``detach_teacher=True``).

sentence-transformers' :class:`~sentence_transformers.losses.AdaptiveLayerLoss` is the other
baseline where it applies (one shared classifier on every layer, backbone trained):
:func:`adaptive_layer_baseline` wraps :class:`~contrastive_bert.losses.acl_embed.ACLEmbedLoss` in it.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from contrastive_bert.heads.exits import MultiExitHeads, exit_outputs, get_exit_heads
from contrastive_bert.losses.acl_embed import SUPCON_CITATION, ACLEmbedLoss, supervised_contrastive_loss

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
    if student_embeddings.shape != teacher_embeddings.shape:
        raise ValueError(
            f"teacher_embeddings: shape {tuple(teacher_embeddings.shape)} differs from the student's "
            f"{tuple(student_embeddings.shape)}; student and teacher must share one embedding space"
        )
    if student_label_embeddings.shape != teacher_label_embeddings.shape:
        raise ValueError(
            f"teacher_label_embeddings: shape {tuple(teacher_label_embeddings.shape)} differs from the "
            f"student's {tuple(student_label_embeddings.shape)}"
        )
    num_labels = student_label_embeddings.shape[0]
    anchors = torch.arange(num_labels, device=labels.device, dtype=labels.dtype)
    rows = torch.cat(
        [student_embeddings, student_label_embeddings.to(student_embeddings.dtype),
         teacher_embeddings.to(student_embeddings.dtype), teacher_label_embeddings.to(student_embeddings.dtype)],
        dim=0,
    )
    row_labels = torch.cat([labels, anchors, labels, anchors], dim=0)
    return supervised_contrastive_loss(rows, row_labels, temperature)


def logit_kd_loss(student_logits: Tensor, teacher_logits: Tensor, temperature: float = 2.0) -> Tensor:
    """Logit distillation T^2 * KL(softmax(t/T) || softmax(s/T)), mean over the batch; logits (B, K)."""
    if not temperature > 0:
        raise ValueError(f"kd_temperature: must be > 0, got {temperature}")
    log_student = F.log_softmax(student_logits.float() / temperature, dim=-1)
    log_teacher = F.log_softmax(teacher_logits.float() / temperature, dim=-1)
    return F.kl_div(log_student, log_teacher, reduction="batchmean", log_target=True) * temperature**2


class CrossLayerLoss(nn.Module):
    """Loss over all exits of a model carrying :class:`MultiExitHeads` (ST loss contract).

    Args:
        model: SentenceTransformer with exit heads (``add_exit_heads``).
        method: ``"acl_cl"``, ``"kd"`` or ``"ce"`` for the intermediate exits.
        distill_weight: w, the weight of the ACL-CL / KD term of each student.
        temperature: SupCon temperature tau (ACL-CL and the final exit's ACL-Embed term).
        kd_temperature: T of logit KD.
        train_final: also train the final exit (joint training); False for stage 2.
        final_contrastive_weight: lambda of the final exit's ACL-Embed term (0 = CE only).
        exit_weights: optional {layer: weight} for the students (default 1 each).
        detach_teacher: stop gradients through the teacher in the distillation terms.

    Input: one text column, labels (B,) ints in [0, K). Returns a dict of named parts
    (``final``, ``exit_ce``, ``distill``) that the trainer sums and logs.
    """

    def __init__(
        self,
        model: nn.Module,
        method: str = "acl_cl",
        distill_weight: float = 1.0,
        temperature: float = 0.5,
        kd_temperature: float = 2.0,
        train_final: bool = True,
        final_contrastive_weight: float = 0.02,
        exit_weights: Mapping[int, float] | None = None,
        detach_teacher: bool = True,
    ) -> None:
        super().__init__()
        if method not in CROSS_LAYER_METHODS:
            raise ValueError(f"method: expected one of {CROSS_LAYER_METHODS}, got {method!r}")
        for name, value in (("distill_weight", distill_weight), ("final_contrastive_weight", final_contrastive_weight)):
            if not isinstance(value, (int, float)) or value < 0:
                raise ValueError(f"{name}: must be >= 0, got {value!r}")
        if not isinstance(temperature, (int, float)) or not temperature > 0:
            raise ValueError(f"temperature: must be > 0, got {temperature!r}")
        if not isinstance(kd_temperature, (int, float)) or not kd_temperature > 0:
            raise ValueError(f"kd_temperature: must be > 0, got {kd_temperature!r}")
        self.model = model
        heads = get_exit_heads(model)
        weights = {m: 1.0 for m in heads.intermediate_layers}
        for layer, weight in (exit_weights or {}).items():
            if layer not in weights:
                raise ValueError(f"exit_weights: layer {layer} is not an intermediate exit {heads.intermediate_layers}")
            weights[layer] = float(weight)
        self.exit_weights = weights
        self.method = method
        self.distill_weight = float(distill_weight)
        self.temperature = float(temperature)
        self.kd_temperature = float(kd_temperature)
        self.train_final = bool(train_final)
        self.final_contrastive_weight = float(final_contrastive_weight)
        self.detach_teacher = bool(detach_teacher)

    @property
    def heads(self) -> MultiExitHeads:
        return get_exit_heads(self.model)

    def _check_labels(self, labels: Tensor | None, num_labels: int) -> Tensor:
        if labels is None:
            raise ValueError("labels: CrossLayerLoss needs integer class labels, got None")
        labels = torch.as_tensor(labels)
        if labels.dim() != 1 or labels.dtype.is_floating_point or labels.dtype == torch.bool:
            raise ValueError(f"labels: expected a 1-D integer tensor, got {labels.dtype} {tuple(labels.shape)}")
        if labels.numel() and (int(labels.min()) < 0 or int(labels.max()) >= num_labels):
            raise ValueError(f"labels: values must be in [0, {num_labels}), got min {int(labels.min())} max {int(labels.max())}")
        return labels

    def compute_loss_from_outputs(
        self, exit_embeddings: Mapping[int, Tensor], exit_logits: Mapping[int, Tensor], labels: Tensor
    ) -> dict[str, Tensor]:
        """Loss parts from exit embeddings {layer: (B, d)} and logits {layer: (B, K)}."""
        heads = self.heads
        final = heads.num_layers
        labels = self._check_labels(labels, len(heads.label_names)).to(exit_logits[final].device)
        teacher_embeddings, teacher_logits = exit_embeddings[final], exit_logits[final]
        teacher_labels = heads.final_exit.classifier.label_embeddings(normalized=True)
        parts: dict[str, Tensor] = {}
        if self.train_final:
            loss = F.cross_entropy(teacher_logits.float(), labels)
            if self.final_contrastive_weight > 0:
                anchors = torch.arange(teacher_labels.shape[0], device=labels.device, dtype=labels.dtype)
                rows = torch.cat([teacher_embeddings, teacher_labels.to(teacher_embeddings.dtype)], dim=0)
                loss = loss + self.final_contrastive_weight * supervised_contrastive_loss(
                    rows, torch.cat([labels, anchors]), self.temperature
                )
            parts["final"] = loss
        if self.detach_teacher or not self.train_final:
            teacher_embeddings, teacher_logits = teacher_embeddings.detach(), teacher_logits.detach()
            teacher_labels = teacher_labels.detach()
        exit_ce = teacher_logits.new_zeros(())
        distill = teacher_logits.new_zeros(())
        for layer, weight in self.exit_weights.items():
            exit_ce = exit_ce + weight * F.cross_entropy(exit_logits[layer].float(), labels)
            if self.method == "ce" or self.distill_weight == 0:
                continue
            if self.method == "kd":
                term = logit_kd_loss(exit_logits[layer], teacher_logits, self.kd_temperature)
            else:
                term = cross_layer_contrastive_loss(
                    exit_embeddings[layer],
                    heads.exit(layer).classifier.label_embeddings(normalized=True),
                    teacher_embeddings,
                    teacher_labels,
                    labels,
                    self.temperature,
                )
            distill = distill + weight * self.distill_weight * term
        if self.exit_weights:
            parts["exit_ce"] = exit_ce
            if self.method != "ce":
                parts["distill"] = distill
        if not parts:
            raise ValueError("train_final: nothing to train (train_final=False and no intermediate exits)")
        return parts

    def forward(self, sentence_features: Iterable[dict[str, Tensor]], labels: Tensor) -> dict[str, Tensor]:
        features = list(sentence_features)
        if len(features) != 1:
            raise ValueError(f"sentence_features: CrossLayerLoss takes one text column, got {len(features)}")
        output = exit_outputs(self.model, features[0])
        return self.compute_loss_from_outputs(output["exit_embeddings"], output["exit_logits"], labels)

    def get_config_dict(self) -> dict[str, Any]:
        return {
            "method": self.method,
            "distill_weight": self.distill_weight,
            "temperature": self.temperature,
            "kd_temperature": self.kd_temperature,
            "train_final": self.train_final,
            "final_contrastive_weight": self.final_contrastive_weight,
            "exit_weights": self.exit_weights,
            "detach_teacher": self.detach_teacher,
        }

    @property
    def citation(self) -> str:
        return SUPCON_CITATION


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
