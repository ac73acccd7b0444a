"""With the new terms off, the refactored queue losses equal the pre-refactor implementation.

The expected values were computed by the pre-refactor ``QueueInfoNCELoss`` /
``CachedQueueInfoNCELoss`` (the 535-line module as of commit 0ca4d09) on exactly these inputs: the
script built the same inputs and printed ``float(part)`` for each part. They are hard-coded here so
that any later change of the math shows up as a failure at 1e-6.
"""

from __future__ import annotations

import copy

import pytest
import torch

from contrastive_bert.losses.cached_queue_infonce import CachedQueueInfoNCELoss
from contrastive_bert.losses.queue_infonce import QueueInfoNCELoss

D = 32
BEFORE = {
    "default": {"in_batch": 0.8632604479789734, "queue": 1.5221751928329468, "hard": 0.0},
    "hard4": {"in_batch": 0.8632604479789734, "queue": 1.3077524900436401, "hard": 0.2144225388765335},
    "hard4_share": {"in_batch": 0.8632604479789734, "queue": 1.3077524900436401, "hard": 0.35481396317481995},
    "hard4_share_sym_triplets": {"in_batch": 1.1543803215026855, "queue": 0.4593304693698883, "hard": 0.17541879415512085},
    "hard4_only_torch": {"in_batch": 0.8632604479789734, "queue": 0.0, "hard": 0.6338880658149719},
    "hard3_margins_unfiltered_queue": {"in_batch": 0.8632604479789734, "queue": 1.484776496887207, "hard": 0.1427697390317917},
    "curriculum": {"in_batch": 0.8632604479789734, "queue": 1.4396206140518188, "hard": 0.08255445957183838},
    "same_label": {"in_batch": 0.8632604479789734, "queue": 1.2413643598556519, "hard": 0.5564040541648865},
    "no_filters": {"in_batch": 0.028111377730965614, "queue": 0.19019357860088348, "hard": 0.6762857437133789},
}
OPTIONS = {
    "default": {},
    "hard4": {"num_hard_negatives": 4},
    "hard4_share": {"num_hard_negatives": 4, "hard_negative_share": 0.2},
    "hard4_share_sym_triplets": {"num_hard_negatives": 4, "hard_negative_share": 0.2, "symmetric": True},
    "hard4_only_torch": {"num_hard_negatives": 4, "use_queue_negatives": False, "mining_backend": "torch"},
    "hard3_margins_unfiltered_queue": {"num_hard_negatives": 3, "absolute_margin": 0.1, "max_score": 0.5,
                                       "filter_queue_negatives": False, "relative_margin": None},
    "curriculum": {"num_hard_negatives": 2,
                   "hardness_schedule": {"start": 0.0, "end": 1.0, "warmup_steps": 10, "pool_factor": 3}},
    "same_label": {"num_hard_negatives": 2, "filter_same_label": True, "hard_negative_share": 0.3},
    "no_filters": {"num_hard_negatives": 2, "relative_margin": None, "filter_same_anchor": False, "temperature": 0.1},
}
FORWARD_BEFORE = [
        {"in_batch": 1.552107810974121, "queue": 0.0, "hard": 0.0},
        {"in_batch": 1.54598867893219, "queue": 0.0, "hard": 0.07047595828771591},
        {"in_batch": 1.5658085346221924, "queue": 0.06478819996118546, "hard": 0.03879251331090927},
]
CACHED_FORWARD_BEFORE = [
        {"in_batch": 1.5334067344665527, "queue": 0.0, "hard": 0.0},
        {"in_batch": 1.5622639656066895, "queue": 0.0, "hard": 0.10402131080627441},
        {"in_batch": 1.549478530883789, "queue": 0.12612061202526093, "hard": 0.1782834529876709},
]
ANCHORS = ["a cat sits on the mat", "the dog runs fast", "the sky is blue today", "I like green tea", "trains are late"]
POSITIVES = ["a kitten rests on a rug", "a dog is running", "blue sky", "tea is what I love", "the train is delayed"]


def _inputs(negatives: bool, B: int = 6, n: int = 30):
    """Anchors, noisy positives, a queue with rows near the anchors and near the positives (same
    ids as the positives for the first B rows), groups with earlier positives of 3 anchors."""
    g = torch.Generator().manual_seed(0)
    anchors = torch.randn(B, D, generator=g)
    positives = anchors + 1.5 * torch.randn(B, D, generator=g)
    columns = [anchors, positives] + ([torch.randn(B, D, generator=g)] if negatives else [])
    rows = torch.randn(n, D, generator=g)
    rows[:B] = anchors + 0.6 * torch.randn(B, D, generator=g)
    rows[B:2 * B] = positives + 0.2 * torch.randn(B, D, generator=g)
    anchor_ids = torch.arange(B) + 100
    groups = torch.arange(n) % 4 + 500
    groups[2 * B:2 * B + 3] = anchor_ids[:3]
    return columns, rows, torch.arange(n) + 1000, groups, anchor_ids, torch.arange(B) + 1000


@pytest.mark.parametrize("name", sorted(BEFORE))
def test_parts_equal_the_pre_refactor_loss(tiny_model, name):
    loss = QueueInfoNCELoss(tiny_model, queue_size=30, **{"temperature": 0.5, **OPTIONS[name]})
    columns, rows, ids, groups, anchor_ids, positive_ids = _inputs(negatives="triplets" in name)
    loss.queue.enqueue(rows, ids=ids, labels=groups)
    if name == "curriculum":
        loss.num_steps.fill_(3)
    labels = torch.tensor([500, 501, 502, 503, 500, 501]) if name == "same_label" else None
    parts = loss.compute_loss_from_embeddings(columns, labels, anchor_ids=anchor_ids, positive_ids=positive_ids)
    for part, expected in BEFORE[name].items():
        assert abs(float(parts[part]) - expected) <= 1e-6, (part, float(parts[part]), expected)


@pytest.mark.parametrize("cls", [QueueInfoNCELoss, CachedQueueInfoNCELoss], ids=["plain", "cached"])
def test_training_steps_equal_the_pre_refactor_loss(tiny_model, cls):
    """Three training steps (dropout on, momentum encoder, enqueue) with the model moved in between."""
    model = copy.deepcopy(tiny_model)
    model.train()
    torch.manual_seed(0)
    extra = {"mini_batch_size": 2} if cls is CachedQueueInfoNCELoss else {}
    loss = cls(model, queue_size=12, temperature=0.5, num_hard_negatives=2, hard_negative_share=0.2, momentum=0.9, **extra)
    expected_steps = CACHED_FORWARD_BEFORE if cls is CachedQueueInfoNCELoss else FORWARD_BEFORE
    for step, expected in enumerate(expected_steps):
        features = [model.preprocess(ANCHORS[step:] + ANCHORS[:step]), model.preprocess(POSITIVES[step:] + POSITIVES[:step])]
        parts = loss(features, None)
        sum(parts.values()).backward()
        for part, value in expected.items():
            assert abs(float(parts[part].detach()) - value) <= 1e-6, (step, part)
        with torch.no_grad():
            for p in model.parameters():
                p.add_(0.01 * (step + 1))
