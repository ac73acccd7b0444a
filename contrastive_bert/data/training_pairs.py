"""Turn registry data sets into the (anchor, positive) pairs contrastive losses train on."""

from __future__ import annotations

import datasets

from contrastive_bert.data.schemas import TASK_COLUMNS


def positive_pairs(dataset: datasets.Dataset, min_score: float = 0.8) -> datasets.Dataset:
    """(anchor, positive) pairs from a pair or retrieval split.

    ``pair-score`` rows with ``score >= min_score`` (STS-B: 4/5), ``pair-binary`` and
    ``retrieval`` rows with ``label == 1``. Returns columns ``anchor``, ``positive``.
    """
    columns = set(dataset.column_names)
    if set(TASK_COLUMNS["pair-score"]) <= columns:
        kept = dataset.filter(lambda row: row["score"] >= min_score)
        a, p = "sentence1", "sentence2"
    elif set(TASK_COLUMNS["pair-binary"]) <= columns:
        kept = dataset.filter(lambda row: row["label"] == 1)
        a, p = "sentence1", "sentence2"
    elif set(TASK_COLUMNS["retrieval"]) <= columns:
        kept = dataset.filter(lambda row: row["label"] == 1)
        a, p = "question", "answer"
    else:
        raise ValueError(f"dataset: expected a pair-score, pair-binary or retrieval split, got columns {dataset.column_names}")
    if len(kept) == 0:
        raise ValueError("dataset: no positive pairs left after filtering (lower min_score?)")
    return datasets.Dataset.from_dict({"anchor": kept[a], "positive": kept[p]})
