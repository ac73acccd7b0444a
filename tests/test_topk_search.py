"""The one exact top-k search: the retrieval scorer's ``exact_search``, the torch path of
``search_topk`` and ``CorpusIndex.search_embeddings`` return the same ids and scores, ties
included (higher score first, then the lower corpus index); a chunked search equals an unchunked one;
one ``top_k`` check."""

from __future__ import annotations

import pytest
import torch

from contrastive_bert.evaluation.dense_retrieval import exact_search
from contrastive_bert.inference.corpus_index import CorpusIndex
from contrastive_bert.topk_search import check_top_k, exact_topk, search_topk, stable_topk


def _tied_case(queries: int = 7, documents: int = 61, seed: int = 0) -> tuple[torch.Tensor, torch.Tensor]:
    """Rows drawn from 24 exactly unit vectors in 4 dimensions (entries +-0.5, or one +-1): norms
    are exactly 1 and every inner product a multiple of 0.25, so normalising changes nothing, every
    score is exact, and the many repeated documents tie exactly."""
    signs = torch.tensor([[1 - 2 * ((i >> b) & 1) for b in range(4)] for i in range(16)], dtype=torch.float32) * 0.5
    axes = torch.cat([torch.eye(4), -torch.eye(4)])
    pool = torch.cat([signs, axes])
    generator = torch.Generator().manual_seed(seed)
    pick = lambda n: pool[torch.randint(len(pool), (n,), generator=generator)]  # noqa: E731
    return pick(queries), pick(documents)


def _full_sort(queries: torch.Tensor, documents: torch.Tensor, k: int) -> tuple[torch.Tensor, torch.Tensor]:
    full = torch.sort(queries @ documents.T, dim=1, descending=True, stable=True)
    return full.values[:, :k], full.indices[:, :k]


def test_the_three_callers_return_identical_results_with_ties():
    queries, documents = _tied_case()
    k = 20
    expected_scores, expected_ids = _full_sort(queries, documents, k)
    assert (expected_scores[:, -1] == _full_sort(queries, documents, k + 1)[0][:, -1]).all()  # every cut falls inside a tie
    index = CorpusIndex(None, [f"d{i}" for i in range(len(documents))], ["text"] * len(documents), documents,
                        probe=torch.zeros(4))
    results = {
        "exact_search": exact_search(queries, documents, top_k=k),
        "search_topk": search_topk(queries, documents, k, backend="torch"),
        "CorpusIndex": index.search_embeddings(queries, k),
    }
    for name, (scores, ids) in results.items():
        assert ids.dtype == torch.int64 and scores.shape == ids.shape == (len(queries), k), name
        assert torch.equal(ids, expected_ids), name
        assert torch.equal(scores, expected_scores), name


@pytest.mark.parametrize("chunk_size", [1, 4, 16, 60])
def test_a_chunked_search_equals_an_unchunked_one(chunk_size):
    queries, documents = _tied_case(seed=1)
    for k in (1, 9, 61, 100):
        whole = exact_topk(queries, documents, k, chunk_size=len(documents))
        assert torch.equal(whole[1], _full_sort(queries, documents, min(k, len(documents)))[1])
        for chunked in (exact_topk(queries, documents, k, chunk_size=chunk_size),
                        search_topk(queries, documents, k, backend="torch", chunk_size=chunk_size),
                        exact_search(queries, documents, top_k=k, chunk_size=chunk_size)):
            assert torch.equal(chunked[0], whole[0]) and torch.equal(chunked[1], whole[1]), (chunk_size, k)


def test_exact_topk_keeps_the_queries_dtype_and_clamps_k():
    queries, documents = _tied_case(queries=3, documents=5)
    scores, ids = exact_topk(queries.double(), documents, 50, chunk_size=2)
    assert scores.dtype == torch.float64 and ids.shape == (3, 5)
    empty_scores, empty_ids = exact_topk(queries, documents[:0], 3)
    assert empty_scores.shape == empty_ids.shape == (3, 0) and empty_ids.dtype == torch.int64
    with pytest.raises(ValueError, match="^chunk_size: expected a positive int, got 0$"):
        exact_topk(queries, documents, 3, chunk_size=0)
    with pytest.raises(ValueError, match="^queries/keys: "):
        exact_topk(queries, documents[:, :3], 3)


def test_nan_ranks_first_as_in_torch_topk():
    nan = float("nan")
    scores = torch.tensor([[0.1, nan, 0.5, nan], [nan, nan, nan, 0.2]])
    values, positions = stable_topk(scores, 3)
    assert positions.tolist() == [[1, 3, 2], [0, 1, 2]]
    assert stable_topk(scores, 1)[1].tolist() == [[1], [0]]
    assert values[0, 2].item() == 0.5


def test_one_top_k_check():
    assert check_top_k(3) == 3
    for bad in (0, -1, True, 2.0, "3"):
        with pytest.raises(ValueError, match=f"^top_k: expected a positive int, got {bad!r}$"):
            check_top_k(bad)
    queries, documents = _tied_case(queries=2, documents=4)
    with pytest.raises(ValueError, match="^k: expected a positive int"):
        search_topk(queries, documents, True)
    with pytest.raises(ValueError, match="^top_k: "):
        exact_search(queries, documents, top_k=0)
    index = CorpusIndex(None, ["a", "b", "c", "d"], ["t"] * 4, documents, probe=torch.zeros(4))
    with pytest.raises(ValueError, match="^top_k: "):
        index.search_embeddings(queries, 0)
