"""Exact cosine search over a whole corpus, the search of the MTEB retrieval protocol.

:func:`exact_search` checks its inputs and returns each query's top-k documents by cosine through
the package's one exact search (:func:`contrastive_bert.topk_search.exact_topk`): equal scores in
corpus order, in chunks of documents so that memory stays bounded. The retrieval scorer that
encodes, searches and scores is
:func:`contrastive_bert.evaluation.beir_evaluation.evaluate_retrieval_splits`.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch

from contrastive_bert.topk_search import EXACT_CHUNK_SIZE, check_chunk_size, check_top_k, exact_topk


def _all_finite(tensor: torch.Tensor, chunk_rows: int = EXACT_CHUNK_SIZE) -> bool:
    """Whether every value of (n, d) ``tensor`` is finite, checked ``chunk_rows`` rows at a time:
    ``torch.isfinite`` over a whole corpus allocates several times its size at once (2.5 GB of
    temporaries over a million 384-d rows mapped from disk, which otherwise cost no memory)."""
    return all(bool(torch.isfinite(tensor[start : start + chunk_rows]).all()) for start in range(0, tensor.shape[0], chunk_rows))


def _as_matrix(embeddings: Any, name: str, chunk_rows: int = EXACT_CHUNK_SIZE) -> torch.Tensor:
    """``embeddings`` as a checked (n, d) floating-point tensor, not copied (a memory map stays one;
    the search converts each chunk to float32 as it reads it)."""
    tensor = embeddings if isinstance(embeddings, torch.Tensor) else torch.as_tensor(np.asarray(embeddings))
    if tensor.ndim != 2 or tensor.shape[0] == 0 or tensor.shape[1] == 0:
        raise ValueError(f"{name}: expected a non-empty (n, d) matrix, got shape {tuple(tensor.shape)}")
    if not tensor.is_floating_point():
        raise ValueError(f"{name}: expected floating-point embeddings, got {tensor.dtype}")
    if not _all_finite(tensor, chunk_rows):
        raise ValueError(f"{name}: contains NaN or infinite values")
    return tensor


def exact_search(
    query_embeddings: torch.Tensor | np.ndarray,
    corpus_embeddings: torch.Tensor | np.ndarray,
    top_k: int = 1000,
    chunk_size: int = EXACT_CHUNK_SIZE,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Exact cosine search: each query's ``min(top_k, N)`` most similar documents.

    Args:
        query_embeddings: (Q, d) queries (normalised here).
        corpus_embeddings: (N, d) documents (normalised here, chunk by chunk).
        top_k: documents kept per query.
        chunk_size: documents scored at once (memory is Q x chunk_size floats).

    Returns:
        ``(scores, indices)``, both (Q, min(top_k, N)): cosine similarities (float32), descending,
        and row indices into ``corpus_embeddings`` (int64); equal scores in index order
        (:func:`~contrastive_bert.topk_search.exact_topk`'s tie rule).
    """
    check_top_k(top_k)
    check_chunk_size(chunk_size)
    queries = _as_matrix(query_embeddings, "query_embeddings").float()
    corpus = _as_matrix(corpus_embeddings, "corpus_embeddings", chunk_size)
    if corpus.shape[1] != queries.shape[1]:
        raise ValueError(f"corpus_embeddings: dimension {corpus.shape[1]} differs from the queries' {queries.shape[1]}")
    return exact_topk(queries, corpus, top_k, chunk_size=chunk_size, normalize=True)
