"""The false-negative filters added to the queue losses: the guide model (as GISTEmbedLoss) and
positive-aware filtering (NV-Retriever's TopK-PercPos), on hand-built cases and against
sentence-transformers' GISTEmbedLoss; off = the loss without them."""

from __future__ import annotations

import copy
import math

import pytest
import torch
import torch.nn.functional as F
from sentence_transformers.sentence_transformer.losses import GISTEmbedLoss

from contrastive_bert.losses.cached_queue_infonce import CachedQueueInfoNCELoss
from contrastive_bert.losses.queue_infonce import QueueInfoNCELoss
from contrastive_bert.topk_search import ScoreMargins, false_negative_mask

ANCHORS = ["a cat sits on the mat", "the dog runs fast", "the sky is blue today", "I like green tea"]
POSITIVES = ["a kitten rests on a rug", "a dog is running", "blue sky", "tea is what I love"]
NEGATIVES = ["a car drives by", "stocks fell", "it rains", "coffee is bitter"]


def _guide(model, seed: int = 1):
    """Another encoder: the tiny model with perturbed weights."""
    guide = copy.deepcopy(model)
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for p in guide.parameters():
            p.add_(0.5 * p.std().nan_to_num(0.02) * torch.randn(p.shape, generator=g))
    return guide


def _basis(*weights: tuple[int, float]) -> torch.Tensor:
    v = torch.zeros(32)
    for index, w in weights:
        v[index] = w
    return F.normalize(v, dim=0)


def test_perc_pos_hand_computed():
    scores = torch.tensor([[0.50, 0.77, 0.75], [-0.30, -0.195, -0.18]])
    positive = torch.tensor([0.8, -0.2])
    keep = false_negative_mask(scores, positive, margins=ScoreMargins(perc_pos=0.95))  # thresholds 0.76 and -0.19
    assert keep.tolist() == [[True, False, True], [True, True, False]]
    # relative_margin = 0.05 is the same rule for the positive score, not for the negative one (-0.21)
    keep = false_negative_mask(scores, positive, margins=ScoreMargins(relative_margin=0.05))
    assert keep.tolist() == [[True, False, True], [True, False, False]]
    with pytest.raises(ValueError, match=r"^perc_pos: expected a number in \(0, 1\] or null, got 0.0$"):
        ScoreMargins(perc_pos=0.0)


def test_perc_pos_in_the_loss_matches_the_hand_mask(tiny_model):
    """Each anchor's queue negatives and hard negatives are the rows at or below 0.9 x its positive score."""
    torch.manual_seed(3)
    anchors = torch.randn(3, 32)
    positives = anchors + 0.5 * torch.randn(3, 32)
    rows = torch.cat([anchors + 0.3 * torch.randn(3, 32), torch.randn(9, 32)])
    loss = QueueInfoNCELoss(tiny_model, queue_size=12, temperature=0.2, num_hard_negatives=2,
                            relative_margin=None, perc_pos=0.9)
    loss.queue.enqueue(rows)
    parts = loss.compute_loss_from_embeddings([anchors, positives])
    a, p, q = F.normalize(anchors, dim=1), F.normalize(positives, dim=1), F.normalize(rows, dim=1)
    expected = 0.0
    for i in range(3):
        pos = float(a[i] @ p[i])
        kept = [j for j in range(12) if float(a[i] @ q[j]) <= 0.9 * pos]
        assert len(kept) < 12  # the filter does something here
        terms = [float(a[i] @ p[j]) for j in range(3)] + [float(a[i] @ q[j]) for j in kept]
        expected += -pos / 0.2 + math.log(sum(math.exp(t / 0.2) for t in terms))
    assert math.isclose(float(sum(parts.values())), expected / 3, rel_tol=1e-5)
    assert parts["hard"] > 0


