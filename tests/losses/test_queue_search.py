"""Hard-negative retrieval: FAISS exact == torch top-k, filters, curriculum, clamping."""

from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F

from contrastive_bert.topk_search import (
    HardnessSchedule,
    ScoreMargins,
    faiss_available,
    false_negative_mask,
    search_hard_negatives,
    search_topk,
)
from contrastive_bert.queue import NO_ID

needs_faiss = pytest.mark.skipif(not faiss_available(), reason="faiss not installed")


def _data(q: int = 16, n: int = 300, dim: int = 24, seed: int = 0):
    g = torch.Generator().manual_seed(seed)
    return F.normalize(torch.randn(q, dim, generator=g), dim=1), F.normalize(torch.randn(n, dim, generator=g), dim=1)


@needs_faiss
@pytest.mark.parametrize("k", [1, 10, 50])
def test_faiss_exact_topk_equals_torch(k):
    queries, keys = _data()
    f_scores, f_idx = search_topk(queries, keys, k, backend="faiss")
    t_scores, t_idx = search_topk(queries, keys, k, backend="torch")
    assert torch.equal(f_idx, t_idx)
    torch.testing.assert_close(f_scores, t_scores, atol=1e-5, rtol=1e-5)
    brute = torch.topk(queries @ keys.T, k, dim=1)
    assert torch.equal(t_idx, brute.indices)


@needs_faiss
@pytest.mark.parametrize("index_type", ["ivf", "hnsw"])
def test_approximate_indexes_mostly_agree(index_type):
    queries, keys = _data(n=2000)
    _, exact = search_topk(queries, keys, 10, backend="torch")
    _, approx = search_topk(queries, keys, 10, backend="faiss", index_type=index_type)
    recall = sum(len(set(a.tolist()) & set(e.tolist())) for a, e in zip(approx, exact)) / exact.numel()
    assert recall > 0.8


def test_k_is_clamped_to_the_number_of_keys():
    queries, keys = _data(n=5)
    scores, idx = search_topk(queries, keys, 50, backend="torch")
    assert idx.shape == (16, 5)
    with pytest.raises(ValueError, match="k: expected a positive int"):
        search_topk(queries, keys, 0)
    with pytest.raises(ValueError, match="backend"):
        search_topk(queries, keys, 3, backend="annoy")


def test_false_negative_mask_rules():
    scores = torch.tensor([[0.9, 0.7, 0.5, 0.2], [0.9, 0.7, 0.5, 0.2]])
    positive = torch.tensor([0.8, 0.8])
    cand_ids = torch.tensor([10, 11, 12, NO_ID])
    anchor_ids = torch.tensor([11, NO_ID])
    positive_ids = torch.tensor([NO_ID, 12])
    keep = false_negative_mask(scores, positive, cand_ids, anchor_ids, positive_ids)
    # same id as anchor (row 0, col 1) or positive (row 1, col 2) dropped; NO_ID never matches
    assert keep.tolist() == [[True, False, True, True], [True, True, False, True]]
    keep = false_negative_mask(scores, positive, margins=ScoreMargins(absolute_margin=0.05))  # score <= 0.75
    assert keep[0].tolist() == [False, True, True, True]
    keep = false_negative_mask(scores, positive, margins=ScoreMargins(relative_margin=0.25))  # score <= 0.8 - 0.2 = 0.6
    assert keep[0].tolist() == [False, False, True, True]
    keep = false_negative_mask(scores, positive, margins=ScoreMargins(max_score=0.6))
    assert keep[0].tolist() == [False, False, True, True]
    labels = torch.tensor([1, 2, 1, 3])
    keep = false_negative_mask(scores, positive, candidate_labels=labels, anchor_labels=torch.tensor([1, 3]))
    assert keep.tolist() == [[False, True, False, True], [True, True, True, False]]
    with pytest.raises(ValueError, match=r"^relative_margin: expected a number in \[0, 1\] or null, got 1.5$"):
        ScoreMargins(relative_margin=1.5)
    with pytest.raises(ValueError, match="^absolute_margin: expected a finite number or null, got nan$"):
        ScoreMargins(absolute_margin=float("nan"))


@pytest.mark.parametrize("backend", ["torch", pytest.param("faiss", marks=needs_faiss)])
def test_mined_negatives_exclude_paraphrases_of_the_positive(backend):
    queries, keys = _data(q=8, n=200)
    positives = queries.clone()
    keys[:8] = positives  # the queue holds the positives themselves
    key_ids = torch.arange(200)
    pos_scores = (queries * positives).sum(1)
    idx = search_hard_negatives(
        queries, pos_scores, keys, 5, key_ids=key_ids, positive_ids=torch.arange(8), margins=ScoreMargins(relative_margin=0.05),
        backend=backend,
    )
    assert idx.shape == (8, 5)
    for row in range(8):
        assert row not in idx[row].tolist()  # own positive never a negative
        assert (keys[idx[row]] @ queries[row] <= pos_scores[row] * 0.95 + 1e-6).all()
    # exact search and torch give the same hard negatives
    ref = search_hard_negatives(
        queries, pos_scores, keys, 5, key_ids=key_ids, positive_ids=torch.arange(8), margins=ScoreMargins(relative_margin=0.05),
        scores=queries @ keys.T,
    )
    assert torch.equal(idx, ref)


def test_clamping_when_too_few_candidates_survive():
    queries, keys = _data(q=3, n=4)
    idx = search_hard_negatives(queries, torch.ones(3), keys, 6)
    assert idx.shape == (3, 6)
    assert (idx[:, 4:] == -1).all() and (idx[:, :4] >= 0).all()


def test_hardness_schedule_moves_from_easy_to_hard():
    schedule = HardnessSchedule(start=0.0, end=1.0, warmup_steps=10, pool_factor=4)
    assert schedule.offset(0, 5) == 15  # ranks [15, 20): easier
    assert schedule.offset(5, 5) == 8
    assert schedule.offset(10, 5) == 0 and schedule.offset(99, 5) == 0
    queries, keys = _data(q=4, n=100)
    scores = queries @ keys.T
    hard = search_hard_negatives(queries, torch.ones(4), keys, 5, scores=scores, offset=0)
    easy = search_hard_negatives(queries, torch.ones(4), keys, 5, scores=scores, offset=15)
    assert torch.equal(hard, torch.topk(scores, 5).indices)
    assert torch.equal(easy, torch.topk(scores, 20).indices[:, 15:])
    assert (scores.gather(1, easy).max(1).values <= scores.gather(1, hard).min(1).values).all()
    with pytest.raises(ValueError, match="start"):
        HardnessSchedule(start=1.5)
    with pytest.raises(ValueError, match="warmup_steps"):
        HardnessSchedule(warmup_steps=-1)
    assert math.isclose(HardnessSchedule().hardness(0), 1.0)
