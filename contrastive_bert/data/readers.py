"""Small helpers for the readers of original file formats (see :mod:`contrastive_bert.data.sets`)."""

from __future__ import annotations

import csv
from pathlib import Path


def require_file(path: Path) -> Path:
    """``path`` if it is a file, else a ``ValueError`` naming it."""
    if not path.is_file():
        raise ValueError(f"data file not found: {path}")
    return path


def read_csv_rows(path: Path, delimiter: str = ",", quoting: int = csv.QUOTE_MINIMAL, encoding: str = "utf-8") -> list[list[str]]:
    """Every row of a delimited file as a list of fields (no header handling)."""
    with open(require_file(path), encoding=encoding, newline="") as handle:
        return list(csv.reader(handle, delimiter=delimiter, quoting=quoting))


def read_csv_records(path: Path, delimiter: str = ",", quoting: int = csv.QUOTE_MINIMAL) -> dict[str, list[str]]:
    """A delimited file with a header line as ``{column: [values]}`` (all values strings)."""
    with open(require_file(path), encoding="utf-8", newline="") as handle:
        reader = csv.DictReader(handle, delimiter=delimiter, quoting=quoting)
        rows = list(reader)
        names = reader.fieldnames or []
    return {name: [row[name] for row in rows] for name in names}
