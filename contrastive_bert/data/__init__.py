"""Data set registry and loaders; see :mod:`contrastive_bert.data.schemas` for the column schemas."""

from contrastive_bert.data.custom import load_custom_dataset
from contrastive_bert.data.registry import DATA_DIR_ENV, REGISTRY, get_spec, load_dataset, resolve_data_dir
from contrastive_bert.data.schemas import TASK_COLUMNS, validate_split
from contrastive_bert.data.training_pairs import positive_pairs

__all__ = [
    "DATA_DIR_ENV",
    "REGISTRY",
    "TASK_COLUMNS",
    "get_spec",
    "load_custom_dataset",
    "load_dataset",
    "positive_pairs",
    "resolve_data_dir",
    "validate_split",
]
