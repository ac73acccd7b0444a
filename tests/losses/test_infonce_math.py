"""The queue InfoNCE math and the miner on hand-computed 2-d cases (no model)."""

from __future__ import annotations

import math

import pytest
import torch

from contrastive_bert.losses.false_negative_filters import FalseNegativeFilters
from contrastive_bert.losses.hard_negative_miner import HardNegativeMiner, MiningConfig
from contrastive_bert.losses.infonce_math import queue_infonce_loss
from contrastive_bert.topk_search import HardnessSchedule

E = math.e


@pytest.mark.parametrize("symmetric", [False, True])
def test_parts_hand_computed(symmetric):
    anchors = torch.tensor([[1.0, 0.0]])
    docs = torch.tensor([[1.0, 0.0], [0.0, 1.0]])
    queue = torch.tensor([[0.0, 1.0], [1.0, 0.0]])
    hard = torch.tensor([[[-1.0, 0.0]]])
    loss, parts = queue_infonce_loss(
        anchors, docs, queue, hard, temperature=1.0, queue_mask=torch.tensor([[True, False]]),
        hard_negative_share=0.5, reverse_anchors=anchors if symmetric else None,
    )
    # logits: batch [1, 0], queue [0] (row 1 masked), hard [-1] weighted w = 0.5 / 0.5 * (1 + 1) / 1 = 2
    in_batch = math.log(E + 1) - 1
    queue_part = math.log(E + 2) - math.log(E + 1)
    hard_part = math.log(E + 2 + 2 / E) - math.log(E + 2)
    if symmetric:  # the backward direction over one anchor is log(e) - 1 = 0; the rest halves
        in_batch, queue_part, hard_part = in_batch / 2, queue_part / 2, hard_part / 2
    assert math.isclose(float(parts["in_batch"]), in_batch, rel_tol=1e-6)
    assert math.isclose(float(parts["queue"]), queue_part, rel_tol=1e-6)
    assert math.isclose(float(parts["hard"]), hard_part, rel_tol=1e-6)
    assert math.isclose(float(loss), in_batch + queue_part + hard_part, rel_tol=1e-6)


def test_doc_mask_never_drops_the_positive_and_temperature_scales():
    anchors = torch.tensor([[1.0, 0.0], [0.0, 1.0]])
    docs = torch.tensor([[0.6, 0.8], [0.0, 1.0], [1.0, 0.0]])
    doc_mask = torch.tensor([[False, False, True], [True, False, True]])
    _, parts = queue_infonce_loss(anchors, docs, temperature=0.5, doc_mask=doc_mask, reduction="sum")
    # anchor 0: positive 0.6 (kept despite the mask) vs 1.0; anchor 1: positive 1.0 vs 0.8 and 0.0
    expected = (math.log(math.exp(1.2) + math.exp(2.0)) - 1.2) + (math.log(math.exp(2.0) + math.exp(1.6) + 1) - 2.0)
    assert math.isclose(float(parts["in_batch"]), expected, rel_tol=1e-6)
    assert float(parts["queue"]) == float(parts["hard"]) == 0.0


def test_miner_hand_computed():
    anchors = torch.tensor([[1.0, 0.0]])
    keys = torch.nn.functional.normalize(torch.tensor([[1.0, 0.1], [0.9, 0.5], [0.5, 0.9], [0.0, 1.0], [1.0, 0.0]]), dim=1)
    scores = (anchors @ keys.T)[0]  # 0.995, 0.874, 0.486, 0.0, 1.0
    positive = torch.tensor([0.9])
    filters = FalseNegativeFilters(relative_margin=None, perc_pos=1.0)
    miner = HardNegativeMiner(MiningConfig(num_hard_negatives=2), filters)
    mined = miner.select(anchors, positive, keys, 0, key_ids=torch.tensor([1, 2, 3, 4, 7]), positive_ids=torch.tensor([7]))
    # rows 0 (0.995 > 0.9) and 4 (the positive's own id, and above 0.9) are filtered; hardest two left: 1, 2
    assert mined.hard_index.tolist() == [[1, 2]]
    assert mined.queue_mask.tolist() == [[False, False, False, True, False]]  # row 0 stays out, 1-2 moved to hard
    assert scores[1] > scores[2] > scores[3]
    schedule = HardnessSchedule(start=0.0, end=1.0, warmup_steps=10, pool_factor=3)
    easy = HardNegativeMiner(MiningConfig(num_hard_negatives=1, hardness_schedule=schedule), filters)
    # step 0: hardness 0 -> offset (3 - 1) * 1 = 2: the third-hardest kept row (row 3)
    assert easy.select(anchors, positive, keys, 0, key_ids=torch.tensor([1, 2, 3, 4, 7]),
                       positive_ids=torch.tensor([7])).hard_index.tolist() == [[3]]
    only_hard = HardNegativeMiner(MiningConfig(num_hard_negatives=2, use_queue_negatives=False, mining_backend="torch"), filters)
    got = only_hard.select(anchors, positive, keys, 0, key_ids=torch.tensor([1, 2, 3, 4, 7]), positive_ids=torch.tensor([7]),
                           keep=torch.tensor([[True, False, True, True, True]]))
    assert got.queue_mask is None and got.hard_index.tolist() == [[2, 3]]  # the outside keep mask vetoes row 1
