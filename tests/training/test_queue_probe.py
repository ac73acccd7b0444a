"""QueueNegativeProbe counts, on a hand-built queue, the false negatives, ages, gaps and weights of
the negatives the miner chooses, without changing them."""

import pytest
import torch
import torch.nn.functional as F

from contrastive_bert.losses import QueueInfoNCELoss
from contrastive_bert.training.queue_probe import QueueNegativeProbe


def _loss_with_queue(tiny_model, **options):
    loss = QueueInfoNCELoss(tiny_model, queue_size=4, relative_margin=None, filter_same_anchor=False, **options)
    dim = loss.dim
    keys = torch.zeros(4, dim)
    for row in range(4):
        keys[row, 0] = 1.0
        keys[row, 1] = 0.2 * row  # row 0 is the closest to the anchor (e0), row 3 the farthest
    loss.ensure_queue(2)
    loss.queue.enqueue(F.normalize(keys[:2], dim=1), ids=torch.tensor([10, 11]))  # the older batch
    loss.queue.enqueue(F.normalize(keys[2:], dim=1), ids=torch.tensor([12, 13]))  # the last batch
    return loss, dim


def _anchors(dim):
    anchors = torch.zeros(2, dim)
    anchors[:, 0] = 1.0
    return anchors


def test_probe_counts_false_negatives_age_and_gap(tiny_model):
    loss, dim = _loss_with_queue(tiny_model, num_hard_negatives=2, hard_negative_share=0.2)
    probe = QueueNegativeProbe(loss, relevant={100: {10}, 101: set()})
    queue, ids, _ = loss.queue.filled()
    anchors = _anchors(dim)
    positive_scores = torch.tensor([1.0, 1.0])
    mined = loss.miner.select(anchors, positive_scores, queue, 5, key_ids=ids, anchor_ids=torch.tensor([100, 101]),
                              positive_ids=torch.tensor([200, 201]))
    probe.close()
    assert mined.hard_index.tolist() == [[0, 1], [0, 1]]  # the probe changes nothing the miner chose
    record = probe.steps[0]
    assert record["step"] == 5 and record["fill"] == 4 and record["full"]
    # hard rows 0 and 1 were enqueued one batch before the last: 2 steps ago
    assert record["age"] == 2.0
    # anchor 100 has row 0 (id 10) judged relevant among its 2 hard negatives; anchor 101 none: 1 of 4
    assert record["hard_relevant"] == 0.25
    cos = [1.0, 1.0 / (1 + 0.04) ** 0.5]
    assert abs(record["hard_score"] - sum(cos) / 2) < 1e-6
    assert abs(record["gap"] - (1.0 - sum(cos) / 2)) < 1e-6
    assert record["distinct"] == 1.0
    # the plain negatives are the 2 rows left: n_other = (b - 1) + 2 = 3, w = 0.2 / 0.8 * 3 / 2
    assert record["queue_kept"] == 2.0
    assert abs(record["weight"] - 0.375) < 1e-6
    assert record["queue_relevant"] == 0.0
    summary = probe.summary()
    assert summary["steps"] == 1 and summary["steps_with_full_queue"] == 1
    assert summary["full"]["hard_relevant"] == 0.25


def test_probe_counts_stale_copies_of_one_text(tiny_model):
    loss, dim = _loss_with_queue(tiny_model, num_hard_negatives=2)
    loss.queue.queue_ids[:] = torch.tensor([7, 7, 8, 9])  # rows 0 and 1: two copies of one document
    probe = QueueNegativeProbe(loss)
    queue, ids, _ = loss.queue.filled()
    loss.miner.select(_anchors(dim), torch.tensor([1.0, 1.0]), queue, 0, key_ids=ids)
    assert probe.steps[0]["distinct"] == 0.5
    assert probe.steps[0]["hard_relevant"] is None  # no relevance map given
    assert "weight" not in probe.steps[0]  # no hard_negative_share: every negative counts once


def test_the_probe_records_both_sides_gradient_norms(tiny_model):
    """Per training call, ||dL/d anchors|| and ||dL/d documents|| over the call's own rows, equal to
    autograd's gradients of the loss on the normalised embeddings."""
    loss = QueueInfoNCELoss(tiny_model, queue_size=8, relative_margin=None)
    probe = QueueNegativeProbe(loss)
    anchors, docs = torch.randn(3, loss.dim, requires_grad=True), torch.randn(3, loss.dim, requires_grad=True)
    total = sum(loss.compute_loss_from_embeddings([anchors, docs]).values())
    a, d = F.normalize(anchors, dim=1), F.normalize(docs, dim=1)
    expected = F.cross_entropy(a @ d.T / 0.05, torch.arange(3))
    grad_a, grad_d = torch.autograd.grad(expected, [a, d])
    total.backward()
    assert probe.gradient_norms[0] == pytest.approx([float(grad_a.norm()), float(grad_d.norm())], rel=1e-5)
    summary = probe.summary()["gradient_norms"]
    assert summary["calls"] == 1 and summary["document_over_anchor"] == pytest.approx(float(grad_d.norm() / grad_a.norm()), rel=1e-5)
    probe.close()
    assert loss.gradient_norms is None
