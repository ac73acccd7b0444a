"""``load_dataset``: a data set's splits as a ``datasets.DatasetDict`` in its task type's schema.

Resolution order:
1. ``path=``: the data set's own folder (files in their original format);
2. the data set's fixed ``path`` (data sets made from user files);
3. a local data root: ``data_dir=``, else ``$CONTRASTIVE_BERT_DATA``; read from ``<root>/<folder>``;
4. the Hugging Face hub id (online users need no local files); offline, one ``ValueError``
   says what was looked for and how to give a data root.

A data set without a ``validation`` split gets one carved from ``train`` by the package's one
dev-split rule (:mod:`contrastive_bert.data.dev_split`), and its ``train`` split loses those
rows; ``dev_split=False`` returns the splits as published.
"""

from __future__ import annotations

import os
from pathlib import Path

import datasets

from contrastive_bert.data.beir import build_retrieval_split
from contrastive_bert.data.dev_split import with_dev_split
from contrastive_bert.data.files import infer_label_names
from contrastive_bert.data.hub import load_from_hub
from contrastive_bert.data.paths import resolve_data_dir
from contrastive_bert.data.readers import require_file
from contrastive_bert.data.registry import get_dataset
from contrastive_bert.data.schemas import build_split
from contrastive_bert.data.spec import DatasetSpec


def load_dataset(
    name: str | os.PathLike | DatasetSpec,
    split: str | None = None,
    data_dir: str | os.PathLike | None = None,
    path: str | os.PathLike | None = None,
    dev_split: bool = True,
) -> datasets.DatasetDict | datasets.Dataset:
    """Load a data set (a registered name, a data file, a BEIR folder or a spec) as a
    ``DatasetDict``, or one ``Dataset`` if ``split``.

    Retrieval data sets have splits ``corpus``, ``queries`` and one qrels split per judged split
    (:mod:`contrastive_bert.data.beir`)."""
    spec = get_dataset(name)
    folder = local_folder(spec, data_dir, path)
    result = load_local(spec, folder) if folder is not None else load_from_hub(spec)
    if dev_split:
        result = with_dev_split(spec, result)
    if split is None:
        return result
    if split not in result:
        raise ValueError(f"split: data set {spec.name!r} has splits {list(result)}, not {split!r}")
    return result[split]


def local_folder(spec: DatasetSpec, data_dir: str | os.PathLike | None = None, path: str | os.PathLike | None = None) -> Path | None:
    """The folder holding ``spec``'s files, or None when it is to come from the hub."""
    if path is not None:
        folder = Path(path).expanduser()
        if not folder.is_dir():
            raise ValueError(f"path: {folder} is not a directory holding the {spec.name} files")
        return folder
    if spec.path is not None:
        return Path(spec.path)
    root = resolve_data_dir(data_dir)
    if root is None or not spec.files:
        return None
    folder = root / spec.folder
    if not folder.is_dir():
        raise ValueError(f"data_dir: {root} has no {spec.folder}/ folder for data set {spec.name!r}")
    return folder


def load_local(spec: DatasetSpec, folder: Path) -> datasets.DatasetDict:
    """Read ``spec.files`` from ``folder`` (each distinct file once; splits naming the same file
    share one ``Dataset``), map ``spec.columns`` and validate every split."""
    label_names = spec.label_names
    if label_names is None and spec.read_label_names is not None:
        label_names = spec.read_label_names(folder)
    tables: dict[str, dict[str, list]] = {}
    for file_name in dict.fromkeys(spec.files.values()):
        table = spec.read_file(require_file(folder / file_name))
        tables[file_name] = {spec.columns.get(column, column): values for column, values in table.items()}
    if spec.task_type == "classification" and label_names is None:
        label_names = infer_label_names([v for table in tables.values() for v in table["label"]])
        for table in tables.values():
            table["label"] = [str(v) for v in table["label"]]
    if spec.task_type == "retrieval":
        split_of = {file_name: split for split, file_name in spec.files.items()}
        built = {file_name: build_retrieval_split(split_of[file_name], table) for file_name, table in tables.items()}
    else:
        built = {file_name: build_split(spec.task_type, table, label_names, source=folder / file_name)
                 for file_name, table in tables.items()}
    return datasets.DatasetDict({split: built[file_name] for split, file_name in spec.files.items()})
