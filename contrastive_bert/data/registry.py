"""Named data sets: name -> local files (explicit path or data root) or the public hub id.

Resolution order for ``load_dataset(name)``:
1. ``path=``: the data set's own folder (files in their original format);
2. a local data root: ``data_dir=``, else the ``CONTRASTIVE_BERT_DATA`` environment
   variable; the data set is read from ``<root>/<folder>``;
3. the Hugging Face hub id (online users need no local files).
"""

from __future__ import annotations

import difflib
import os
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import datasets

from contrastive_bert.data import local_readers
from contrastive_bert.data.schemas import build_split, validate_split

DATA_DIR_ENV = "CONTRASTIVE_BERT_DATA"


@dataclass(frozen=True)
class DatasetSpec:
    """Where a named data set lives and which schema it has."""

    name: str
    task_type: str
    folder: str
    reader: Callable
    hub_id: str | None
    hub_config: str | None = None
    hub_columns: dict[str, str] | None = None  # hub column -> our column
    hub_splits: dict[str, str] | None = None  # our split -> hub split
    description: str = ""


REGISTRY: dict[str, DatasetSpec] = {
    spec.name: spec
    for spec in (
        DatasetSpec("stsb", "pair-score", "stsb", local_readers.read_stsb, "sentence-transformers/stsb",
                    description="STS Benchmark sentence pairs with similarity scores in [0, 1]"),
        DatasetSpec("mrpc", "pair-binary", "mrpc", local_readers.read_mrpc, "nyu-mll/glue", "mrpc",
                    description="Microsoft Research Paraphrase Corpus (1 = paraphrase)"),
        DatasetSpec("banking77", "classification", "banking77", local_readers.read_banking77, "PolyAI/banking77",
                    description="Banking77 intent detection, 77 intents"),
        DatasetSpec("emotion", "classification", "emotion", local_readers.read_emotion, "dair-ai/emotion",
                    description="Emotion classification of tweets, 6 labels"),
        DatasetSpec("sst2", "classification", "sst2", local_readers.read_sst2, "nyu-mll/glue", "sst2",
                    hub_columns={"sentence": "text"}, hub_splits={"train": "train", "validation": "validation"},
                    description="SST-2 binary sentiment"),
        DatasetSpec("answer_selection", "retrieval", "answer_selection_wang", local_readers.read_answer_selection, None,
                    description="TREC answer-sentence selection (Wang et al. 2007)"),
    )
}


def get_spec(name: str) -> DatasetSpec:
    """The registry entry for ``name``; unknown names get the closest known names suggested."""
    if name not in REGISTRY:
        close = difflib.get_close_matches(name, REGISTRY, n=3, cutoff=0.4)
        hint = f" Did you mean {', '.join(repr(c) for c in close)}?" if close else ""
        raise ValueError(f"dataset: unknown data set {name!r}; known: {', '.join(sorted(REGISTRY))}.{hint}")
    return REGISTRY[name]


def resolve_data_dir(data_dir: str | os.PathLike | None = None) -> Path | None:
    """The local data root: ``data_dir`` if given, else ``$CONTRASTIVE_BERT_DATA``, else None."""
    root = data_dir if data_dir is not None else os.environ.get(DATA_DIR_ENV)
    if root in (None, ""):
        return None
    root = Path(root).expanduser()
    if not root.is_dir():
        raise ValueError(f"data_dir: {root} is not a directory")
    return root


def load_dataset(
    name: str,
    split: str | None = None,
    data_dir: str | os.PathLike | None = None,
    path: str | os.PathLike | None = None,
) -> datasets.DatasetDict | datasets.Dataset:
    """Load a registered data set as a ``DatasetDict`` (or one ``Dataset`` if ``split``)."""
    spec = get_spec(name)
    folder = None
    if path is not None:
        folder = Path(path).expanduser()
        if not folder.is_dir():
            raise ValueError(f"path: {folder} is not a directory holding the {name} files")
    else:
        root = resolve_data_dir(data_dir)
        if root is not None:
            folder = root / spec.folder
            if not folder.is_dir():
                raise ValueError(f"data_dir: {root} has no {spec.folder}/ folder for data set {name!r}")
    if folder is not None:
        result = _load_local(spec, folder)
    else:
        result = _load_hub(spec)
    if split is None:
        return result
    if split not in result:
        raise ValueError(f"split: data set {name!r} has splits {list(result)}, not {split!r}")
    return result[split]


def _load_local(spec: DatasetSpec, folder: Path) -> datasets.DatasetDict:
    parsed = spec.reader(folder)
    splits, label_names = parsed if isinstance(parsed, tuple) else (parsed, None)
    return datasets.DatasetDict(
        {split: build_split(spec.task_type, columns, label_names) for split, columns in splits.items()}
    )


def _load_hub(spec: DatasetSpec) -> datasets.DatasetDict:
    if spec.hub_id is None:
        raise ValueError(
            f"dataset: {spec.name!r} has no hub equivalent; pass data_dir (or set {DATA_DIR_ENV}) "
            f"to a folder holding {spec.folder}/"
        )
    loaded = datasets.load_dataset(spec.hub_id, spec.hub_config)
    split_map = spec.hub_splits or {s: s for s in ("train", "validation", "test") if s in loaded}
    result = {}
    for ours, theirs in split_map.items():
        dataset = loaded[theirs]
        if spec.hub_columns:
            dataset = dataset.rename_columns(spec.hub_columns)
        keep = [c for c in dataset.column_names if c in ("sentence1", "sentence2", "score", "label", "text")]
        dataset = dataset.select_columns(keep)
        validate_split(dataset, spec.task_type, split=ours)
        result[ours] = dataset
    if spec.name == "sst2":  # GLUE's SST-2 test labels are hidden: its dev set is the test set
        result["test"] = result.pop("validation")
    return datasets.DatasetDict(result)
