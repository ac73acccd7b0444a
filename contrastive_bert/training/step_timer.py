"""Wall-clock seconds of every optimizer step of a ``SentenceTransformerTrainer`` run, as a callback.

The median of these is robust to a loaded machine and to occasional audit steps, unlike the total
training time (which also holds data loading and evaluation)."""

from __future__ import annotations

import time

from transformers import TrainerCallback


class StepTimer(TrainerCallback):
    """``durations``: seconds of each optimizer step, in order (CUDA work synchronised at the end
    of a step when the model runs on a GPU, so a step is not credited with queued kernels)."""

    def __init__(self) -> None:
        self.durations: list[float] = []
        self._start = 0.0

    @staticmethod
    def _synchronize() -> None:
        import torch

        if torch.cuda.is_available() and torch.cuda.is_initialized():
            torch.cuda.synchronize()

    def on_step_begin(self, args, state, control, **kwargs):
        self._synchronize()
        self._start = time.perf_counter()

    def on_step_end(self, args, state, control, **kwargs):
        self._synchronize()
        self.durations.append(time.perf_counter() - self._start)

    def median(self) -> float | None:
        """Median seconds per step (None before the first step)."""
        import statistics

        return statistics.median(self.durations) if self.durations else None
