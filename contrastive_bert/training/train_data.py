"""Build the training ``datasets.Dataset`` a loss needs from data sets (registry names or data files).

Each loss trains on one data format (``losses_registry.DATA_FORMATS``); a data set can give it
when its task type is listed for that format below.
"""

from __future__ import annotations

from collections.abc import Callable

import datasets

from contrastive_bert.data import get_dataset, labelled_negative_triplets, load_dataset, positive_pairs, scored_pairs
from contrastive_bert.data.training_pairs import retrieval_pairs

_COMPATIBLE = {
    "pairs": ("pair-score", "pair-binary", "reranking", "retrieval", "pairs", "triplets"),
    "scored_pairs": ("pair-score", "pair-binary", "retrieval"),
    "labelled": ("classification",),
}


def check_train_datasets(names: list[str], data_format: str, labelled_negatives: bool = False) -> None:
    """Fail early if a data set is unknown, unreadable or cannot give ``data_format`` rows."""
    specs = [get_dataset(name) for name in names]
    if labelled_negatives:
        if data_format != "pairs":
            raise ValueError(f"labelled_negatives: only for losses that train on pairs, this one trains on {data_format}")
        others = [spec.name for spec in specs if spec.task_type != "reranking"]
        if others:
            raise ValueError(f"labelled_negatives: needs reranking data sets with labelled wrong candidates, {others} are not")
    for spec in specs:
        if spec.task_type not in _COMPATIBLE[data_format]:
            raise ValueError(
                f"datasets: {spec.name!r} is a {spec.task_type} data set, but this loss trains on {data_format} "
                f"(from {', '.join(_COMPATIBLE[data_format])} data sets)"
            )
    for spec in specs:
        if spec.task_type == "retrieval" and spec.path is not None and "train" not in spec.files:
            judged = ", ".join(f for s, f in spec.files.items() if s not in ("corpus", "queries"))
            raise ValueError(f"datasets: {spec.name} has no qrels/train.tsv, the judgements training pairs come from "
                             f"(it has {judged})")
    if data_format == "labelled" and len(names) != 1:
        raise ValueError(f"datasets: a classification loss trains on exactly one labelled data set, got {[s.name for s in specs]}")
    with_negatives = [spec.name for spec in specs if spec.task_type == "triplets"]
    if with_negatives and len(with_negatives) != len(specs):
        raise ValueError(
            f"datasets: {with_negatives} carry hard negatives and {[s.name for s in specs if s.task_type != 'triplets']} do not; "
            "train on data sets of one kind (rows of one training set need the same columns)"
        )


class RunData:
    """The data sets of one run, each read and split once: ``run_data[name]`` is a retrieval set's
    :class:`~contrastive_bert.data.beir.RetrievalData` (its corpus as dicts, built once for the
    training pairs, every dev evaluation and the scores before and after) or another set's
    ``DatasetDict``."""

    def __init__(self, data_dir: str | None = None) -> None:
        self.data_dir = data_dir
        self._loaded: dict[str, object] = {}

    def __getitem__(self, name: str):
        key = str(name)
        if key not in self._loaded:
            loaded = load_dataset(name, data_dir=self.data_dir)
            if get_dataset(name).task_type == "retrieval":
                from contrastive_bert.data.beir import RetrievalData

                loaded = RetrievalData.from_splits(loaded)
            self._loaded[key] = loaded
        return self._loaded[key]


def _rows(split: datasets.Dataset, data_format: str, min_pair_score: float, labelled_negatives: bool = False) -> datasets.Dataset:
    if labelled_negatives:
        return labelled_negative_triplets(split)
    if data_format == "pairs":
        return positive_pairs(split, min_score=min_pair_score)
    if data_format == "scored_pairs":
        return scored_pairs(split)
    return split.select_columns(["text", "label"])


def build_train_dataset(
    names: list[str],
    data_format: str,
    data_dir: str | None = None,
    min_pair_score: float = 0.8,
    max_samples: int | None = None,
    seed: int = 42,
    labelled_negatives: bool = False,
    load: Callable[[str], object] | None = None,
) -> datasets.Dataset:
    """Training rows in ``data_format`` from the ``train`` splits of ``names``, shuffled with ``seed``
    and cut to ``max_samples``. ``load(name)``: the loaded data set (a :class:`RunData` shares one
    loading with the run's evaluations); default: :func:`~contrastive_bert.data.load_dataset`. Triplets files keep their negative columns (MNRL and the queue loss
    use them as hard negatives); retrieval data sets give (query, relevant document) pairs of their
    train judgements, at most 4 per query (:func:`~contrastive_bert.data.training_pairs.retrieval_pairs`);
    ``labelled_negatives`` makes triplets of reranking data sets, each
    correct answer with a labelled wrong candidate of its question
    (:func:`~contrastive_bert.data.training_pairs.labelled_negative_triplets`)."""
    check_train_datasets(names, data_format, labelled_negatives)
    parts = []
    for name in names:
        loaded = load(name) if load is not None else load_dataset(name, data_dir=data_dir)
        if get_dataset(name).task_type == "retrieval":  # (query, relevant document) pairs of the train judgements
            parts.append(retrieval_pairs(loaded, "train", scored=data_format == "scored_pairs", seed=seed))
        else:
            if "train" not in loaded:
                raise ValueError(f"split: data set {get_dataset(name).name!r} has splits {list(loaded)}, not 'train'")
            parts.append(_rows(loaded["train"], data_format, min_pair_score, labelled_negatives))
    columns = {get_dataset(name).name: part.column_names for name, part in zip(names, parts)}
    if len({tuple(c) for c in columns.values()}) > 1:
        raise ValueError(f"datasets: the training rows of these data sets have different columns: {columns}")
    dataset = datasets.concatenate_datasets(parts).shuffle(seed=seed)
    if max_samples is not None:
        dataset = dataset.select(range(min(max_samples, len(dataset))))
    return dataset
