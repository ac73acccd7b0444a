"""The registry of data sets: name -> :class:`DatasetSpec`, plus data files registered on the fly.

The built-in data sets are the ``DATASET`` objects of the modules in
:mod:`contrastive_bert.data.sets` (one module each); :func:`register_dataset` adds more. A data
file path (``.jsonl``/``.json``/``.csv``/``.tsv``/``.parquet``) is accepted wherever a name is:
:func:`resolve_dataset_argument` turns it into a data set, its format inferred from its columns.
"""

from __future__ import annotations

import difflib
import importlib
import os
import pkgutil
from collections.abc import Mapping

from contrastive_bert.data import sets
from contrastive_bert.data.beir import beir_folder_dataset, looks_like_beir_folder
from contrastive_bert.data.files import FILE_FORMATS, file_dataset, is_data_file
from contrastive_bert.data.spec import DatasetSpec

REGISTRY: dict[str, DatasetSpec] = {}
_FILE_DATASETS: dict[tuple, DatasetSpec] = {}


def register_dataset(spec: DatasetSpec, replace: bool = False) -> DatasetSpec:
    """Add ``spec`` to the registry under ``spec.name`` and return it (``replace`` to redefine a name)."""
    if not isinstance(spec, DatasetSpec):
        raise ValueError(f"spec: expected a DatasetSpec, got {type(spec).__name__}")
    if spec.name in REGISTRY and REGISTRY[spec.name] is not spec and not replace:
        raise ValueError(f"name: a data set named {spec.name!r} is already registered; pass replace=True to redefine it")
    if is_data_file(spec.name):
        raise ValueError(f"name: {spec.name!r} looks like a data file; choose a name without a file suffix")
    REGISTRY[spec.name] = spec
    return spec


def unregister_dataset(name: str) -> None:
    """Remove ``name`` from the registry (e.g. a data set a test registered)."""
    REGISTRY.pop(name, None)


def _register_builtin() -> None:
    for module in pkgutil.iter_modules(sets.__path__):
        if not module.name.startswith("_"):
            register_dataset(importlib.import_module(f"{sets.__name__}.{module.name}").DATASET)


def known_as(name: str) -> list[str]:
    """The registered data sets that mteb (its task names) or the Hugging Face hub (its data set id) call
    ``name``, case-insensitive: ``"STSBenchmark"`` -> ``["stsb"]``, ``"nyu-mll/glue"`` -> ``["mrpc", "sst2"]``."""
    wanted = name.lower()
    return [spec.name for spec in REGISTRY.values()
            if any(other is not None and other.lower() == wanted
                   for other in (spec.hub_id, *((spec.mteb.task_name, spec.mteb.stock_task) if spec.mteb is not None else ())))]


def _letters_and_digits(name: str) -> str:
    return "".join(character for character in name.lower() if character.isalnum())


def _unknown(name: object) -> ValueError:
    if same := known_as(str(name)):
        hint = f" {str(name)!r} is what mteb or the hub call {' or '.join(repr(n) for n in same)} here: use that name."
    else:
        # spelled another way ('STS-B', 'SST_2', 'Banking-77'): the same letters and digits, any case
        close = [known for known in REGISTRY if _letters_and_digits(known) == _letters_and_digits(str(name))]
        close = close or difflib.get_close_matches(str(name), REGISTRY, n=3, cutoff=0.5)  # 0.4 offered answer_selection for "nonsense"
        hint = f" Did you mean {', '.join(repr(c) for c in close)}?" if close else ""
    return ValueError(
        f"dataset: unknown data set {name!r}; known: {', '.join(sorted(REGISTRY))}.{hint} "
        f"(a data file {'/'.join(sorted(FILE_FORMATS))} or a BEIR folder is accepted too)"
    )


def resolve_dataset_argument(
    value: str | os.PathLike | DatasetSpec, format: str | None = None, columns: Mapping[str, str] | None = None
) -> DatasetSpec:
    """The data set a CLI/recipe argument names: a registered name, or a data file path whose
    ``format`` (``pairs``, ``triplets``, ``pair-score``, ``labelled``, ...) is inferred from its
    columns unless given; ``columns`` maps a file's column names to ours. A file is read here,
    so an empty or mis-shaped file fails now with one ``ValueError`` naming it."""
    if isinstance(value, DatasetSpec):
        return value
    key = str(value)
    if key in REGISTRY:
        if format is not None or columns:
            raise ValueError(f"format: {key!r} is a registered {REGISTRY[key].task_type} data set; a format and columns apply to data files only")
        return REGISTRY[key]
    if not is_data_file(key):
        if looks_like_beir_folder(key):  # an incomplete one: beir_files names what is missing
            if format not in (None, "retrieval") or columns:
                raise ValueError(f"format: {key!r} is a BEIR folder (retrieval); a format and columns apply to data files only")
            return _FILE_DATASETS.setdefault((key, "beir"), beir_folder_dataset(key))
        raise _unknown(key)
    stamp = os.stat(key).st_mtime_ns if os.path.isfile(key) else None  # a rewritten file is read again
    cache_key = (key, format, tuple(sorted((columns or {}).items())), stamp)
    if cache_key not in _FILE_DATASETS:
        _FILE_DATASETS[cache_key] = file_dataset(key, format=format, columns=columns)
    return _FILE_DATASETS[cache_key]


def get_dataset(name: str | os.PathLike | DatasetSpec) -> DatasetSpec:
    """The data set ``name`` refers to (a registered name, a data file, or a spec itself);
    unknown names get the closest known names suggested."""
    return resolve_dataset_argument(name)


get_spec = get_dataset

_register_builtin()
