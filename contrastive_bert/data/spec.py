"""A data set as one declarative object, in the style of mteb's ``TaskMetadata``.

Everything the package needs to know about a data set lives in its :class:`DatasetSpec`: where
its files are and how to read them, its hub equivalent, its schema (task type), label names and
main metric. Loaders, training-data builders, evaluators and the mteb wrappers read these fields;
none of them switches on a data set's name.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from contrastive_bert.data.schemas import check_task_type

# The score our evaluator reports as ``main_score`` for each task type (pairs and triplets are
# training rows only).
DEFAULT_MAIN_SCORE: dict[str, str | None] = {
    "pair-score": "cosine_spearman",
    "pair-binary": "cosine_spearman",
    "classification": "accuracy",
    "reranking": "mrr",
    "retrieval": "ndcg_at_10",
    "pairs": None,
    "triplets": None,
}


@dataclass(frozen=True)
class MtebCard:
    """How a data set appears as a local mteb task (fields of mteb's ``TaskMetadata``).

    Attributes:
        task_name: the mteb task name, e.g. ``"LocalSTSBenchmark"``.
        stock_task: the stock mteb task over the same data (used with ``online=True``), if any.
        date: ``(first, last)`` ISO dates of the data's creation.
        domains: mteb domains, e.g. ``("News", "Written")``.
        samples_per_label: classification only: the training rows per label of each mteb experiment.
        eval_langs: BCP-47 style language-script codes.
    """

    task_name: str
    stock_task: str | None = None
    date: tuple[str, str] | None = None
    domains: tuple[str, ...] = ("Written",)
    samples_per_label: int | None = None
    eval_langs: tuple[str, ...] = ("eng-Latn",)


@dataclass(frozen=True)
class DatasetSpec:
    """One data set.

    Attributes:
        name: the registry name (``--datasets``/``--tasks``/``--dataset`` on the CLI).
        task_type: the schema of its splits: ``pair-score``, ``pair-binary``, ``classification``
            (alias ``labelled``), ``retrieval``, ``pairs`` or ``triplets``
            (:mod:`contrastive_bert.data.schemas`).
        description: one line on what the data is.
        files: split -> file name inside the data set's folder (several splits may name one file).
        read_file: ``read_file(path) -> {column: list}``: parses one of ``files`` in its original
            format; column names are mapped through ``columns``.
        folder: the folder under the data root (default: ``name``).
        path: a fixed folder holding ``files`` (data sets made from user files); when set, the
            data root is not used.
        columns: source column -> schema column, applied to local files' and the hub's rows.
        label_names: classification: the label set in id order; if None, ``read_label_names(folder)``
            gives it, else the sorted distinct labels (numeric order for integers).
        read_label_names: see ``label_names``.
        hub_id, hub_config: the Hugging Face hub equivalent (``datasets.load_dataset(hub_id, hub_config)``).
        hub_splits: our split -> hub split (default: train/validation/test as present).
        main_score: the metric our evaluator reports as ``main_score`` (default by task type).
        score_scale: pair-score: stored score = original gold score / ``score_scale``.
        reference: a URL (paper or source).
        licence: the data's licence as its publishers state it (for the data card).
        citation: a BibTeX entry for the data set's paper (for the data card).
        hub_revision: the pinned hub revision (a commit sha, so the rows never move under a
            result; a branch such as ``refs/convert/parquet`` moves) that ``hub_id`` loads; None: the hub's default branch.
        mteb: how the data set appears as a local mteb task; None: not offered to mteb.
        dev_share: the share of train held out as the ``validation`` split when the data set has
            none (:mod:`contrastive_bert.data.dev_split`: stratified by label for classification,
            by query for retrieval); 0 keeps train whole.
        dev_seed: the seed of that hold-out (fixed, so every consumer sees the same split).
    """

    name: str
    task_type: str
    description: str
    files: Mapping[str, str] = field(default_factory=dict)
    read_file: Callable[[Path], dict[str, list]] | None = None
    folder: str | None = None
    path: Path | None = None
    columns: Mapping[str, str] = field(default_factory=dict)
    label_names: Sequence[str] | None = None
    read_label_names: Callable[[Path], Sequence[str]] | None = None
    hub_id: str | None = None
    hub_config: str | None = None
    hub_splits: Mapping[str, str] | None = None
    main_score: str | None = None
    score_scale: float = 1.0
    reference: str | None = None
    licence: str | None = None
    citation: str | None = None
    hub_revision: str | None = None
    mteb: MtebCard | None = None
    dev_share: float = 0.1
    dev_seed: int = 0

    def __post_init__(self) -> None:
        if not isinstance(self.name, str) or not self.name.strip():
            raise ValueError(f"name: expected a non-empty string, got {self.name!r}")
        object.__setattr__(self, "task_type", check_task_type(self.task_type))
        if not self.files and self.hub_id is None:
            raise ValueError(f"{self.name}: give local files (files=, read_file=) or a hub_id")
        if self.files and not callable(self.read_file):
            raise ValueError(f"{self.name}: read_file: expected a function reading one file, got {self.read_file!r}")
        if self.folder is None:
            object.__setattr__(self, "folder", self.name)
        if self.main_score is None:
            object.__setattr__(self, "main_score", DEFAULT_MAIN_SCORE[self.task_type])
        if self.label_names is not None:
            object.__setattr__(self, "label_names", tuple(self.label_names))
        if isinstance(self.dev_share, bool) or not isinstance(self.dev_share, (int, float)) or not 0 <= self.dev_share < 1:
            raise ValueError(f"{self.name}: dev_share: expected a number in [0, 1), got {self.dev_share!r}")
        if self.score_scale <= 0:
            raise ValueError(f"{self.name}: score_scale: expected a positive number, got {self.score_scale}")

    @property
    def splits(self) -> tuple[str, ...]:
        """The local splits, in order (hub splits may differ: see ``hub_splits``)."""
        return tuple(self.files)
