"""Column schemas, one per task type, and their validation.

Every loader returns a ``datasets.DatasetDict`` (splits ``train``/``validation``/``test``
where the source has them) in one of these schemas:

==================  ==========================================  ==============================
task type           columns                                     data sets
==================  ==========================================  ==============================
``pair-score``      ``sentence1``, ``sentence2``, ``score``     stsb (score in [0, 1] = gold/5)
``pair-binary``     ``sentence1``, ``sentence2``, ``label``     mrpc (1 = paraphrase)
``classification``  ``text``, ``label`` (``ClassLabel``)         banking77, emotion, sst2
``reranking``       ``question``, ``answer``, ``label``         answer_selection (1 = answers)
``retrieval``       corpus ``id, title, text``; queries          scifact, nfcorpus (BEIR layout)
                    ``id, text``; qrels ``query_id, corpus_id,
                    score`` (graded)
``pairs``           ``anchor``, ``positive``                    files of positive pairs
``triplets``        ``anchor``, ``positive``, ``negative``      ``contrastive-bert mine`` output
==================  ==========================================  ==============================

``triplets`` may carry several negatives as ``negative_1``, ``negative_2``, ... instead of
``negative`` (mine's ``n-tuple`` output). ``labelled`` is accepted as a name of ``classification``.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import datasets

TASK_COLUMNS: dict[str, tuple[str, ...]] = {
    "pair-score": ("sentence1", "sentence2", "score"),
    "pair-binary": ("sentence1", "sentence2", "label"),
    "classification": ("text", "label"),
    "reranking": ("question", "answer", "label"),
    "retrieval": ("query_id", "corpus_id", "score"),
    "pairs": ("anchor", "positive"),
    "triplets": ("anchor", "positive", "negative"),
}
TASK_ALIASES: dict[str, str] = {"labelled": "classification", "labeled": "classification"}


def check_task_type(task_type: str) -> str:
    """The canonical name of ``task_type`` (aliases such as ``labelled`` resolved)."""
    canonical = TASK_ALIASES.get(task_type, task_type)
    if canonical not in TASK_COLUMNS:
        raise ValueError(f"task_type: expected one of {sorted(TASK_COLUMNS)}, got {task_type!r}")
    return canonical


def negative_columns(column_names: Sequence[str]) -> list[str]:
    """The hard-negative columns among ``column_names``: ``negative`` or ``negative_1``, ``negative_2``, ..."""
    if "negative" in column_names:
        return ["negative"]
    numbered = [c for c in column_names if c.startswith("negative_") and c[len("negative_"):].isdigit()]
    return sorted(numbered, key=lambda c: int(c[len("negative_"):]))


def schema_columns(task_type: str, column_names: Sequence[str]) -> tuple[str, ...]:
    """The columns a ``task_type`` split keeps, in order (``triplets``: every negative column present)."""
    task_type = check_task_type(task_type)
    if task_type == "triplets":
        return ("anchor", "positive", *(negative_columns(column_names) or ["negative"]))
    return TASK_COLUMNS[task_type]


def build_split(
    task_type: str, columns: dict[str, Sequence], label_names: Sequence[str] | None = None, source: object = "split"
) -> datasets.Dataset:
    """Make a validated ``datasets.Dataset`` of ``task_type`` from python columns.

    For ``classification``, ``columns["label"]`` may hold label names or integer ids
    (0..K-1); both are checked against ``label_names``. ``source``: where the rows come from (a
    file), as errors name it ("row 3 of data.csv").
    """
    task_type = check_task_type(task_type)
    columns = dict(columns)
    if task_type == "classification":
        if not label_names:
            raise ValueError("label_names: a classification data set needs its list of label names")
        label_names = list(label_names)
        index = {name: i for i, name in enumerate(label_names)}
        labels = []
        for row, value in enumerate(columns["label"]):
            if isinstance(value, str) and value in index:
                labels.append(index[value])
            elif not isinstance(value, (str, bool)) and isinstance(value, int) and 0 <= value < len(label_names):
                labels.append(int(value))
            else:
                where = "" if source == "split" else f" of {source}"
                raise ValueError(
                    f"label: row {row}{where} has label {value!r}, which is not in the declared label set "
                    f"({len(label_names)} labels: {label_names[:5]}{'...' if len(label_names) > 5 else ''})"
                )
        columns["label"] = labels
        features = datasets.Features({"text": datasets.Value("string"), "label": datasets.ClassLabel(names=label_names)})
    else:
        features = None
    names = schema_columns(task_type, list(columns))
    dataset = datasets.Dataset.from_dict({name: list(columns[name]) for name in names if name in columns}, features=features)
    validate_split(dataset, task_type, split=str(source))
    return dataset


def validate_split(dataset: datasets.Dataset, task_type: str, split: str = "split") -> None:
    """Raise ``ValueError`` if ``dataset`` misses a column of ``task_type``, is empty, or
    holds out-of-range scores or labels."""
    task_type = check_task_type(task_type)
    expected = schema_columns(task_type, dataset.column_names)
    missing = [c for c in expected if c not in dataset.column_names]
    if missing:
        raise ValueError(
            f"{split}: missing column(s) {missing} for task type {task_type!r}; "
            f"found {dataset.column_names} (map your columns with `columns={{...}}`)"
        )
    if len(dataset) == 0:
        raise ValueError(f"{split}: the split is empty")
    if task_type == "pair-score":
        for row, score in enumerate(dataset["score"]):
            if not isinstance(score, (int, float)) or isinstance(score, bool) or math.isnan(score):
                raise ValueError(f"score: row {row} of {split} is not a number: {score!r}")
            if not 0.0 <= score <= 1.0:
                raise ValueError(f"score: row {row} of {split} is {score}, expected a value in [0, 1] (rescale e.g. 0-5 scores by 1/5)")
    if task_type in ("pair-binary", "reranking"):
        bad = [(i, v) for i, v in enumerate(dataset["label"]) if v not in (0, 1)]
        if bad:
            raise ValueError(f"label: row {bad[0][0]} of {split} is {bad[0][1]!r}, expected 0 or 1")
    for column in expected:
        if column in ("score", "label"):
            continue
        for row, text in enumerate(dataset[column]):
            if not isinstance(text, str):
                raise ValueError(f"{column}: row {row} of {split} is not a string: {text!r}")
