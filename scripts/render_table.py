"""The one benchmark table of the generated docs: a row per result entry (``name -> entry``, e.g. a
setting of the shared result shape of contrastive_bert.benchmarking.protocol), a cell per
:class:`Column`; :class:`Table` describes a whole table as data (which file, which entries, which
columns), so a table whose entries sit in one block of one file is a row of data, not code."""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from render_values import Results, fmt, lookup, mean_of, table

Spec = str | Callable[[Any], str]
Labels = Mapping[str, str] | Callable[[Any], str | tuple[str, ...]] | None


def cell(value: object, spec: Spec = ".2f") -> str:
    """A value in a cell, by ``spec``: a function of the value; ``"seeds"``: ``mean ± std (n)``;
    ``"mean"`` and a ``fmt`` spec (``"mean.0f"``): the mean alone; a ``str.format`` template
    (``"{:.2f}x"``, ``"{:.1%}"``); else a ``fmt`` spec (``".1f"``). None: an empty cell."""
    if value is None:
        return ""
    if callable(spec):
        return spec(value)
    if spec == "seeds":
        return fmt(value, seeds=True)
    if spec.startswith("mean"):
        return fmt(mean_of(value), spec.removeprefix("mean") or ".2f")
    return spec.format(value) if "{" in spec else fmt(value, spec)


@dataclass(frozen=True)
class Column:
    """A column: its ``header``; ``value``, where a row's value is (a path into the row's entry, keys
    joined by dots, ``""`` for the entry itself, or a function of the entry; a missing key is an
    empty cell); ``spec``, how the value prints (:func:`cell`); ``only``: the rows that show it (None: all)."""

    header: str
    value: str | Callable[[Any], object] = ""
    spec: Spec = ".2f"
    only: tuple[str, ...] | None = None

    def draw(self, name: object, entry: object) -> str:
        """The cell of the row ``name`` whose entry is ``entry``."""
        if self.only is not None and name not in self.only:
            return ""
        return cell(self.value(entry) if callable(self.value) else lookup(entry, self.value, strict=False), self.spec)


def per_key(keys: Iterable, path: str = "{}", header: str | Mapping = "{}", spec: Spec = ".2f") -> list[Column]:
    """A column per key: its value at ``path.format(key)``, its header ``header.format(key)`` (or ``header[key]``)."""
    title = (lambda key: header.get(key, key)) if isinstance(header, Mapping) else header.format
    return [Column(title(key), path.format(key), spec) for key in keys]


def benchmark_table(entries: Mapping[Any, Any], columns: Iterable[Column], labels: Labels = str,
                    first: str | Sequence[str] = "method", unlabelled: str = "{}") -> str:
    """A markdown table of a row per entry: its label, then a cell per column. ``labels``: a mapping
    (a name it lacks is ``unlabelled.format(name)``), a function of the name, whose tuple fills
    several first columns (``first`` then lists their headers), or None for no label column."""
    columns = list(columns)
    if labels is None:
        label, first = (lambda name: ()), []
    else:
        label = labels if callable(labels) else lambda name: labels.get(name, unlabelled.format(name))
    rows = [([head] if isinstance(head := label(name), str) else list(head)) + [column.draw(name, entry) for column in columns]
            for name, entry in entries.items()]
    return table(([first] if isinstance(first, str) else list(first)) + [column.header for column in columns], rows)


@dataclass(frozen=True)
class Table:
    """A benchmark table as data: its rows are the entries at ``source``, ``"FILE:PATH"`` into
    eval/results/FILE.json (``{0}``, ``{1}``...: the template's arguments), less the names in
    ``skip``; ``columns``: the columns, or a function of the entries giving them; ``labels``,
    ``first``, ``unlabelled``: as :func:`benchmark_table`'s; ``missing``: the text while there are
    no entries, formatted with the arguments (None: a ValueError)."""

    source: str
    columns: Sequence[Column] | Callable[[Mapping], Sequence[Column]]
    labels: Labels = str
    first: str | Sequence[str] = "method"
    unlabelled: str = "{}"
    skip: tuple[str, ...] = ()
    missing: str | None = None

    def __call__(self, results: Results, *args: str) -> str:
        """The table for ``{{table NAME ARG...}}``."""
        wanted = len(set(re.findall(r"\{(\d+)\}", self.source)))
        if len(args) != wanted:
            raise ValueError(f"table from {self.source!r}: expected {wanted} argument(s), got {list(args)}")
        stem, _, path = self.source.format(*args).partition(":")
        entries = lookup(results[stem], path, strict=False)
        if not entries:
            if self.missing is None:
                raise ValueError(f"table: no entries at {self.source.format(*args)!r}")
            return self.missing.format(*args)
        entries = {name: entry for name, entry in entries.items() if name not in self.skip}
        columns = self.columns(entries) if callable(self.columns) else self.columns
        return benchmark_table(entries, columns, self.labels, self.first, self.unlabelled)
