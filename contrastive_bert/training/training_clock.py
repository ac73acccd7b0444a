"""Training seconds that survive ``--resume``.

The trainer's own runtime restarts with each process, so a run stopped by the end of a session and
continued with ``--resume`` would report only its last part. :class:`TrainingClock` writes the
seconds trained so far into every ``checkpoint-<step>`` folder and, resuming from one, starts from
them: ``results.json``'s ``train_seconds`` is then the time the whole run's steps took (the work
lost after the last checkpoint and redone is counted once, as it was redone).
"""

from __future__ import annotations

import json
import logging
import os
import time
from pathlib import Path

from transformers import TrainerCallback, TrainerControl, TrainerState, TrainingArguments

logger = logging.getLogger(__name__)

__all__ = ["CLOCK_FILE", "TrainingClock", "read_clock"]

CLOCK_FILE = "training_clock.json"


def read_clock(checkpoint: str | os.PathLike) -> float | None:
    """The training seconds ``checkpoint/training_clock.json`` recorded; None where there is none (a
    checkpoint written before the clock existed, or by another trainer)."""
    path = Path(checkpoint) / CLOCK_FILE
    if not path.is_file():
        return None
    try:
        seconds = json.loads(path.read_text(encoding="utf-8"))["train_seconds"]
    except (ValueError, KeyError, TypeError):
        logger.warning("%s is unreadable: this run's training seconds count from the resume on", path)
        return None
    return float(seconds)


class TrainingClock(TrainerCallback):
    """Seconds spent training, carried across resumes.

    Args:
        resume_from_checkpoint: the checkpoint folder the run continues from (None: a fresh run).

    ``carried``: the seconds that checkpoint recorded (0.0 for a fresh run; None when the checkpoint
    has no clock, and then :meth:`seconds` covers this process only). The clock runs from
    construction: build it just before the trainer.
    """

    def __init__(self, resume_from_checkpoint: str | os.PathLike | None = None) -> None:
        self.carried: float | None = 0.0 if resume_from_checkpoint is None else read_clock(resume_from_checkpoint)
        self._start = time.perf_counter()

    def seconds(self) -> float:
        """Training seconds so far: those carried over plus this process's."""
        return (self.carried or 0.0) + time.perf_counter() - self._start

    def on_save(self, args: TrainingArguments, state: TrainerState, control: TrainerControl, **kwargs):
        if not state.is_world_process_zero or self.carried is None:  # an unknown start: write nothing misleading
            return
        directory = Path(args.output_dir) / f"checkpoint-{state.global_step}"
        if directory.is_dir():
            (directory / CLOCK_FILE).write_text(json.dumps({"train_seconds": self.seconds()}), encoding="utf-8")
