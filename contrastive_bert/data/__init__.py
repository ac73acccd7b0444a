"""Data sets as objects (:class:`DatasetSpec`), their registry and loaders.

A data set is one :class:`DatasetSpec` (see :mod:`contrastive_bert.data.spec`); the built-in ones
live one per module in :mod:`contrastive_bert.data.sets`. Data files are accepted wherever a name
is (:func:`resolve_dataset_argument`). Column schemas: :mod:`contrastive_bert.data.schemas`.
"""

from contrastive_bert.data.custom import load_custom_dataset
from contrastive_bert.data.files import FILE_FORMATS, file_dataset, infer_format, is_data_file, read_table
from contrastive_bert.data.loading import load_dataset
from contrastive_bert.data.paths import DATA_DIR_ENV, resolve_data_dir
from contrastive_bert.data.registry import (
    REGISTRY,
    get_dataset,
    get_spec,
    register_dataset,
    resolve_dataset_argument,
    unregister_dataset,
)
from contrastive_bert.data.schemas import TASK_COLUMNS, validate_split
from contrastive_bert.data.spec import DatasetSpec, MtebCard
from contrastive_bert.data.training_pairs import labelled_negative_triplets, positive_pairs, scored_pairs

__all__ = [
    "DATA_DIR_ENV",
    "FILE_FORMATS",
    "REGISTRY",
    "TASK_COLUMNS",
    "DatasetSpec",
    "MtebCard",
    "file_dataset",
    "get_dataset",
    "get_spec",
    "infer_format",
    "is_data_file",
    "load_custom_dataset",
    "load_dataset",
    "labelled_negative_triplets",
    "positive_pairs",
    "read_table",
    "register_dataset",
    "resolve_data_dir",
    "resolve_dataset_argument",
    "scored_pairs",
    "unregister_dataset",
    "validate_split",
]
