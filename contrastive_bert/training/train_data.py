"""Build the training ``datasets.Dataset`` a loss needs from registry data set names."""

from __future__ import annotations

import datasets

from contrastive_bert.data import get_spec, load_dataset, positive_pairs

_COMPATIBLE = {
    "pairs": ("pair-score", "pair-binary", "retrieval"),
    "scored_pairs": ("pair-score", "pair-binary"),
    "labelled": ("classification",),
}


def check_train_datasets(names: list[str], data_format: str) -> None:
    """Fail early if a data set is unknown or cannot give ``data_format`` rows."""
    for name in names:
        spec = get_spec(name)
        if spec.task_type not in _COMPATIBLE[data_format]:
            raise ValueError(
                f"datasets: {name!r} is a {spec.task_type} data set, but this loss trains on {data_format} "
                f"(from {', '.join(_COMPATIBLE[data_format])} data sets)"
            )
    if data_format == "labelled" and len(names) != 1:
        raise ValueError(f"datasets: a classification loss trains on exactly one labelled data set, got {names}")


def build_train_dataset(
    names: list[str],
    data_format: str,
    data_dir: str | None = None,
    min_pair_score: float = 0.8,
    max_samples: int | None = None,
    seed: int = 42,
) -> datasets.Dataset:
    """Training rows in ``data_format`` from the ``train`` splits of ``names``, shuffled with ``seed``
    and cut to ``max_samples``."""
    check_train_datasets(names, data_format)
    parts = []
    for name in names:
        split = load_dataset(name, split="train", data_dir=data_dir)
        if data_format == "pairs":
            parts.append(positive_pairs(split, min_score=min_pair_score))
        elif data_format == "scored_pairs":
            if "label" in split.column_names:
                split = split.map(lambda row: {"score": float(row["label"])}).remove_columns("label")
            parts.append(split.select_columns(["sentence1", "sentence2", "score"]))
        else:
            parts.append(split.select_columns(["text", "label"]))
    dataset = datasets.concatenate_datasets(parts).shuffle(seed=seed)
    if max_samples is not None:
        dataset = dataset.select(range(min(max_samples, len(dataset))))
    return dataset