def test_guide_filter_hand_built_case(tiny_model):
    """Guide vectors built from basis directions: anchor 0's guide ranks negative 0 and queue row 0
    above its positive, anchor 1's guide ranks queue row 1 above its positive; only those go."""
    torch.manual_seed(0)
    anchors, positives, negatives = torch.randn(2, 32), torch.randn(2, 32), torch.randn(2, 32)
    rows = torch.randn(3, 32)
    rows[0] = anchors[0] + 0.1 * torch.randn(32)  # the model's hardest row for anchor 0
    e = lambda *w: _basis(*w)  # noqa: E731
    guide = [torch.stack([e((0, 1)), e((1, 1))]),  # anchors
             torch.stack([e((0, 1), (2, 1)), e((1, 1), (3, 1))]),  # positives: guide similarity 0.707
             torch.stack([e((0, 1)), e((3, 1))])]  # negatives: the first is anchor 0's false negative
    guide_rows = torch.stack([e((0, 1), (3, 0.1)), e((1, 1)), e((3, 1))])
    loss = QueueInfoNCELoss(tiny_model, queue_size=3, temperature=0.5, num_hard_negatives=1, relative_margin=None,
                            guide_model=_guide(tiny_model))
    loss.queue.enqueue(rows)
    loss.guide_queue.enqueue(guide_rows)
    parts = loss.compute_loss_from_embeddings([anchors, positives, negatives], guide_embeddings=guide)
    a, q = F.normalize(anchors, dim=1), F.normalize(rows, dim=1)
    docs = F.normalize(torch.cat([positives, negatives]), dim=1)
    kept_docs = {0: [0, 1, 3], 1: [0, 1, 2, 3]}
    kept_rows = {0: [1, 2], 1: [0, 2]}
    expected = 0.0
    for i in (0, 1):
        terms = [float(a[i] @ docs[j]) for j in kept_docs[i]] + [float(a[i] @ q[j]) for j in kept_rows[i]]
        expected += -float(a[i] @ docs[i]) / 0.5 + math.log(sum(math.exp(t / 0.5) for t in terms))
    assert math.isclose(float(sum(parts.values())), expected / 2, rel_tol=1e-5)
    assert parts["hard"] > 0  # anchor 0's hard negative is row 1 or 2, never the vetoed row 0


def test_guide_with_an_empty_queue_equals_gist_embed_loss(tiny_model):
    tiny_model.eval()
    guide = _guide(tiny_model)
    features = [tiny_model.preprocess(c) for c in (ANCHORS, POSITIVES, NEGATIVES)]
    gist = GISTEmbedLoss(tiny_model, guide, temperature=0.05, margin=0.02, contrast_anchors=False, contrast_positives=False)
    expected = gist([dict(f) for f in features], None)
    loss = QueueInfoNCELoss(tiny_model, queue_size=8, temperature=0.05, guide_model=guide, guide_margin=0.02)
    got = sum(loss([dict(f) for f in features], None).values())
    torch.testing.assert_close(got, expected)
    # the guide vetoes something here, so the filter is not a no-op
    plain = QueueInfoNCELoss(tiny_model, queue_size=8, temperature=0.05)
    assert not torch.isclose(sum(plain([dict(f) for f in features], None).values()), got)


def test_guide_queue_follows_the_queue_and_survives_a_checkpoint(tiny_model):
    tiny_model.train()
    loss = QueueInfoNCELoss(tiny_model, queue_size=6, num_hard_negatives=1, guide_model=_guide(tiny_model))
    features = [tiny_model.preprocess(ANCHORS), tiny_model.preprocess(POSITIVES)]
    for _ in range(2):
        sum(loss([dict(f) for f in features], None).values()).backward()
    assert len(loss.guide_queue) == len(loss.queue) == 6
    torch.testing.assert_close(loss.guide_queue.ids, loss.queue.ids)
    expected = loss.guide.embed([tiny_model.preprocess(POSITIVES)])[0]
    torch.testing.assert_close(loss.guide_queue.embeddings[-4:], expected)
    fresh = QueueInfoNCELoss(tiny_model, guide_model=_guide(tiny_model))
    fresh.load_queue_state_dict(loss.queue_state_dict())
    torch.testing.assert_close(fresh.guide_queue.embeddings, loss.guide_queue.embeddings)
    without = QueueInfoNCELoss(tiny_model, queue_size=6)
    without.load_queue_state_dict(loss.queue_state_dict())  # a guide queue is ignored without a guide
    with pytest.raises(ValueError, match="no guide embeddings"):
        fresh.load_queue_state_dict(without.queue_state_dict())


