"""The one rule that makes a dev split for data sets that ship without one.

A data set with a ``train`` split and no ``validation`` split gets a ``validation`` split carved
from train, and its ``train`` split loses those rows, so no consumer (training data, the dev
evaluator during training, the benchmarks) can train on a dev row:

- classification: a share of train stratified by label;
- retrieval (BEIR): a share of the train *queries* with all their judgements.

The share and seed are the data set's ``DatasetSpec.dev_share`` (default 0.1) and ``dev_seed``
(default 0). Training-only formats (``pairs``, ``triplets``) and data sets whose ``train`` split
is also their test split (a single user file) are left as they are, and so are pair and
reranking data sets (every registered one ships a dev split; a user's set without one has no
dev evaluation unless ``dev_task`` names one that has).
"""

from __future__ import annotations

import datasets

from contrastive_bert.data.beir import qrels_dataset, qrels_dict, split_queries
from contrastive_bert.data.spec import DatasetSpec

DEV_SPLIT = "validation"
_CARVED = ("classification", "retrieval")


def needs_dev_split(spec: DatasetSpec, data: datasets.DatasetDict) -> bool:
    """Whether ``data`` (as read) gets a ``validation`` split carved from its ``train`` split."""
    if spec.task_type not in _CARVED or spec.dev_share == 0 or DEV_SPLIT in data or "train" not in data:
        return False
    return not any(data[name] is data["train"] for name in data if name != "train")


def with_dev_split(spec: DatasetSpec, data: datasets.DatasetDict) -> datasets.DatasetDict:
    """``data`` with a ``validation`` split carved from ``train`` by the rule above (unchanged if
    it has one already or the rule does not apply)."""
    if not needs_dev_split(spec, data):
        return data
    train = data["train"]
    share, seed = spec.dev_share, spec.dev_seed
    if spec.task_type == "classification":
        try:
            held = train.train_test_split(test_size=share, seed=seed, stratify_by_column="label")
        except ValueError:  # a label with a single row cannot be stratified (tiny sets): plain share
            held = train.train_test_split(test_size=share, seed=seed)
        train, dev = held["train"], held["test"]
    else:
        qrels = qrels_dict(train)
        kept, held_out = split_queries(qrels, share, seed)
        train = qrels_dataset({q: qrels[q] for q in kept})
        dev = qrels_dataset({q: qrels[q] for q in held_out})
    result = {name: split for name, split in data.items()}
    result["train"], result[DEV_SPLIT] = train, dev
    order = [name for name in data if name != "test"] + [DEV_SPLIT] + (["test"] if "test" in data else [])
    return datasets.DatasetDict({name: result[name] for name in dict.fromkeys(order)})
