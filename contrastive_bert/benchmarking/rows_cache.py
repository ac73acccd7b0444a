"""Training rows kept on disk between benchmark processes.

A benchmark that runs as a loop of one run per process (so each run picks up code changes) would
make the same mined rows again in every process: minutes of encoding a corpus with a frozen model.
:class:`RowsCache` keeps them in a folder named by a hash of everything the rows depend on (the
caller's ``identity``), with the seconds the first making took, so a run that reads them can still
report their cost.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any

__all__ = ["RowsCache"]

META_FILE = "bench_rows.json"


class RowsCache:
    """``datasets.Dataset`` rows under ``root``, one folder per identity; ``root=None``: no cache."""

    def __init__(self, root: str | Path | None) -> None:
        self.root = None if root is None else Path(root).expanduser()

    def folder(self, name: str, identity: Mapping[str, Any]) -> Path | None:
        """``root/<name>-<hash of identity>`` (None without a cache); ``identity`` must be JSON."""
        if self.root is None:
            return None
        digest = hashlib.sha1(json.dumps(identity, sort_keys=True).encode("utf-8")).hexdigest()[:16]
        return self.root / f"{name}-{digest}"

    @staticmethod
    def load(folder: Path | None) -> tuple[Any, float] | None:
        """``(rows, seconds the first making took)``, or None when ``folder`` holds no rows."""
        if folder is None or not (folder / META_FILE).is_file():
            return None
        import datasets

        meta = json.loads((folder / META_FILE).read_text(encoding="utf-8"))
        return datasets.load_from_disk(str(folder)), float(meta["seconds"])

    @staticmethod
    def save(folder: Path | None, rows, seconds: float, **meta: Any) -> None:
        """Keep ``rows`` (a ``datasets.Dataset``) and the ``seconds`` they took; the metadata last,
        so an interrupted save is no cache entry."""
        if folder is None:
            return
        rows.save_to_disk(str(folder))
        (folder / META_FILE).write_text(json.dumps({"seconds": seconds, **meta}) + "\n", encoding="utf-8")
