"""Output-folder policy: never clobber a user's run; resume from its last checkpoint; valid JSON only.

Checking (:func:`prepare_output_dir`) writes and removes nothing, so a run that fails validation
leaves the folder as it was; :func:`clear_run` removes this package's artefacts of an earlier run
(``--overwrite``) once the new run has loaded its data and model.
"""

from __future__ import annotations

import json
import logging
import math
import re
import shutil
from pathlib import Path
from typing import Any

from contrastive_bert.training.recipe import RECIPE_FILE

logger = logging.getLogger(__name__)

CHECKPOINTS = "checkpoints"
FINAL_MODEL = "final"
RESULTS_FILE = "results.json"
SCORES_BEFORE_FILE = "scores_before.json"
MINED_ROWS = "mined"  # corpus negatives, kept once mined (training.corpus_negatives) for --resume
# Everything a run of this package writes into its output folder (stage-* from two-stage training).
ARTEFACT_FILES = (RECIPE_FILE, SCORES_BEFORE_FILE, RESULTS_FILE)
ARTEFACT_FOLDERS = (CHECKPOINTS, FINAL_MODEL, MINED_ROWS)
STAGE_FOLDER = re.compile(r"stage-[\w.-]+")
_CHECKPOINT = re.compile(r"checkpoint-(\d+)")


def last_checkpoint(folder: str | Path) -> str | None:
    """The ``checkpoint-<step>`` folder with the highest step under ``folder`` (None if none)."""
    folder = Path(folder)
    if not folder.is_dir():
        return None
    steps = [(int(m.group(1)), p) for p in folder.iterdir() if p.is_dir() and (m := _CHECKPOINT.fullmatch(p.name))]
    return str(max(steps)[1]) if steps else None


def run_artefacts(output_dir: str | Path) -> list[Path]:
    """The files and folders of ``output_dir`` that a run of this package wrote."""
    output_dir = Path(output_dir)
    if not output_dir.is_dir():
        return []
    return [p for p in sorted(output_dir.iterdir())
            if (p.is_file() and p.name in ARTEFACT_FILES)
            or (p.is_dir() and (p.name in ARTEFACT_FOLDERS or STAGE_FOLDER.fullmatch(p.name)))]


def prepare_output_dir(output_dir: str | Path, overwrite: bool = False, resume: bool = False) -> str | None:
    """Check ``output_dir`` before any work; return the checkpoint to resume from (or None).
    Writes and removes nothing.

    - new or empty folder: fine;
    - existing run and ``resume``: continue from its last checkpoint; a run stopped before its
      first checkpoint only when it mines corpus negatives (None: train from step 0 on the rows
      it mined, or mine again); otherwise an error;
    - existing folder and ``overwrite``: fine (:func:`clear_run` later removes only this package's
      artefacts, keeping anything else the user put there);
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
        last = last_checkpoint(checkpoint_root)
        if last is None and not resumable_before_checkpoint(output_dir):
            raise ValueError(f"resume: no checkpoint-* folder under {checkpoint_root}")
        return last
    if not overwrite:
        raise ValueError(
            f"output_dir: {output_dir} already exists and is not empty; pass --overwrite to replace its run "
            "or --resume to continue it"
        )
    return None


def resumable_before_checkpoint(output_dir: str | Path) -> bool:
    """Whether ``output_dir`` holds a run recorded before it mined corpus negatives (its recipe
    and ``mined/``): ``--resume`` continues it even without a checkpoint, reusing what was mined."""
    output_dir = Path(output_dir)
    return (output_dir / RECIPE_FILE).is_file() and (output_dir / MINED_ROWS).is_dir()


def clear_run(output_dir: str | Path) -> list[Path]:
    """Remove this package's artefacts of an earlier run from ``output_dir`` (``--overwrite``)."""
    removed = run_artefacts(output_dir)
    for path in removed:
        shutil.rmtree(path) if path.is_dir() else path.unlink()
    if removed:
        logger.info("overwrite: removed %s", ", ".join(p.name for p in removed))
    return removed


def finite_json(value: Any, where: str = "") -> Any:
    """``value`` with every NaN/inf float replaced by None (logged): JSON has no NaN."""
    if isinstance(value, float) and not math.isfinite(value):
        logger.warning("%s: %s is not a finite number; written as null", where or "value", value)
        return None
    if isinstance(value, dict):
        return {k: finite_json(v, f"{where}.{k}" if where else str(k)) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [finite_json(v, f"{where}[{i}]") for i, v in enumerate(value)]
    return value


def write_json(path: str | Path, payload: Any) -> Path:
    """Write ``payload`` as valid JSON (``allow_nan=False``; non-finite floats become null)."""
    path = Path(path)
    path.write_text(json.dumps(finite_json(payload, path.name), indent=2, allow_nan=False) + "\n", encoding="utf-8")
    return path