def test_guide_retokenizes_when_its_max_length_is_shorter(tiny_model):
    guide = _guide(tiny_model)
    same = QueueInfoNCELoss(tiny_model, guide_model=guide).guide
    short_guide = copy.deepcopy(guide)
    short_guide.max_seq_length = 16
    retokenizing = QueueInfoNCELoss(tiny_model, guide_model=short_guide).guide
    assert not same.must_retokenize and retokenizing.must_retokenize
    features = [tiny_model.preprocess(ANCHORS)]
    torch.testing.assert_close(retokenizing.embed(features)[0], same.embed(features)[0], atol=1e-5, rtol=1e-5)


def test_guide_model_by_name_loads_through_load_model(tiny_model, tiny_loader):
    loss = QueueInfoNCELoss(tiny_model, guide_model="default", guide_margin=0.1)
    assert tiny_loader == ["default"] and loss.guide.margin == 0.1
    assert not any(p.requires_grad for p in loss.guide.parameters())


def test_cached_with_guide_equals_uncached(tiny_model):
    tiny_model.eval()
    guide = _guide(tiny_model)
    features = [tiny_model.preprocess(c) for c in (ANCHORS, POSITIVES)]
    options = dict(queue_size=8, temperature=0.1, num_hard_negatives=2, hard_negative_share=0.2, guide_model=guide)
    plain = QueueInfoNCELoss(tiny_model, **options)
    rows = torch.randn(8, 32, generator=torch.Generator().manual_seed(0))
    plain.queue.enqueue(rows)
    plain.guide_queue.enqueue(torch.randn(8, 32, generator=torch.Generator().manual_seed(1)))
    total = sum(plain([dict(f) for f in features], None).values())
    total.backward()
    expected = {n: p.grad.clone() for n, p in tiny_model.named_parameters() if p.grad is not None}
    tiny_model.zero_grad()
    cached = CachedQueueInfoNCELoss(tiny_model, mini_batch_size=3, **options)
    cached.loss.load_queue_state_dict(plain.queue_state_dict())
    cached_total = sum(cached([dict(f) for f in features], None).values())
    torch.testing.assert_close(cached_total.detach(), total.detach())
    cached_total.backward()
    for name, grad in expected.items():
        torch.testing.assert_close(dict(tiny_model.named_parameters())[name].grad, grad, atol=1e-6, rtol=1e-4)


def test_distinct_queue_rows_counts_a_repeated_document_once(tiny_model):
    """A document enqueued twice: with ``distinct_queue_rows`` only its newest copy is a negative
    (hand-computed InfoNCE over the in-batch documents and the distinct queue rows); without it,
    both copies count."""
    torch.manual_seed(5)
    anchors, positives = torch.randn(2, 32), torch.randn(2, 32)
    stale, fresh, other = torch.randn(3, 32)
    ids = torch.tensor([7, 8, 7])  # rows 0 and 2 are the same document, row 2 the newer copy

    def loss_value(distinct: bool) -> float:
        loss = QueueInfoNCELoss(tiny_model, queue_size=8, temperature=0.1, relative_margin=None, distinct_queue_rows=distinct)
        loss.queue.enqueue(torch.stack([stale, other, fresh]), ids=ids)
        return float(sum(loss.compute_loss_from_embeddings([anchors, positives]).values()))

    def expected(queue_rows: list[torch.Tensor]) -> float:
        a, p = F.normalize(anchors, dim=1), F.normalize(positives, dim=1)
        q = F.normalize(torch.stack(queue_rows), dim=1)
        total = 0.0
        for i in range(2):
            terms = [float(a[i] @ p[j]) for j in range(2)] + [float(a[i] @ row) for row in q]
            total += -float(a[i] @ p[i]) / 0.1 + math.log(sum(math.exp(t / 0.1) for t in terms))
        return total / 2

    assert math.isclose(loss_value(True), expected([other, fresh]), rel_tol=1e-5)
    assert math.isclose(loss_value(False), expected([stale, other, fresh]), rel_tol=1e-5)
    with pytest.raises(ValueError, match="loss_options.distinct_queue_rows"):
        QueueInfoNCELoss(tiny_model, distinct_queue_rows="yes")
