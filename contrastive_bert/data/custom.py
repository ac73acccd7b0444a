"""The user's own data as one split: a CSV/TSV/JSON/JSONL/parquet file or any ``datasets`` name,
with a column mapping (for a whole data set from a file, see :func:`resolve_dataset_argument`)."""

from __future__ import annotations

import os
from pathlib import Path

import datasets

from contrastive_bert.data.files import FILE_FORMATS, infer_label_names, read_table, select_schema
from contrastive_bert.data.schemas import build_split, check_task_type


def load_custom_dataset(
    source: str | os.PathLike,
    task_type: str,
    columns: dict[str, str] | None = None,
    split: str = "train",
    label_names: list[str] | None = None,
    config_name: str | None = None,
) -> datasets.Dataset:
    """Load ``source`` (a data file or a ``datasets`` name) as one split of ``task_type``.

    ``columns`` maps the source's column names to ours, e.g. ``{"query": "sentence1"}``.
    For classification, ``label_names`` fixes the label set (default: sorted distinct labels).
    """
    task_type = check_task_type(task_type)
    path = Path(source).expanduser()
    if path.suffix.lower() in FILE_FORMATS or path.exists():
        table = read_table(path, argument="source")
    else:
        loaded = datasets.load_dataset(str(source), config_name, split=split)
        table = {c: list(loaded[c]) for c in loaded.column_names}  # datasets >= 4 returns a read-only Column
    data = select_schema(table, task_type, dict(columns or {}), source)
    if task_type == "classification" and label_names is None:
        label_names = infer_label_names(data["label"])
        data["label"] = [str(v) for v in data["label"]]
    return build_split(task_type, data, label_names, source=source)
