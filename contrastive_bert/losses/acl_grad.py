"""ACL-Grad's building blocks: the angle between two gradients (DDP-reduced), the optimizer-step
test under gradient accumulation, and the trainer callback that logs the per-step angles."""

from __future__ import annotations

import json
import logging
import math
import re
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import torch
from torch import Tensor, nn
from transformers import TrainerCallback

from contrastive_bert.losses.optimizer_step import is_optimizer_sync_step
from contrastive_bert.models import unwrap_model

logger = logging.getLogger(__name__)

__all__ = ["ANGLE_PARAMETERS", "GradientAngleCallback", "gating_parameters", "gradient_angle", "is_optimizer_sync_step"]

ANGLE_PARAMETERS = ("all", "head_last_layer")
_LAYER_INDEX = re.compile(r"\.layer\.(\d+)\.")


def gating_parameters(model: nn.Module, scope: str = "all") -> list[nn.Parameter]:
    """Trainable parameters the gradient angle is taken over.

    ``"all"``: every trainable parameter. ``"head_last_layer"``: those of the modules on top of
    the encoder (module 0: label head, dense layers) plus the encoder's last transformer layer
    (the highest ``.layer.<i>.`` in the parameter names: BERT, RoBERTa, DistilBERT, MPNet), so the
    per-term gradients need a backward through one layer only.
    """
    if scope not in ANGLE_PARAMETERS:
        raise ValueError(f"angle_parameters: expected one of {ANGLE_PARAMETERS}, got {scope!r}")
    named = [(name, p) for name, p in unwrap_model(model).named_parameters() if p.requires_grad]
    if scope == "all":
        return [p for _, p in named]
    layers = [int(m.group(1)) for name, _ in named if name.startswith("0.") and (m := _LAYER_INDEX.search(name))]
    last = f".layer.{max(layers)}." if layers else None
    return [p for name, p in named if not name.startswith("0.") or (last is not None and last in name)]


def gradient_angle(
    grads_a: Sequence[Tensor | None], grads_b: Sequence[Tensor | None], reduce_distributed: bool = True
) -> tuple[float, float, float, float]:
    """Angle in degrees between two gradients over the parameters where both exist.

    Args:
        grads_a, grads_b: per-parameter gradients (same order); None = no gradient.
        reduce_distributed: sum dot product and squared norms over ranks (DDP) first.

    Returns:
        (angle_degrees, cosine, |a|, |b|); the angle is nan if a norm is 0 or non-finite.
    """
    stats = torch.zeros(3, dtype=torch.float64)
    device = None
    for a, b in zip(grads_a, grads_b):
        if a is None or b is None:
            continue
        a64, b64 = a.detach().double().flatten(), b.detach().double().flatten()
        if device is None:
            device = a64.device
            stats = stats.to(device)
        stats += torch.stack([a64 @ b64, a64 @ a64, b64 @ b64])
    if reduce_distributed and torch.distributed.is_available() and torch.distributed.is_initialized():
        if torch.distributed.get_world_size() > 1:
            torch.distributed.all_reduce(stats, op=torch.distributed.ReduceOp.SUM)
    dot, norm_a_sq, norm_b_sq = (float(x) for x in stats.cpu())
    norm_a, norm_b = math.sqrt(max(norm_a_sq, 0.0)), math.sqrt(max(norm_b_sq, 0.0))
    if not (norm_a > 0 and norm_b > 0) or not math.isfinite(norm_a * norm_b) or not math.isfinite(dot):
        return float("nan"), float("nan"), norm_a, norm_b
    cosine = max(-1.0, min(1.0, dot / (norm_a * norm_b)))
    return math.degrees(math.acos(cosine)), cosine, norm_a, norm_b


class GradientAngleCallback(TrainerCallback):
    """Adds ``acl_grad_angle`` (mean over the steps since the last log, degrees), ``acl_grad_angle_last``
    and ``acl_gated_fraction`` to the trainer logs, tags each ``loss.angle_history`` entry with the
    trainer's ``global_step``, and writes the whole history as JSON at the end if ``output_path`` is set.

    Args:
        loss: an ``ACLEmbedLoss`` (anything with an ``angle_history`` list of dicts).
        output_path: optional JSON file for the per-step history.
    """

    def __init__(self, loss: Any, output_path: str | Path | None = None) -> None:
        if not hasattr(loss, "angle_history"):
            raise ValueError("loss: expected an ACLEmbedLoss with an angle_history")
        self.loss = loss
        self.output_path = Path(output_path) if output_path is not None else None
        self._logged_up_to = 0

    def on_step_end(self, args, state, control, **kwargs):
        for entry in self.loss.angle_history:
            entry.setdefault("global_step", state.global_step)

    def summary_since_last_log(self) -> dict[str, float]:
        """Mean angle, last angle and fraction of gated steps over the entries not logged yet."""
        entries = self.loss.angle_history[self._logged_up_to :]
        self._logged_up_to = len(self.loss.angle_history)
        if not entries:
            return {}
        angles = [e["angle"] for e in entries if not math.isnan(e["angle"])]
        summary = {"acl_gated_fraction": sum(bool(e["gated"]) for e in entries) / len(entries)}
        if angles:
            summary["acl_grad_angle"] = sum(angles) / len(angles)
            summary["acl_grad_angle_last"] = angles[-1]
        return summary

    def on_log(self, args, state, control, logs=None, **kwargs):
        if logs is None or "loss" not in logs:
            return
        summary = self.summary_since_last_log()
        logs.update(summary)
        if state.log_history and state.log_history[-1].get("step") == state.global_step:
            state.log_history[-1].update(summary)

    def on_train_end(self, args, state, control, **kwargs):
        if self.output_path is not None:
            self.output_path.parent.mkdir(parents=True, exist_ok=True)
            self.output_path.write_text(json.dumps(self.loss.angle_history, indent=1, allow_nan=False))
