"""Stop a diverging run: a non-finite gradient norm or loss ends training at that step, before a
checkpoint of the broken weights is saved, and the runner reports it instead of saving ``final/``.

The trainer hides a NaN loss from its logs (``logging_nan_inf_filter`` replaces it with the running
mean), so the check looks at the gradients themselves, every optimizer step: a NaN/inf loss always
gives NaN/inf gradients, and so does an overflowing step.
"""

from __future__ import annotations

import logging
import math

import torch
from transformers import TrainerCallback

from contrastive_bert.training.output_dir import last_checkpoint

logger = logging.getLogger(__name__)


class TrainingDiverged(ValueError):
    """Training stopped at a non-finite loss or gradient norm (a ``ValueError``: the CLI's one-line error)."""


def gradient_norm(model: torch.nn.Module) -> float:
    """L2 norm over every parameter gradient of ``model`` (0.0 when there is none)."""
    grads = [p.grad.detach() for p in model.parameters() if p.grad is not None]
    if not grads:
        return 0.0
    return float(torch.linalg.vector_norm(torch.stack([torch.linalg.vector_norm(g.float()) for g in grads])))


class NonFiniteCallback(TrainerCallback):
    """Check the gradient norm before each optimizer step and the logged loss / grad norm; on the
    first non-finite value stop training without saving, evaluating or logging further.
    ``error()`` then gives the one-line message (step, value, last finite checkpoint)."""

    def __init__(self, checkpoint_dir: str) -> None:
        self.checkpoint_dir = checkpoint_dir
        self.step: int | None = None
        self.what = ""

    @property
    def failed(self) -> bool:
        return self.step is not None

    def _fail(self, step: int, what: str, control) -> None:
        if self.step is None:
            self.step, self.what = step, what
            logger.error("step %d: %s; stopping", step, what)
        control.should_training_stop = True
        control.should_save = control.should_evaluate = False

    def on_pre_optimizer_step(self, args, state, control, model=None, **kwargs):
        if model is not None and not self.failed:
            norm = gradient_norm(model)
            if not math.isfinite(norm):
                self._fail(state.global_step + 1, f"gradient norm is {norm}", control)
        return control

    def on_log(self, args, state, control, logs=None, **kwargs):
        for key in ("loss", "grad_norm"):
            value = (logs or {}).get(key)
            if isinstance(value, (int, float)) and not math.isfinite(value):
                self._fail(state.global_step, f"{key} is {value}", control)
        return control

    def on_step_end(self, args, state, control, **kwargs):
        if self.failed:
            control.should_training_stop = True
            control.should_save = control.should_evaluate = False
        return control

    on_epoch_end = on_step_end

    def error(self) -> TrainingDiverged:
        last = last_checkpoint(self.checkpoint_dir)
        where = f"last finite checkpoint: {last}" if last else "no checkpoint was saved before it"
        return TrainingDiverged(
            f"training: diverged at step {self.step} ({self.what}); nothing saved as final/; {where} "
            "(lower --learning-rate, set --max-grad-norm, or check --mixed-precision)"
        )
