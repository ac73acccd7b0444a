"""Score a model on several qrels splits of one retrieval data set, encoding the corpus once.

Dev and test of a BEIR-layout data set search the same corpus: the documents (the expensive
part: thousands of texts up to 256 tokens) are encoded once and searched by every split's
queries. Search and metrics are the MTEB protocol's (:mod:`contrastive_bert.evaluation.dense_retrieval`,
:mod:`contrastive_bert.evaluation.retrieval_metrics`).
"""

from __future__ import annotations

from collections.abc import Sequence

import torch

from contrastive_bert.data.beir import RetrievalData
from contrastive_bert.evaluation.dense_retrieval import exact_search
from contrastive_bert.evaluation.retrieval_metrics import retrieval_scores

TOP_K = 1000  # documents retrieved per query, as MTEB


def _encode(encode, texts: list[str], batch_size: int, show_progress_bar: bool) -> torch.Tensor:
    """``encode``: the model's ``encode_query`` or ``encode_document`` (as mteb calls them)."""
    embeddings = encode(texts, batch_size=batch_size, convert_to_tensor=True, normalize_embeddings=True,
                        show_progress_bar=show_progress_bar)
    return embeddings.float().cpu()


def evaluate_retrieval_splits(
    model, data: RetrievalData, splits: Sequence[str] = ("test",), max_queries: int | None = None, batch_size: int = 64,
    top_k: int = TOP_K, show_progress_bar: bool = False,
) -> dict[str, dict[str, float]]:
    """``{split: metrics}`` (x100, ``main_score`` = nDCG@10) for each qrels split of ``data``.

    ``max_queries``: score only the first N queries (sorted ids) of each split, for smoke runs."""
    for split in splits:
        data.split(split)  # a clear error for a missing split, before encoding anything
    doc_ids = list(data.corpus)
    corpus = _encode(model.encode_document, [data.corpus[d] for d in doc_ids], batch_size, show_progress_bar)
    results = {}
    for split in splits:
        qrels = data.split(split)
        query_ids = sorted(q for q in qrels if q in data.queries)[:max_queries]
        queries = _encode(model.encode_query, [data.queries[q] for q in query_ids], batch_size, show_progress_bar)
        scores, indices = exact_search(queries, corpus, top_k=top_k)
        run = {q: {doc_ids[i]: float(s) for s, i in zip(row_scores.tolist(), row_indices.tolist())}
               for q, row_scores, row_indices in zip(query_ids, scores, indices)}
        metrics = retrieval_scores({q: qrels[q] for q in query_ids}, run)
        results[split] = {"main_score": metrics["ndcg_at_10"], **metrics, "num_queries": len(query_ids), "num_documents": len(doc_ids)}
    return results
