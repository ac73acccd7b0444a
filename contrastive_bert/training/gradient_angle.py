"""Trainer callback that logs ACL-Grad's per-step gradient angle (CE vs contrastive)."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

from transformers import TrainerCallback

__all__ = ["GradientAngleCallback"]


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
            self.output_path.write_text(json.dumps(self.loss.angle_history, indent=1))
