"""Make the embedding queue (and momentum encoder) survive checkpoints and ``--resume``.

The sentence-transformers trainer saves only the model: a loss-owned queue is silently lost on
resume. :class:`QueueCheckpointCallback` writes ``queue_state.pt`` into every
``checkpoint-<step>`` folder and reads it back when training resumes from one.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import torch
from torch import nn
from transformers import TrainerCallback, TrainerControl, TrainerState, TrainingArguments

logger = logging.getLogger(__name__)

__all__ = ["QUEUE_STATE_NAME", "QueueCheckpointCallback", "load_queue_state", "queue_callbacks", "save_queue_state"]

QUEUE_STATE_NAME = "queue_state.pt"


def _queue_losses(loss: nn.Module | dict[str, nn.Module] | Iterable[nn.Module]) -> dict[str, nn.Module]:
    """Every module with ``queue_state_dict`` inside ``loss`` (a loss, a dict of losses, or wrappers)."""
    roots = loss.items() if isinstance(loss, dict) else ([("", loss)] if isinstance(loss, nn.Module) else enumerate(loss))
    found: dict[str, nn.Module] = {}
    for root_name, root in roots:
        for name, module in root.named_modules():
            if hasattr(module, "queue_state_dict") and hasattr(module, "load_queue_state_dict"):
                found[".".join(p for p in (str(root_name), name) if p)] = module
    if not found:
        raise ValueError("loss: no QueueInfoNCELoss (nothing with queue_state_dict) found to checkpoint")
    return found


def save_queue_state(loss: nn.Module | dict[str, nn.Module], directory: str | os.PathLike) -> Path:
    """Write the queue state(s) of ``loss`` to ``directory/queue_state.pt``."""
    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / QUEUE_STATE_NAME
    torch.save({name: module.queue_state_dict() for name, module in _queue_losses(loss).items()}, path)
    return path


def load_queue_state(loss: nn.Module | dict[str, nn.Module], directory: str | os.PathLike) -> bool:
    """Restore ``directory/queue_state.pt`` into ``loss``; False when the file does not exist."""
    path = Path(directory) / QUEUE_STATE_NAME
    if not path.is_file():
        return False
    saved: dict[str, Any] = torch.load(path, map_location="cpu", weights_only=False)
    modules = _queue_losses(loss)
    if len(modules) == 1 and len(saved) == 1:  # one queue each side: its name may differ (a loss wrapped since)
        saved = {next(iter(modules)): next(iter(saved.values()))}
    for name, module in modules.items():
        if name not in saved:
            raise ValueError(f"checkpoint: {path} has no queue state for loss {name!r} (has {sorted(saved)})")
        module.load_queue_state_dict(saved[name])
    return True


class QueueCheckpointCallback(TrainerCallback):
    """Save the queue with each checkpoint, restore it on resume, and tell a lazily sized queue
    the training-set size (for the seed's ``min(65536, 4 * N / batch)`` rule).

    Args:
        loss: the QueueInfoNCELoss (or a dict of losses) given to the trainer.
        resume_from_checkpoint: the folder training resumes from; by default
            ``<output_dir>/checkpoint-<global_step>`` when the trainer starts at a step > 0.
    """

    def __init__(self, loss: nn.Module | dict[str, nn.Module], resume_from_checkpoint: str | None = None) -> None:
        self.losses = _queue_losses(loss)
        self.loss = loss
        self.resume_from_checkpoint = resume_from_checkpoint
        self.restored_from: str | None = None

    def on_train_begin(self, args: TrainingArguments, state: TrainerState, control: TrainerControl, **kwargs):
        dataloader = kwargs.get("train_dataloader")
        for module in self.losses.values():
            if getattr(module, "queue", 1) is None and getattr(module, "train_dataset_size", 1) is None:
                try:
                    module.train_dataset_size = len(dataloader.dataset)
                except (AttributeError, TypeError):
                    pass
        checkpoint = self.resume_from_checkpoint
        if checkpoint is None and state.global_step > 0:
            checkpoint = os.path.join(args.output_dir, f"checkpoint-{state.global_step}")
        if checkpoint is None:
            return
        if load_queue_state(self.loss, checkpoint):
            self.restored_from = str(checkpoint)
            logger.info("restored the embedding queue from %s", checkpoint)
        else:
            logger.warning("resuming from %s, which has no %s: the queue starts empty", checkpoint, QUEUE_STATE_NAME)

    def on_save(self, args: TrainingArguments, state: TrainerState, control: TrainerControl, **kwargs):
        if not state.is_world_process_zero:
            return
        directory = os.path.join(args.output_dir, f"checkpoint-{state.global_step}")
        if os.path.isdir(directory):
            save_queue_state(self.loss, directory)


def queue_callbacks(loss: nn.Module | dict[str, nn.Module], resume_from_checkpoint: str | None = None) -> list[TrainerCallback]:
    """``[QueueCheckpointCallback(loss)]`` when ``loss`` holds a queue, else ``[]`` (for generic runners)."""
    try:
        return [QueueCheckpointCallback(loss, resume_from_checkpoint)]
    except ValueError:
        return []
