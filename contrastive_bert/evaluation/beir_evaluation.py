"""Retrieval scores of a model on the qrels splits of one retrieval data set, by the MTEB protocol.

:func:`evaluate_retrieval_splits` is the package's one retrieval scorer (``contrastive-bert eval``,
the retrieval benchmark and training's retrieval dev task all call it); its figures equal
``mteb.evaluate``'s on the same model and data (``tests/evaluation/test_mteb_tasks.py``). What it
copies from ``mteb`` 2.x's ``AbsTaskRetrieval`` + ``SearchEncoderWrapper``:

- only queries with a judgement in the split are evaluated;
- queries go through ``model.encode_query`` and documents through ``model.encode_document``
  (separate calls: short queries are never padded to document length; a model's query/document
  prompts apply), with the same batch size;
- documents are encoded as given (``title + " " + text``, stripped: MTEB's rule, applied by
  :class:`~contrastive_bert.data.beir.RetrievalData`);
- exact cosine search over the whole corpus (:func:`~contrastive_bert.evaluation.dense_retrieval.exact_search`),
  the top 1000 documents per query, scored by trec_eval's rules
  (:func:`~contrastive_bert.evaluation.retrieval_metrics.retrieval_scores`).

Dev and test of a BEIR-layout data set search the same corpus: the documents (the expensive part:
thousands of texts up to 256 tokens) are encoded once and searched by every split's queries. They
are encoded in chunks into one array (:func:`~contrastive_bert.embedding_store.encode_corpus`; a
corpus of up to 16,384 documents is one encode call, as before), or read from ``embeddings_dir``
where the same model encoded them before (training's mining), or passed in (``corpus_embeddings``).
"""

from __future__ import annotations

from collections.abc import Sequence

from pathlib import Path

from contrastive_bert.data.beir import RetrievalData
from contrastive_bert.embedding_store import CorpusEmbeddings, corpus_fingerprint, encode_corpus, store_folder
from contrastive_bert.embeddings import encode_normalized
from contrastive_bert.evaluation.dense_retrieval import exact_search
from contrastive_bert.evaluation.retrieval_metrics import retrieval_scores

TOP_K = 1000  # documents retrieved per query, as MTEB


def evaluate_retrieval_splits(
    model, data: RetrievalData, splits: Sequence[str] = ("test",), max_queries: int | None = None, batch_size: int = 64,
    top_k: int = TOP_K, show_progress_bar: bool = False, corpus_embeddings: CorpusEmbeddings | None = None,
    embeddings_dir: str | Path | None = None, devices: Sequence[str] | None = None,
) -> dict[str, dict[str, float]]:
    """``{split: metrics}`` (x100, ``main_score`` = nDCG@10) for each qrels split of ``data``.

    ``max_queries``: score only the first N queries (sorted ids) of each split, for smoke runs.
    ``corpus_embeddings``: the corpus encoded by ``model`` before (checked to be this corpus);
    else ``embeddings_dir``: a folder keeping them (read back when ``model`` encoded this corpus
    there, resumed when interrupted); else the corpus is encoded in memory. ``devices``: the corpus
    is encoded on these, one process each (:func:`~contrastive_bert.embedding_store.encode_corpus`);
    the queries on the model's device."""
    for split in splits:
        data.split(split)  # a clear error for a missing split, before encoding anything
    doc_ids = list(data.corpus)
    texts = [data.corpus[d] for d in doc_ids]
    if corpus_embeddings is None:
        folder = None if embeddings_dir is None else store_folder(embeddings_dir, corpus_fingerprint(doc_ids, texts))
        corpus_embeddings = encode_corpus(model, doc_ids, texts, folder=folder, batch_size=batch_size, if_other="replace",
                                          show_progress_bar=show_progress_bar, devices=devices)
    elif corpus_embeddings.fingerprint != corpus_fingerprint(doc_ids, texts):
        raise ValueError(f"corpus_embeddings: encode another corpus ({len(corpus_embeddings)} documents) than this data "
                         f"set's ({len(doc_ids)})")
    corpus = corpus_embeddings.tensor()
    results = {}
    for split in splits:
        qrels = data.split(split)
        query_ids = sorted(q for q in qrels if q in data.queries)[:max_queries]
        queries = encode_normalized(model, [data.queries[q] for q in query_ids], kind="query", batch_size=batch_size,
                                    show_progress_bar=show_progress_bar)
        scores, indices = exact_search(queries, corpus, top_k=top_k)
        run = {q: {doc_ids[i]: float(s) for s, i in zip(row_scores.tolist(), row_indices.tolist())}
               for q, row_scores, row_indices in zip(query_ids, scores, indices)}
        metrics = retrieval_scores({q: qrels[q] for q in query_ids}, run)
        results[split] = {"main_score": metrics["ndcg_at_10"], **metrics, "num_queries": len(query_ids), "num_documents": len(doc_ids)}
    return results
