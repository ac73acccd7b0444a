"""EmbeddingQueue: empty start, wrap-around order, fill count, ids/labels, state_dict, errors."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from contrastive_bert.queue import NO_ID, EmbeddingQueue, default_queue_size, hash_texts, hash_token_ids


def _rows(start: int, n: int, dim: int = 4) -> torch.Tensor:
    """Rows whose first coordinate encodes their index (so order is checkable after normalising)."""
    x = torch.zeros(n, dim)
    x[:, 0] = torch.arange(start, start + n, dtype=torch.float32) + 1.0
    x[:, 1] = 1.0
    return x


def _first_coord_ids(queue: EmbeddingQueue) -> list[int]:
    e = queue.embeddings
    return torch.round(e[:, 0] / e[:, 1] - 1.0).long().tolist()


def test_starts_empty_and_never_exposes_unfilled_rows():
    queue = EmbeddingQueue(8, 4)
    assert len(queue) == 0
    assert queue.embeddings.shape == (0, 4)
    queue.enqueue(_rows(0, 3))
    assert len(queue) == 3
    emb, ids, labels = queue.filled()
    assert emb.shape == (3, 4) and ids.shape == (3,) and labels.shape == (3,)
    assert (ids == NO_ID).all()


@pytest.mark.parametrize("batch", [1, 3, 5, 8])
def test_wrap_around_keeps_the_last_k_in_order(batch):
    size = 8
    queue = EmbeddingQueue(size, 4)
    seen: list[int] = []
    for step in range(7):
        queue.enqueue(_rows(step * batch, batch), ids=torch.arange(step * batch, (step + 1) * batch))
        seen.extend(range(step * batch, (step + 1) * batch))
        expected = seen[-size:]
        assert len(queue) == len(expected)
        assert _first_coord_ids(queue) == expected
        assert queue.ids.tolist() == expected
    assert int(queue.queue_ptr) == (7 * batch) % size


def test_entries_are_detached_normalised_and_follow_dtype():
    queue = EmbeddingQueue(4, 3)
    x = torch.randn(2, 3, dtype=torch.float64, requires_grad=True) * 10
    queue.enqueue(x)
    assert not queue.embeddings.requires_grad
    assert queue.embeddings.dtype == torch.float64
    torch.testing.assert_close(queue.embeddings, F.normalize(x.detach(), dim=1))
    # once filled, later batches are cast to the queue's dtype
    queue.enqueue(torch.randn(1, 3, dtype=torch.float32))
    assert queue.embeddings.dtype == torch.float64 and len(queue) == 3


def test_ids_from_texts_and_labels():
    queue = EmbeddingQueue(4, 2)
    queue.enqueue(torch.randn(2, 2), ids=["a b", "c"], labels=[3, 4])
    assert queue.ids.tolist() == hash_texts(["a b", "c"]).tolist()
    assert queue.labels.tolist() == [3, 4]
    assert hash_texts(["x"]).item() == hash_texts(["x"]).item() != hash_texts(["y"]).item()


def test_hash_token_ids_ignores_padding_and_separates_texts():
    ids = torch.tensor([[101, 7, 8, 102, 0, 0], [101, 7, 8, 102, 0, 0], [101, 8, 7, 102, 0, 0]])
    mask = (ids != 0).long()
    padded_more = torch.tensor([[101, 7, 8, 102]])
    h = hash_token_ids(ids, mask)
    assert h[0] == h[1] != h[2]
    assert hash_token_ids(padded_more, torch.ones_like(padded_more))[0] == h[0]


def test_state_dict_round_trip():
    queue = EmbeddingQueue(5, 3)
    queue.enqueue(torch.randn(4, 3), ids=torch.arange(4), labels=torch.tensor([1, 1, 2, 2]))
    queue.enqueue(torch.randn(3, 3), ids=torch.arange(4, 7))
    state = queue.state_dict()
    assert set(state) == {"queue_embeddings", "queue_ids", "queue_labels", "queue_ptr", "queue_fill"}
    restored = EmbeddingQueue(5, 3)
    restored.load_state_dict(state)
    assert len(restored) == len(queue) == 5
    torch.testing.assert_close(restored.embeddings, queue.embeddings)
    assert restored.ids.tolist() == queue.ids.tolist() == [2, 3, 4, 5, 6]
    assert restored.labels.tolist() == queue.labels.tolist()
    # a differently sized queue adopts the saved size
    other = EmbeddingQueue(9, 3)
    other.load_state_dict(state)
    assert other.size == 5 and other.ids.tolist() == [2, 3, 4, 5, 6]


def test_restoring_a_queue_with_another_dim_fails():
    state = EmbeddingQueue(4, 3).state_dict()
    with pytest.raises(ValueError, match="embedding size"):
        EmbeddingQueue(4, 5).load_state_dict(state)


def test_bad_sizes_and_inputs():
    with pytest.raises(ValueError, match="size"):
        EmbeddingQueue(0, 4)
    with pytest.raises(ValueError, match="dim"):
        EmbeddingQueue(4, -1)
    queue = EmbeddingQueue(4, 2)
    with pytest.raises(ValueError, match="size: the queue holds 4 rows"):
        queue.enqueue(torch.randn(5, 2))
    with pytest.raises(ValueError, match="dim"):
        queue.enqueue(torch.randn(2, 3))
    with pytest.raises(ValueError, match="ids: expected 2 values"):
        queue.enqueue(torch.randn(2, 2), ids=[1])
    with pytest.raises(ValueError, match="NaN"):
        queue.enqueue(torch.tensor([[float("nan"), 1.0]]))
    assert len(queue) == 0


def test_default_queue_size_rule():
    assert default_queue_size(10_000, 64) == 625  # 4 * 10000 / 64
    assert default_queue_size(10**9, 64) == 65536  # cap
    assert default_queue_size(100, 64) == 64  # never below one batch
    with pytest.raises(ValueError, match="batch_size"):
        default_queue_size(100, 0)
    with pytest.raises(ValueError, match="dataset_size"):
        default_queue_size(-1, 32)


def test_reset_empties():
    queue = EmbeddingQueue(4, 2)
    queue.enqueue(torch.randn(3, 2))
    queue.reset()
    assert len(queue) == 0 and int(queue.queue_ptr) == 0


def test_newest_copies_keeps_the_freshest_row_of_each_id_across_the_wrap():
    queue = EmbeddingQueue(size=4, dim=2)
    queue.enqueue(torch.randn(2, 2), ids=torch.tensor([1, 2]))
    queue.enqueue(torch.randn(2, 2), ids=torch.tensor([1, 3]))
    assert queue.newest_copies().tolist() == [False, True, True, True]  # storage [1, 2, 1, 3]
    queue.enqueue(torch.randn(1, 2), ids=torch.tensor([2]))  # overwrites storage row 0: [2, 2, 1, 3]
    assert queue.filled()[1].tolist() == [2, 2, 1, 3]
    assert queue.newest_copies().tolist() == [True, False, True, True]  # row 0 is the newer id 2
    queue.enqueue(torch.randn(2, 2))  # rows without ids: [2, NO_ID, NO_ID, 3]
    assert queue.newest_copies().tolist() == [True, True, True, True]
