"""Output-directory policy: never clobber a user's run; resume from its last checkpoint."""

from __future__ import annotations

import shutil
from pathlib import Path

from transformers.trainer_utils import get_last_checkpoint

CHECKPOINTS = "checkpoints"
FINAL_MODEL = "final"
RESULTS_FILE = "results.json"


def prepare_output_dir(output_dir: str | Path, overwrite: bool = False, resume: bool = False) -> str | None:
    """Check ``output_dir`` before any work; return the checkpoint to resume from (or None).

    - new or empty folder: fine;
    - existing run and ``resume``: continue from its last checkpoint (error if it has none);
    - existing run and ``overwrite``: remove only this package's artefacts (checkpoints/, final/,
      results.json), keep anything else the user put there;
    - otherwise: ``ValueError``.
    """
    output_dir = Path(output_dir)
    if output_dir.exists() and not output_dir.is_dir():
        raise ValueError(f"output_dir: {output_dir} exists and is not a directory")
    if not output_dir.exists() or not any(output_dir.iterdir()):
        if resume:
            raise ValueError(f"resume: {output_dir} holds no run to resume")
        return None
    if resume:
        checkpoint_root = output_dir / CHECKPOINTS
        last = get_last_checkpoint(str(checkpoint_root)) if checkpoint_root.is_dir() else None
        if last is None:
            raise ValueError(f"resume: no checkpoint-* folder under {checkpoint_root}")
        return last
    if not overwrite:
        raise ValueError(
            f"output_dir: {output_dir} already exists and is not empty; pass --overwrite to replace its run "
            "or --resume to continue it"
        )
    for name in (CHECKPOINTS, FINAL_MODEL):
        shutil.rmtree(output_dir / name, ignore_errors=True)
    (output_dir / RESULTS_FILE).unlink(missing_ok=True)
    return None
