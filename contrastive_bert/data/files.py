"""Data files as data sets: read .jsonl/.json/.csv/.tsv/.parquet, infer their format from their columns.

Formats (task types of :mod:`contrastive_bert.data.schemas`) and the columns that identify them:

=============  ==============================================  =====================================
format         columns                                         e.g.
=============  ==============================================  =====================================
``triplets``   anchor, positive, negative (or negative_1...)   ``contrastive-bert mine`` output
``pairs``      anchor, positive                                positive pairs
``pair-score`` sentence1, sentence2, score (in [0, 1])         STS-style data
``pair-binary`` sentence1, sentence2, label (0/1)              paraphrase data
``labelled``   text, label                                     classification data
``reranking``  question, answer, label (0/1)                   answer selection
=============  ==============================================  =====================================
"""

from __future__ import annotations

import functools
import json
import numbers
import os
from collections.abc import Mapping, Sequence
from pathlib import Path

from contrastive_bert.data.schemas import TASK_ALIASES, TASK_COLUMNS, check_task_type, negative_columns
from contrastive_bert.data.spec import DatasetSpec

FILE_FORMATS = {".csv": "csv", ".tsv": "csv", ".json": "json", ".jsonl": "json", ".parquet": "parquet"}
# format inference: the first task type whose columns a file has (triplets before pairs)
_INFERENCE_ORDER = ("triplets", "pairs", "pair-score", "pair-binary", "classification", "reranking")


def is_data_file(value: str | os.PathLike) -> bool:
    """Whether ``value`` names a data file (by its suffix), rather than a registered data set."""
    return Path(value).suffix.lower() in FILE_FORMATS


def read_table(path: str | os.PathLike, argument: str = "source") -> dict[str, list]:
    """``{column: [values]}`` of a data file, with Python values (ints stay ints).

    Missing, unsupported, empty or malformed files raise one ``ValueError`` naming ``argument``
    and the file."""
    path = Path(path).expanduser()
    kind = FILE_FORMATS.get(path.suffix.lower())
    if kind is None:
        if path.exists():
            raise ValueError(f"{argument}: unsupported file type {path.suffix!r}; expected one of {sorted(FILE_FORMATS)}")
        raise ValueError(f"{argument}: {path} is neither a registered data set nor a data file ({', '.join(sorted(FILE_FORMATS))})")
    if not path.is_file():
        raise ValueError(f"{argument}: file not found: {path}")
    try:
        table = _read_json(path) if kind == "json" else _read_with_pandas(path)
    except (ValueError, OSError, UnicodeDecodeError) as error:
        raise ValueError(f"{argument}: could not read {path} as {kind} data (empty or malformed file?): {error}") from None
    if not table or not any(table.values()):
        raise ValueError(f"{argument}: could not read {path} as {kind} data (empty or malformed file?): no rows")
    return table


def _read_json(path: Path) -> dict[str, list]:
    text = path.read_text(encoding="utf-8")
    loaded = None
    if path.suffix.lower() == ".json":
        try:
            loaded = json.loads(text)
        except json.JSONDecodeError:
            pass  # JSON Lines in a .json file (as datasets' own JSON writer makes)
    if loaded is None:
        loaded = [json.loads(line) for line in text.splitlines() if line.strip()]
    if isinstance(loaded, dict):
        if all(isinstance(v, list) for v in loaded.values()):
            return loaded
        loaded = [loaded]
    if not isinstance(loaded, list) or not all(isinstance(row, dict) for row in loaded):
        raise ValueError("expected JSON objects, one per row (or an object of column lists)")
    names = list(dict.fromkeys(name for row in loaded for name in row))
    return {name: [row.get(name) for row in loaded] for name in names}


def _read_with_pandas(path: Path) -> dict[str, list]:
    import pandas as pd

    if path.suffix.lower() == ".parquet":
        frame = pd.read_parquet(path)
    else:
        try:
            frame = pd.read_csv(path, sep="\t" if path.suffix.lower() == ".tsv" else ",", keep_default_na=False)
        except pd.errors.EmptyDataError as error:
            raise ValueError(str(error)) from None
    return frame.to_dict(orient="list")


def infer_format(column_names: Sequence[str]) -> tuple[str, dict[str, str]]:
    """``(task type, column mapping)`` for a file with ``column_names``.

    The first task type (triplets, pairs, pair-score, pair-binary, labelled, reranking) whose
    columns are all present wins; other columns are refused, two as well as three (read as
    positional pairs, a file of ``foo,bar`` would train silently on whatever it holds)."""
    present = set(column_names)
    for task_type in _INFERENCE_ORDER:
        needed = ("anchor", "positive") if task_type == "triplets" else TASK_COLUMNS[task_type]
        if set(needed) <= present and (task_type != "triplets" or negative_columns(column_names)):
            return task_type, {}
    raise ValueError(
        f"cannot tell the format from the columns {list(column_names)}; expected pairs (anchor, positive), "
        "triplets (anchor, positive, negative), pair-score (sentence1, sentence2, score) or labelled (text, label) "
        "columns, or give the format and a column mapping"
    )


