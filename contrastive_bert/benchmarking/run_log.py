"""A resumable benchmark's run log: one JSON line per finished run, append-only.

Every record carries ``"key"``, a stable string naming the run (a dict key is written as JSON with
sorted keys), so a restarted benchmark skips the runs already done. Each line is flushed and
fsynced before :meth:`RunLog.append` returns: a kill loses at most the run in progress. A torn
last line (the process died mid-write) is skipped with a warning and cut off before the next
append; an unreadable line anywhere else is an error (the file was edited or damaged).
"""

from __future__ import annotations

import json
import logging
import os
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

logger = logging.getLogger(__name__)


def run_key(key: str | Mapping[str, Any]) -> str:
    """The stable string of a run's key: a string as is, a mapping as JSON with sorted keys."""
    if isinstance(key, str):
        if not key:
            raise ValueError("key: expected a non-empty string or a mapping")
        return key
    if isinstance(key, Mapping):
        return json.dumps(dict(key), sort_keys=True)
    raise ValueError(f"key: expected a string or a mapping, got {type(key).__name__}")


class RunLog:
    """The records of ``path`` (read once, when made) plus those appended since."""

    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)
        self._records: list[dict] = []
        self._index: dict[str, int] = {}
        self._torn_at: int | None = None  # byte offset of a torn last line, cut before the next append
        self._needs_newline = False  # a complete last record whose newline was lost
        if self.path.is_file():
            self._read()

    def _read(self) -> None:
        data = self.path.read_bytes()
        lines = data.split(b"\n")
        offset = 0
        for number, line in enumerate(lines, start=1):
            start, offset = offset, offset + len(line) + 1
            if not line.strip():
                continue
            try:
                record = json.loads(line)
                if not isinstance(record, dict) or not isinstance(record.get("key"), str):
                    raise ValueError("not a record with a string 'key'")
            except ValueError as error:
                if all(not rest.strip() for rest in lines[number:]):
                    logger.warning("run log %s: skipping a torn last line (%d bytes); that run will be redone", self.path, len(line))
                    self._torn_at = start
                    return
                raise ValueError(f"run log {self.path}: line {number} is not a JSON record ({error}); fix or remove that line") from None
            self._add(record)
        self._needs_newline = bool(data) and not data.endswith(b"\n")

    def _add(self, record: dict) -> None:
        key = record["key"]
        if key in self._index:  # a later record of the same run (e.g. redone) replaces the earlier one
            self._records[self._index[key]] = record
        else:
            self._index[key] = len(self._records)
            self._records.append(record)

    def done(self, key: str | Mapping[str, Any]) -> bool:
        """Whether the run ``key`` has a record."""
        return run_key(key) in self._index

    __contains__ = done

    def get(self, key: str | Mapping[str, Any]) -> dict | None:
        """The record of run ``key``, or None."""
        index = self._index.get(run_key(key))
        return None if index is None else self._records[index]

    def of_mode(self, dry_run: bool) -> dict[str, dict]:
        """``key -> record`` of the runs made in this mode: a real run's plan and summary never count
        a ``--dry-run`` record (numbers meaningless) as done, and a dry run never counts a real one."""
        return {r["key"]: r for r in self._records if bool(r.get("dry_run")) == bool(dry_run)}

    def records(self) -> list[dict]:
        """Every record, in the order first appended (a copy of the list)."""
        return list(self._records)

    def keys(self) -> list[str]:
        return list(self._index)

    def __len__(self) -> int:
        return len(self._records)

    def __iter__(self) -> Iterator[dict]:
        return iter(self.records())

    def append(self, key: str | Mapping[str, Any], record: Mapping[str, Any]) -> dict:
        """Write ``record`` with ``"key"`` set to ``run_key(key)`` as one line, fsynced; returns it.
        ``ValueError`` for a non-finite number (see ``benchmarking.json_safe``), a value JSON cannot
        hold, or a record whose own ``"key"`` differs; nothing is written then."""
        text = run_key(key)
        if not isinstance(record, Mapping):
            raise ValueError(f"record: expected a mapping, got {type(record).__name__}")
        if "key" in record and record["key"] != text:
            raise ValueError(f"record: its 'key' {record['key']!r} differs from key {text!r}")
        full = {**record, "key": text}
        try:
            line = json.dumps(full, allow_nan=False)
        except (ValueError, TypeError) as error:
            raise ValueError(f"record: expected finite numbers and JSON types only ({error}); run key {text}") from None
        self.path.parent.mkdir(parents=True, exist_ok=True)
        with self.path.open("ab") as handle:
            if self._torn_at is not None:
                handle.truncate(self._torn_at)
                self._torn_at = None
            elif self._needs_newline:
                handle.write(b"\n")
            self._needs_newline = False
            handle.write(line.encode("utf-8") + b"\n")
            handle.flush()
            os.fsync(handle.fileno())
        self._add(full)
        return full
