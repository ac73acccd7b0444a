"""Loading a data set from its Hugging Face hub equivalent, with one clear error when offline.

Before asking ``datasets`` (which retries for about 20 s offline and then raises an 11-frame
``ConnectionError``), one TCP connection to the hub endpoint is tried; when it fails, a
``ValueError`` names the data set, the hub id, the local data roots that were not given, and
how to give one. With ``HF_HUB_OFFLINE=1`` the probe is skipped so that ``datasets`` can read
its own cache.
"""

from __future__ import annotations

import functools
import logging
import socket
from urllib.parse import urlparse

import datasets

from contrastive_bert.data.beir import load_beir_from_hub
from contrastive_bert.data.paths import DATA_DIR_ENV, data_root_hints
from contrastive_bert.data.schemas import validate_split
from contrastive_bert.data.spec import DatasetSpec

logger = logging.getLogger(__name__)

_KEEP = ("sentence1", "sentence2", "score", "label", "text", "question", "answer", "anchor", "positive", "negative")


@functools.lru_cache(maxsize=1)
def hub_reachable(timeout: float = 3.0) -> bool:
    """Whether the hub endpoint accepts a TCP connection (checked once per process); True in
    ``HF_HUB_OFFLINE`` mode, where ``datasets`` reads its cache instead."""
    from huggingface_hub import constants

    if constants.HF_HUB_OFFLINE:
        return True
    endpoint = urlparse(constants.ENDPOINT)
    port = endpoint.port or (443 if endpoint.scheme == "https" else 80)
    try:
        socket.create_connection((endpoint.hostname, port), timeout=timeout).close()
    except OSError as error:
        logger.debug("hub endpoint %s unreachable: %s", constants.ENDPOINT, error)
        return False
    return True


def offline_message(spec: DatasetSpec) -> str:
    """One line: what was looked for, where, and how to fix it."""
    config = f" (config {spec.hub_config!r})" if spec.hub_config else ""
    hints = data_root_hints(spec.folder)
    hint = f"; {hints[0]} holds {spec.folder}/" if hints else ""
    return (
        f"dataset {spec.name!r}: no local data root given (--data-dir not set, ${DATA_DIR_ENV} unset) and the "
        f"Hugging Face hub is unreachable for {spec.hub_id!r}{config}; pass --data-dir DIR or set "
        f"{DATA_DIR_ENV}=DIR, where DIR holds {spec.folder}/{hint}"
    )


def load_from_hub(spec: DatasetSpec) -> datasets.DatasetDict:
    """The hub equivalent of ``spec`` in our schema: ``hub_splits`` renamed to our splits,
    ``columns`` renamed, hub extras (e.g. ``idx``) dropped, every split validated."""
    if spec.hub_id is None:
        raise ValueError(
            f"dataset: {spec.name!r} has no hub equivalent; pass data_dir (or set {DATA_DIR_ENV}) "
            f"to a folder holding {spec.folder}/"
        )
    if not hub_reachable():
        raise ValueError(offline_message(spec))
    try:
        if spec.task_type == "retrieval":
            return load_beir_from_hub(spec.hub_id, spec.hub_revision)
        loaded = datasets.load_dataset(spec.hub_id, spec.hub_config, revision=spec.hub_revision)
    except ConnectionError:
        raise ValueError(offline_message(spec)) from None
    split_map = spec.hub_splits or {s: s for s in ("train", "validation", "test") if s in loaded}
    result = {}
    for ours, theirs in split_map.items():
        dataset = loaded[theirs]
        renames = {k: v for k, v in spec.columns.items() if k in dataset.column_names and k != v}
        if renames:
            dataset = dataset.rename_columns(renames)
        dataset = dataset.select_columns([c for c in dataset.column_names if c in _KEEP or c.startswith("negative_")])
        validate_split(dataset, spec.task_type, split=ours)
        result[ours] = dataset
    return datasets.DatasetDict(result)