def select_schema(table: Mapping[str, list], task_type: str, columns: Mapping[str, str], source: object) -> dict[str, list]:
    """Rename ``table``'s columns by ``columns`` (source -> ours) and keep ``task_type``'s columns;
    pair-score scores become floats. Raises ``ValueError`` naming what is missing."""
    unknown = [c for c in columns if c not in table]
    if unknown:
        raise ValueError(f"columns: {unknown} not found in {source}; its columns are {list(table)}")
    renamed = {columns.get(name, name): values for name, values in table.items()}
    needed = ("anchor", "positive", *negative_columns(list(renamed))) if task_type == "triplets" else TASK_COLUMNS[task_type]
    missing = [c for c in needed if c not in renamed]
    if missing:
        raise ValueError(
            f"columns: {source} lacks {missing} for task type {task_type!r} (found {list(renamed)}); "
            f"map them, e.g. columns={{'<your column>': '{missing[0]}'}}"
        )
    data = {c: list(renamed[c]) for c in needed}
    for column in needed:
        if column in ("score", "label"):
            continue
        for row, value in enumerate(data[column]):
            if not isinstance(value, str):
                raise ValueError(f"{column}: row {row} of {source} is {value!r}, expected text (a string)")
    if task_type == "classification":
        data["label"] = [_class_label(value, row, source) for row, value in enumerate(data["label"])]
    if task_type == "pair-score":
        for row, value in enumerate(data["score"]):
            try:
                data["score"][row] = float(value)
            except (TypeError, ValueError):
                raise ValueError(f"score: row {row} of {source} is not a number: {value!r}") from None
    return data


def _class_label(value: object, row: int, source: object) -> int | str:
    """One classification label: a class name (text) or an integer class id (``3.0`` read as 3);
    a list, a fraction (0.5: a score, not a class) or anything else is one ``ValueError`` naming
    the column, the row, the file and the expected type."""
    if isinstance(value, str):
        return value
    if isinstance(value, numbers.Integral) and not isinstance(value, bool):
        return int(value)
    if isinstance(value, numbers.Real) and not isinstance(value, bool) and float(value).is_integer():
        return int(value)
    if hasattr(value, "__iter__"):
        shown = f"a list ({list(value)!r})"
    elif isinstance(value, numbers.Real) and not isinstance(value, bool):
        shown = f"{value!r}, a fraction (graded pairs put a score in [0, 1] in a 'score' column)"
    else:
        shown = repr(value)
    raise ValueError(f"label: row {row} of {source} is {shown}; the label column holds one class per row: "
                     "an integer id or a name (text)")


def infer_label_names(labels: Sequence) -> list[str]:
    """Sorted distinct labels as names: integers in numeric order (2 before 10), others as text."""
    distinct = set(labels)
    numeric = all(isinstance(v, int) and not isinstance(v, bool) for v in distinct)
    return [str(v) for v in sorted(distinct)] if numeric else sorted({str(v) for v in distinct})


def read_file_as(path: Path, task_type: str, columns: Mapping[str, str]) -> dict[str, list]:
    """One data file's rows in ``task_type``'s schema (the ``read_file`` of file data sets)."""
    return select_schema(read_table(path, argument="dataset"), task_type, columns, path)


def check_format(format: str) -> str:
    """The task type named by a file ``format``; ``ValueError`` naming the choices otherwise."""
    try:
        return check_task_type(format)
    except ValueError:
        choices = sorted({*TASK_COLUMNS, *TASK_ALIASES})
        raise ValueError(f"format: expected one of {', '.join(choices)}, got {format!r}") from None


def file_dataset(
    value: str | os.PathLike, format: str | None = None, columns: Mapping[str, str] | None = None
) -> DatasetSpec:
    """A data set over one file: its rows serve as every split (train, validation, test).

    ``format`` (a task type or ``labelled``) is inferred from the columns when None; ``columns``
    maps the file's column names to ours. The file is read once here, so an empty, malformed or
    mis-shaped file fails now, before any model loads."""
    path = Path(value).expanduser()
    table = read_table(path, argument="dataset")
    mapping = dict(columns or {})
    if format is None:
        renamed = [mapping.get(c, c) for c in table]
        try:
            task_type, positional = infer_format(renamed)
        except ValueError as error:
            raise ValueError(f"dataset: {path}: {error}") from None
        mapping = {source: positional.get(mapping.get(source, source), mapping.get(source, source)) for source in table}
    else:
        task_type = check_format(format)
    select_schema(table, task_type, mapping, path)
    return DatasetSpec(
        name=str(value),
        task_type=task_type,
        description=f"rows of {path}",
        files=dict.fromkeys(("train", "validation", "test"), path.name),
        read_file=functools.partial(read_file_as, task_type=task_type, columns=mapping),
        path=path.resolve().parent,
    )
