"""Exact cosine search over a whole corpus, the search of the MTEB retrieval protocol.

:func:`exact_search` returns each query's top-k documents by cosine, equal scores in corpus order
(:func:`stable_topk`), in chunks of documents so that memory stays bounded. The retrieval scorer
that encodes, searches and scores is
:func:`contrastive_bert.evaluation.beir_evaluation.evaluate_retrieval_splits`.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch
import torch.nn.functional as F


def _as_matrix(embeddings: Any, name: str) -> torch.Tensor:
    tensor = embeddings if isinstance(embeddings, torch.Tensor) else torch.as_tensor(np.asarray(embeddings))
    if tensor.ndim != 2 or tensor.shape[0] == 0 or tensor.shape[1] == 0:
        raise ValueError(f"{name}: expected a non-empty (n, d) matrix, got shape {tuple(tensor.shape)}")
    if not tensor.is_floating_point():
        raise ValueError(f"{name}: expected floating-point embeddings, got {tensor.dtype}")
    if not torch.isfinite(tensor).all():
        raise ValueError(f"{name}: contains NaN or infinite values")
    return tensor.float()


def stable_topk(scores: torch.Tensor, k: int) -> tuple[torch.Tensor, torch.Tensor]:
    """The ``k`` largest entries of each row of ``scores`` (m, n), as ``(values (m, k), positions
    (m, k))`` sorted by value, descending; among equal values the lower position comes first, and
    a tie at the k-th value keeps the lowest positions (``torch.topk`` alone fixes neither)."""
    kth = torch.topk(scores, k, dim=1).values[:, -1:]
    above = scores > kth
    equal = scores == kth
    needed = k - above.sum(dim=1, keepdim=True)
    take = above | (equal & (equal.cumsum(dim=1) <= needed))
    positions = take.nonzero()[:, 1].view(scores.shape[0], k)  # row-major: ascending per row
    values = scores.gather(1, positions)
    order = torch.sort(values, dim=1, descending=True, stable=True).indices
    return values.gather(1, order), positions.gather(1, order)


def exact_search(
    query_embeddings: torch.Tensor | np.ndarray,
    corpus_embeddings: torch.Tensor | np.ndarray,
    top_k: int = 1000,
    chunk_size: int = 50_000,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Exact cosine search: each query's ``min(top_k, N)`` most similar documents.

    Args:
        query_embeddings: (Q, d) queries (normalised here).
        corpus_embeddings: (N, d) documents (normalised here).
        top_k: documents kept per query.
        chunk_size: documents scored at once (memory is Q x chunk_size floats).

    Returns:
        ``(scores, indices)``, both (Q, min(top_k, N)): cosine similarities (float32), descending,
        and row indices into ``corpus_embeddings`` (int64); equal scores in index order.
    """
    if isinstance(top_k, bool) or not isinstance(top_k, int) or top_k < 1:
        raise ValueError(f"top_k: expected a positive int, got {top_k!r}")
    if isinstance(chunk_size, bool) or not isinstance(chunk_size, int) or chunk_size < 1:
        raise ValueError(f"chunk_size: expected a positive int, got {chunk_size!r}")
    queries = F.normalize(_as_matrix(query_embeddings, "query_embeddings"), p=2, dim=1)
    corpus = _as_matrix(corpus_embeddings, "corpus_embeddings").to(queries.device)
    if corpus.shape[1] != queries.shape[1]:
        raise ValueError(f"corpus_embeddings: dimension {corpus.shape[1]} differs from the queries' {queries.shape[1]}")
    k = min(top_k, corpus.shape[0])
    best_scores = best_indices = None
    for start in range(0, corpus.shape[0], chunk_size):
        chunk = F.normalize(corpus[start : start + chunk_size], p=2, dim=1)
        scores, positions = stable_topk(queries @ chunk.T, min(k, chunk.shape[0]))
        indices = positions + start
        if best_scores is not None:
            # earlier chunks first: in the concatenation, equal scores stay in corpus-index order
            scores, positions = stable_topk(torch.cat([best_scores, scores], dim=1), min(k, best_scores.shape[1] + scores.shape[1]))
            indices = torch.cat([best_indices, indices], dim=1).gather(1, positions)
        best_scores, best_indices = scores, indices
    return best_scores, best_indices
