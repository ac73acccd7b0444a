"""Dense retrieval evaluation by the MTEB protocol: exact cosine search over the whole corpus.

:func:`evaluate_retrieval` encodes every document and the judged queries, retrieves each query's
``top_k`` (1000, as mteb) most cosine-similar documents, and scores the run with
:func:`~contrastive_bert.evaluation.retrieval_metrics.retrieval_scores`. What it copies from
``mteb`` 2.x's ``AbsTaskRetrieval`` + ``SearchEncoderWrapper`` (so that its figures equal
``mteb.evaluate``'s on the same model and data):

- only queries with at least one judgement are evaluated (mteb drops the others);
- queries go through ``model.encode_query`` and documents through ``model.encode_document``
  (separate calls: short queries are never padded to document length; a model's query/document
  prompts apply), in the order given, with the same batch size;
- documents are encoded as given (build them as ``title + " " + text``, stripped: MTEB's rule);
- a document with the query's own id is kept unless ``ignore_identical_ids`` (mteb's default;
  only tasks such as ArguAna or Quora set it): then it is dropped from the retrieved list after
  the top-k search, as mteb does.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Mapping, Sequence
from contextlib import contextmanager
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F

from contrastive_bert.evaluation.retrieval_metrics import DEFAULT_K_VALUES, MAIN_METRIC, check_k_values, retrieval_scores

logger = logging.getLogger(__name__)


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


@contextmanager
def _max_seq_length(model, length: int | None):
    """Temporarily set ``model.max_seq_length`` (documents may be truncated differently from queries)."""
    if length is None:
        yield
        return
    previous = model.max_seq_length
    model.max_seq_length = length
    try:
        yield
    finally:
        model.max_seq_length = previous


def _encode(model, texts: Sequence[str], kind: str, batch_size: int, show_progress_bar: bool) -> torch.Tensor:
    """(n, d) float32 embeddings through ``encode_query``/``encode_document`` where the model has them."""
    encode = getattr(model, f"encode_{kind}", None) or model.encode
    embeddings = encode(list(texts), batch_size=batch_size, show_progress_bar=show_progress_bar, convert_to_tensor=True)
    return embeddings.detach().float().cpu()


def evaluate_retrieval(
    model,
    corpus: Mapping[str, str],
    queries: Mapping[str, str],
    qrels: Mapping[str, Mapping[str, int]],
    batch_size: int = 64,
    top_k: int = 1000,
    corpus_max_seq_length: int | None = None,
    show_progress_bar: bool = False,
    ignore_identical_ids: bool = False,
    k_values: Sequence[int] = DEFAULT_K_VALUES,
    chunk_size: int = 50_000,
) -> dict[str, Any]:
    """Retrieval scores x100 of ``model`` (a ``SentenceTransformer``) on one qrels split.

    Args:
        corpus: document id -> text to encode (``title + " " + text``).
        queries: query id -> text; only the queries judged in ``qrels`` are encoded.
        qrels: query id -> {document id: grade}.
        batch_size: encoding batch size.
        top_k: documents retrieved per query (mteb: 1000).
        corpus_max_seq_length: token limit for documents only (None: the model's own); queries
            always use the model's.
        ignore_identical_ids: drop a retrieved document whose id equals the query's (module docstring).
        k_values: metric cut-offs (10 is always added: the main score is nDCG@10).
        chunk_size: documents scored at once in the search.

    Returns:
        ``ndcg_at_k``, ``map_at_k``, ``mrr_at_k``, ``recall_at_k``, ``precision_at_k`` for each k,
        ``main_score`` (= ``ndcg_at_10``), ``num_queries``, ``num_documents``, ``evaluation_seconds``.
    """
    if isinstance(batch_size, bool) or not isinstance(batch_size, int) or batch_size < 1:
        raise ValueError(f"batch_size: expected a positive int, got {batch_size!r}")
    if corpus_max_seq_length is not None and (
        isinstance(corpus_max_seq_length, bool) or not isinstance(corpus_max_seq_length, int) or corpus_max_seq_length < 1
    ):
        raise ValueError(f"corpus_max_seq_length: expected a positive int or None, got {corpus_max_seq_length!r}")
    cutoffs = sorted({*check_k_values(k_values), 10})
    if not isinstance(corpus, Mapping) or len(corpus) == 0:
        raise ValueError("corpus: expected a non-empty {document id: text} mapping")
    if not isinstance(queries, Mapping):
        raise ValueError(f"queries: expected a {{query id: text}} mapping, got {type(queries).__name__}")
    if not isinstance(qrels, Mapping):
        raise ValueError(f"qrels: expected a {{query id: {{document id: grade}}}} mapping, got {type(qrels).__name__}")
    judged = {query_id: docs for query_id, docs in qrels.items() if len(docs) > 0}
    if not judged:
        raise ValueError("qrels: no query has a judgement")
    missing = [query_id for query_id in judged if query_id not in queries]
    if missing:
        raise ValueError(f"queries: {len(missing)} judged queries have no text, e.g. {missing[:3]}")
    query_ids = [query_id for query_id in queries if query_id in judged]  # mteb's order: the queries'
    doc_ids = list(corpus)

    start = time.perf_counter()
    query_embeddings = _encode(model, [queries[q] for q in query_ids], "query", batch_size, show_progress_bar)
    with _max_seq_length(model, corpus_max_seq_length):
        doc_embeddings = _encode(model, [corpus[d] for d in doc_ids], "document", batch_size, show_progress_bar)
    scores, indices = exact_search(query_embeddings, doc_embeddings, top_k=top_k, chunk_size=chunk_size)

    run: dict[str, dict[str, float]] = {}
    for query_id, row_scores, row_indices in zip(query_ids, scores.tolist(), indices.tolist()):
        hits = {doc_ids[i]: s for i, s in zip(row_indices, row_scores)}
        if ignore_identical_ids:
            hits.pop(query_id, None)
        run[query_id] = hits
    results: dict[str, Any] = retrieval_scores(judged, run, cutoffs)
    results["main_score"] = results[MAIN_METRIC]
    results["num_queries"] = len(query_ids)
    results["num_documents"] = len(doc_ids)
    results["evaluation_seconds"] = time.perf_counter() - start
    logger.info("Retrieval: %d queries over %d documents, nDCG@10 %.2f", len(query_ids), len(doc_ids), results[MAIN_METRIC])
    return results
