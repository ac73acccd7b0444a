"""Recipe defaults derived from the training data: what a run is scored on, how long its texts may
be and where it is written, when the recipe file and the flags leave them out.

- a retrieval set (``scifact``, ``nfcorpus``, a BEIR folder) is its own dev task (nDCG@10 on its
  validation split: the published one or the package's carved one) and eval task (test split),
  at the model's full length (``max_seq_length: None``; the runner records the model's number);
- a labelled set with held-out rows (a registered one) is scored by its own accuracy;
- pair sets (and a single labelled file, whose rows are every split) keep STS-B;
- ``output_dir`` is ``output/<data>-<loss>``, e.g. ``output/scifact-mnrl``;
- retrieval sets trained by a loss on (anchor, positive[, negatives]) rows get one hard negative
  per pair mined from their own corpus (``corpus_negatives: {num_negatives: 1, fallback: pairs}``):
  on SciFact mined rows beat the plain pairs on dev and test nDCG@10
  (``eval/results/retrieval_quality.json``: ``scifact.methods.mnrl_corpus_mined`` against
  ``scifact.methods.mnrl``, each at its dev-chosen learning rate; docs/results.md#retrieval quotes
  them); where the corpus is too small to mine, the run trains on the plain pairs and says so;
  with MNRL (the default loss) they also train on the schedule the retrieval benchmark chose on
  SciFact's dev split for its recommended recipe (3 epochs; the learning rate of
  ``scifact.methods.mnrl_corpus_mined.options``, picked by
  ``chosen_on_dev.dev_ndcg_at_10_by_config`` in the same file), :data:`RETRIEVAL_SCHEDULE`.

Nothing here loads data: the task types come from the data sets' specs.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from pathlib import Path
from typing import Any

# The recipe fields this module derives (each only when the recipe leaves it out).
DERIVED_FIELDS = ("dev_task", "eval_tasks", "max_seq_length", "output_dir", "corpus_negatives", "learning_rate", "epochs")
RETRIEVAL_NEGATIVES = {"num_negatives": 1, "fallback": "pairs"}
# MNRL on mined rows: the dev choice of eval/bench_retrieval.py's recommended method (scripts/recipes/
# scifact_best.yaml); tests/test_recipes_follow_retrieval_verdict.py keeps the two equal.
RETRIEVAL_LOSS = "mnrl"
RETRIEVAL_SCHEDULE = {"learning_rate": 5e-5, "epochs": 3}
PAIR_DEV_TASK = "stsb"
PAIR_MAX_SEQ_LENGTH = 128
_OWN_EVALUATION = ("retrieval", "classification")


def _names(datasets: Any) -> list[str]:
    if isinstance(datasets, str):
        return [name.strip() for name in datasets.split(",") if name.strip()]
    return [str(name) for name in datasets or []]


def data_label(name: str) -> str:
    """A data set as part of a folder name: a registry name as is, a file by its stem, a folder by its name."""
    path = Path(name)
    label = path.stem if path.suffix else (path.name or name)
    return re.sub(r"[^A-Za-z0-9._+-]+", "_", label).strip("._") or "data"


def default_output_dir(datasets: Sequence[str], loss: str) -> str:
    """``output/<data>-<loss>``: ``output/scifact-mnrl``, ``output/stsb+mrpc-cosent``."""
    return f"output/{'+'.join(data_label(name) for name in datasets)}-{data_label(loss)}"


def _held_out_splits(spec) -> tuple[bool, bool]:
    """(has a dev split to score, has a test split to score) for a retrieval or labelled set."""
    files = dict(spec.files or {})
    if files and len({files[s] for s in files if s not in ("corpus", "queries")}) <= 1 and spec.task_type != "retrieval":
        return False, False  # one file is every split (a user's labelled file): nothing is held out
    splits = set(files) or set(spec.hub_splits or ()) or {"train", "validation", "test"}
    dev = "validation" in splits or ("train" in splits and spec.dev_share > 0)
    return dev, "test" in splits


def derived_defaults(datasets: Any, loss: str) -> dict[str, Any]:
    """The values of :data:`DERIVED_FIELDS` that fit ``datasets`` trained with ``loss``. A data set
    that cannot be resolved derives nothing but the folder (the recipe check names it later)."""
    from contrastive_bert.data import get_dataset

    names = _names(datasets)
    values: dict[str, Any] = {"output_dir": default_output_dir(names, loss)}
    try:
        specs = [get_dataset(name) for name in names]
    except ValueError:
        return values
    dev_tasks, test_tasks, pair_sets = [], [], False
    for name, spec in zip(names, specs):
        if spec.task_type in _OWN_EVALUATION:
            dev, test = _held_out_splits(spec)
            dev_tasks += [name] if dev else []
            test_tasks += [name] if test else []
        else:
            pair_sets = True
    if not dev_tasks and not test_tasks:
        values.update(dev_task=PAIR_DEV_TASK, eval_tasks=[PAIR_DEV_TASK], max_seq_length=PAIR_MAX_SEQ_LENGTH)
        return values
    values["dev_task"] = dev_tasks[0] if dev_tasks else None
    values["eval_tasks"] = test_tasks + ([PAIR_DEV_TASK] if pair_sets and PAIR_DEV_TASK not in test_tasks else [])
    retrieval = any(spec.task_type == "retrieval" for spec in specs)
    values["max_seq_length"] = None if retrieval else PAIR_MAX_SEQ_LENGTH
    if all(spec.task_type == "retrieval" for spec in specs) and _trains_on_pairs(loss):
        values["corpus_negatives"] = dict(RETRIEVAL_NEGATIVES)
        if loss == RETRIEVAL_LOSS:
            values.update(RETRIEVAL_SCHEDULE)
    return values


def _trains_on_pairs(loss: str) -> bool:
    from contrastive_bert.training.losses_registry import LOSSES

    entry = LOSSES.get(loss)
    return entry is not None and entry.data_format == "pairs"
