"""The ``acl`` loss's batch order (issue 38): every class all epoch long.

sentence-transformers' ``group_by_label`` order lets the classes take turns until each runs out, so on
imbalanced data every epoch ends with batches of the two largest classes only, and a label head trained
on it ends each epoch biased towards them (emotion, all 16,000 rows: the last 156 of 478 batches are
sadness and joy only). The registry's ``acl`` entry uses
:class:`~contrastive_bert.losses.acl_embed.ClassMixedBatchSampler` instead."""

from __future__ import annotations

from collections import Counter

import pytest
import torch

from contrastive_bert.losses.acl_embed import ACLEmbedLoss, ClassMixedBatchSampler

COUNTS = {0: 40, 1: 36, 2: 12, 3: 8}  # imbalanced, as emotion: two large classes, two small ones
BATCH = 8


def _dataset(counts=COUNTS):
    from datasets import Dataset

    labels = [label for label, n in counts.items() for _ in range(n)]
    return Dataset.from_dict({"text": [f"text {i}" for i in range(len(labels))], "label": labels})


def _labels(dataset, batches):
    return [[dataset["label"][i] for i in batch] for batch in batches]


def _trainer_batches(tiny_model, tmp_path, dataset, epoch: int = 0, sampler=None) -> list[list[int]]:
    """One epoch of the batches the sentence-transformers trainer draws for the registry's ``acl`` loss
    (``sampler``: another ``batch_sampler`` argument, e.g. the class as the README passes it)."""
    from sentence_transformers import SentenceTransformerTrainer, SentenceTransformerTrainingArguments

    from contrastive_bert.training.losses_registry import get_loss_entry

    args = SentenceTransformerTrainingArguments(output_dir=str(tmp_path), batch_sampler=sampler or get_loss_entry("acl").batch_sampler,
                                                per_device_train_batch_size=BATCH, report_to="none")
    trainer = SentenceTransformerTrainer(model=tiny_model, args=args, train_dataset=dataset,
                                         loss=ACLEmbedLoss(tiny_model, ["a", "b", "c", "d"]))
    sampler = trainer.get_batch_sampler(dataset, batch_size=BATCH, drop_last=True, valid_label_columns=["label"],
                                        generator=torch.Generator(), seed=0)
    sampler.set_epoch(epoch)
    return list(sampler)


def test_the_acl_loss_keeps_every_class_to_the_end_of_the_epoch(tiny_model, tmp_path):
    """Fails on the group_by_label order: there the last third of the epoch holds classes 0 and 1 only,
    and 4 of class 0's 20 pairs are never drawn."""
    dataset = _dataset()
    for epoch in (0, 1):
        labels = _labels(dataset, _trainer_batches(tiny_model, tmp_path, dataset, epoch))
        last_third = labels[-(len(labels) // 3):]
        assert {label for batch in last_third for label in batch} == set(COUNTS), last_third
        assert len(labels) == sum(COUNTS.values()) // BATCH  # every row, every epoch (all counts even)
        assert Counter(label for batch in labels for label in batch) == Counter(COUNTS)
        assert all(len(set(batch)) >= 2 for batch in labels)


def test_each_class_is_spread_evenly_over_the_epoch():
    """Pair j of a class of n pairs sits at (j + u) / n of the epoch: in every quarter of the epoch each
    class has its share of pairs, give or take one."""
    dataset = _dataset({0: 200, 1: 120, 2: 40, 3: 16})
    sampler = ClassMixedBatchSampler(dataset, batch_size=BATCH, drop_last=True, valid_label_columns=["label"],
                                     generator=torch.Generator(), seed=3)
    pairs = [label for batch in _labels(dataset, sampler) for label in batch[::2]]
    quarter = len(pairs) // 4
    for q in range(4):
        counts = Counter(pairs[q * quarter:(q + 1) * quarter])
        for label, n in {0: 100, 1: 60, 2: 20, 3: 8}.items():
            assert abs(counts[label] - n / 4) <= 2, (q, counts)


def test_rows_come_in_same_class_pairs_and_every_pair_is_used_once():
    dataset = _dataset({0: 21, 1: 9, 2: 6})  # odd counts: one row of 0 and one of 1 wait for another epoch
    sampler = ClassMixedBatchSampler(dataset, batch_size=6, drop_last=False, valid_label_columns=["label"],
                                     generator=torch.Generator(), seed=0)
    batches = list(sampler)
    rows = [i for batch in batches for i in batch]
    assert len(rows) == len(set(rows)) == 20 + 8 + 6
    assert len(batches) == len(sampler) == 6  # 17 pairs: 5 batches of 3 pairs and one of 2 (drop_last=False)
    for batch in batches:
        labels = [dataset["label"][i] for i in batch]
        assert labels[::2] == labels[1::2]
    sampler.drop_last = True
    assert len(list(sampler)) == len(sampler) == 5


def test_the_order_depends_on_seed_and_epoch_only():
    dataset = _dataset()

    def epoch(seed: int, number: int) -> list[list[int]]:
        sampler = ClassMixedBatchSampler(dataset, batch_size=BATCH, drop_last=True, valid_label_columns=["label"],
                                         generator=torch.Generator(), seed=seed)
        sampler.set_epoch(number)
        return list(sampler)

    assert epoch(0, 0) == epoch(0, 0)
    assert epoch(0, 1) != epoch(0, 0) and epoch(1, 0) != epoch(0, 0)


def test_a_single_class_batch_swaps_a_pair_with_a_later_batch():
    dataset = _dataset({0: 12, 1: 4})

    class Fixed(ClassMixedBatchSampler):
        def _pairs(self):  # first batch all class 0; the second holds both of class 1's pairs
            zero = [(0, [2 * k, 2 * k + 1]) for k in range(6)]
            one = [(1, [12, 13]), (1, [14, 15])]
            return zero[:4] + one + zero[4:]

    sampler = Fixed(dataset, batch_size=BATCH, drop_last=True, valid_label_columns=["label"], generator=torch.Generator())
    labels = _labels(dataset, sampler)
    assert labels == [[0, 0, 0, 0, 0, 0, 1, 1], [0, 0, 1, 1, 0, 0, 0, 0]]


def test_bad_arguments():
    with pytest.raises(ValueError, match="even number >= 4"):
        ClassMixedBatchSampler(_dataset(), batch_size=5, drop_last=True, valid_label_columns=["label"])
    with pytest.raises(ValueError, match="at least 2 classes"):
        ClassMixedBatchSampler(_dataset({0: 10, 1: 1}), batch_size=4, drop_last=True, valid_label_columns=["label"])
    with pytest.raises(ValueError, match="none of the label columns"):
        ClassMixedBatchSampler(_dataset(), batch_size=4, drop_last=True, valid_label_columns=["score"])


def test_the_class_passed_as_the_readme_shows_draws_the_registrys_batches(tiny_model, tmp_path):
    """``SentenceTransformerTrainingArguments(batch_sampler=ClassMixedBatchSampler)`` in a user's own trainer
    gives the batches the package's ``acl`` loss trains on."""
    from contrastive_bert.losses import ClassMixedBatchSampler as exported

    dataset = _dataset()
    assert exported is ClassMixedBatchSampler
    assert _trainer_batches(tiny_model, tmp_path, dataset, sampler=exported) == _trainer_batches(tiny_model, tmp_path, dataset)
