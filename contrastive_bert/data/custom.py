"""The user's own data: CSV/TSV/JSONL/parquet files or any ``datasets`` name, with a column mapping."""

from __future__ import annotations

import os
from pathlib import Path

import datasets
from datasets.exceptions import DatasetGenerationError

from contrastive_bert.data.schemas import TASK_COLUMNS, build_split, check_task_type

_FILE_BUILDERS = {".csv": "csv", ".tsv": "csv", ".json": "json", ".jsonl": "json", ".parquet": "parquet"}


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
    check_task_type(task_type)
    columns = dict(columns or {})
    path = Path(source).expanduser()
    if path.suffix.lower() in _FILE_BUILDERS:
        if not path.is_file():
            raise ValueError(f"source: file not found: {path}")
        kwargs = {"delimiter": "\t"} if path.suffix.lower() == ".tsv" else {}
        builder = _FILE_BUILDERS[path.suffix.lower()]
        try:
            loaded = datasets.load_dataset(builder, data_files={split: str(path)}, split=split, **kwargs)
        except (ValueError, StopIteration, DatasetGenerationError) as error:  # empty or malformed file
            raise ValueError(f"source: could not read {path} as {builder} data (empty or malformed file?): {error}") from error
    elif path.exists():
        raise ValueError(f"source: unsupported file type {path.suffix!r}; expected one of {sorted(_FILE_BUILDERS)}")
    else:
        loaded = datasets.load_dataset(str(source), config_name, split=split)
    unknown = [c for c in columns if c not in loaded.column_names]
    if unknown:
        raise ValueError(f"columns: {unknown} not found in {source}; its columns are {loaded.column_names}")
    loaded = loaded.rename_columns({k: v for k, v in columns.items() if k != v})
    needed = TASK_COLUMNS[task_type]
    missing = [c for c in needed if c not in loaded.column_names]
    if missing:
        raise ValueError(
            f"columns: {source} lacks {missing} for task type {task_type!r} (found {loaded.column_names}); "
            f"map them, e.g. columns={{'<your column>': '{missing[0]}'}}"
        )
    data = {c: list(loaded[c]) for c in needed}  # datasets >= 4 returns a read-only Column
    if task_type == "classification" and label_names is None:
        distinct = set(data["label"])
        numeric = all(isinstance(v, int) and not isinstance(v, bool) for v in distinct)  # keep 2 < 10
        label_names = [str(v) for v in sorted(distinct)] if numeric else sorted({str(v) for v in distinct})
        data["label"] = [str(v) for v in data["label"]]
    if task_type == "pair-score":
        for row, value in enumerate(data["score"]):
            try:
                data["score"][row] = float(value)
            except (TypeError, ValueError):
                raise ValueError(f"score: row {row} of {source} is not a number: {value!r}") from None
    return build_split(task_type, data, label_names)
