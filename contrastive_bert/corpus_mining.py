"""Hard negatives mined from a retrieval corpus, with the judged-relevant documents kept out.

Each training query is searched against the whole corpus with the current model. Every document
judged relevant to that query, in *any* split, is excluded (a judged positive is never a
negative), and NV-Retriever's positive-aware filter (TopK-PercPos) drops candidates scoring above
``perc_pos`` times the positive's own score: such near-positives are the likely unjudged
relevant documents (false negatives) that make mined negatives hurt. Of the ``range_max`` most
similar documents that are not judged relevant, the survivors of that filter are taken hardest
first (``sampling="top"``) or drawn at random (``"random"``).

Differences from :func:`sentence_transformers.util.mine_hard_negatives`: it excludes only the
positives present in the pairs it is given; here the qrels of every split are used, so a query's
other relevant documents (held out of the capped training pairs, or judged in dev/test) are
never mined as its negatives.

The corpus is encoded once per call, or not at all when its embeddings are passed
(``corpus_embeddings``) or kept in a folder (``embeddings_dir``: resumable, read back by the next
call with the same model), and searched through one index built once per call
(:class:`~contrastive_bert.vector_index.VectorIndex`: exact up to its size threshold, approximate
above it, with its recall@100 against exact search measured and logged).
"""

from __future__ import annotations

import logging
import random
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

from pathlib import Path

import datasets
import numpy as np
import torch
from tqdm.auto import tqdm

from contrastive_bert.data.beir import RetrievalData
from contrastive_bert.embedding_store import CorpusEmbeddings, corpus_fingerprint, encode_corpus, store_folder
from contrastive_bert.embeddings import encode_normalized
from contrastive_bert.vector_index import DEFAULT_EF_SEARCH, DEFAULT_NPROBE, RecallReport, VectorIndex, check_index_options

logger = logging.getLogger(__name__)


#: Queries searched at once (a progress step); the results equal one search of them all. Large on
#: purpose: FAISS's exact search (``faiss.knn``) switches to its BLAS path only for large enough
#: query blocks; 256 queries of 384 dimensions stayed on the slow path, 10x slower per query at
#: 100,000 documents (``eval/bench_scale.py``'s mining cells, re-measured after this change).
SEARCH_CHUNK = 4096


@dataclass(frozen=True)
class MiningReport:
    """What :func:`mine_corpus_negatives` kept and dropped, and why.

    Attributes:
        pairs: (query, relevant document) pairs mined for.
        kept: pairs that kept ``num_negatives`` negatives.
        dropped_near_positive: pairs with enough unjudged candidates among the ``range_max`` most
            similar documents, too few of them scoring at most ``perc_pos`` x the positive's score.
        dropped_small_corpus: pairs whose query has fewer than ``num_negatives`` unjudged
            documents among the ``range_max`` most similar at all.
        recall: recall@100 of the approximate index against exact search on a sample of the
            queries; None when the search was exact.
    """

    pairs: int
    kept: int
    dropped_near_positive: int
    dropped_small_corpus: int
    recall: RecallReport | None = None


def mine_corpus_negatives(
    model,
    data: RetrievalData,
    split: str = "train",
    num_negatives: int = 4,
    *,
    range_max: int = 100,
    perc_pos: float | None = 0.95,
    sampling: Literal["top", "random"] = "top",
    max_positives_per_query: int | None = 4,
    batch_size: int = 64,
    seed: int = 0,
    backend: Literal["auto", "faiss", "torch"] = "auto",
    corpus_embeddings: CorpusEmbeddings | torch.Tensor | np.ndarray | None = None,
    embeddings_dir: str | Path | None = None,
    index_type: Literal["auto", "flat", "ivf", "hnsw"] = "auto",
    nprobe: int = DEFAULT_NPROBE,
    ef_search: int = DEFAULT_EF_SEARCH,
    show_progress_bar: bool = False,
    return_report: bool = False,
    devices: Sequence[str] | None = None,
) -> datasets.Dataset | tuple[datasets.Dataset, MiningReport]:
    """``(anchor, positive, negative_1..negative_n)`` rows for the (query, relevant document)
    pairs of ``split``.

    Pairs are chosen as in :func:`~contrastive_bert.data.training_pairs.retrieval_pairs` (at
    most ``max_positives_per_query`` per query, highest grade first). A pair whose query keeps
    fewer than ``num_negatives`` candidates after filtering is dropped (logged; with
    ``return_report``, ``(rows, MiningReport)`` says how many and why).
    ``corpus_embeddings``: ``(len(data.corpus), dim)`` unit-norm embeddings in ``data.corpus``
    order by ``model`` (a :class:`~contrastive_bert.embedding_store.CorpusEmbeddings` is checked
    to be this corpus's), to reuse an encoding; else ``embeddings_dir``: a folder keeping the
    corpus's embeddings (:func:`~contrastive_bert.embedding_store.encode_corpus`: an interrupted
    encoding resumes, a finished one of the same model is read back; another model's is replaced);
    else the corpus is encoded in memory. ``backend``: top-k search (FAISS when installed, else
    torch); ``index_type``/``nprobe``/``ef_search``: the index
    (:class:`~contrastive_bert.vector_index.VectorIndex`; an approximate one has its recall@100
    logged, in the report's ``recall`` too). ``show_progress_bar``: bars for encoding
    (documents, queries) and for the search. ``devices``: the corpus is encoded on these, one
    process each (:func:`~contrastive_bert.embedding_store.encode_corpus`).
    """
    if isinstance(num_negatives, bool) or not isinstance(num_negatives, int) or num_negatives < 1:
        raise ValueError(f"num_negatives: expected a positive integer, got {num_negatives!r}")
    if isinstance(range_max, bool) or not isinstance(range_max, int) or range_max < num_negatives:
        raise ValueError(f"range_max: expected an integer >= num_negatives ({num_negatives}), got {range_max!r}")
    if perc_pos is not None and not 0 < perc_pos <= 1:
        raise ValueError(f"perc_pos: expected a number in (0, 1] or None, got {perc_pos!r}")
    if sampling not in ("top", "random"):
        raise ValueError(f"sampling: expected 'top' or 'random', got {sampling!r}")
    check_index_options(index_type, backend, nprobe, ef_search)  # before the encoding
    qrels = data.split(split)
    doc_ids = list(data.corpus)
    doc_index = {doc: i for i, doc in enumerate(doc_ids)}
    corpus_embeddings = _corpus_rows(model, data, doc_ids, corpus_embeddings, embeddings_dir, batch_size, show_progress_bar,
                                     devices)
    index = VectorIndex(corpus_embeddings, index_type, backend=backend, nprobe=nprobe, ef_search=ef_search)
    query_ids = sorted(qrels)
    logger.info("mine: encoding the %d %s queries", len(query_ids), split)
    query_embeddings = encode_normalized(model, [data.queries[q] for q in query_ids], kind="query", batch_size=batch_size,
                                         show_progress_bar=show_progress_bar)
    excluded = {q: data.relevant(q) for q in query_ids}
    pool = min(len(doc_ids), range_max + max(len(e) for e in excluded.values()))
    chunks = []
    searching = f"Searching {len(doc_ids)} documents" + (f" ({index.index_type})" if index.approximate else "")
    for start in tqdm(range(0, len(query_ids), SEARCH_CHUNK), desc=searching, unit="chunk", disable=not show_progress_bar):
        chunks.append(index.search(query_embeddings[start : start + SEARCH_CHUNK], pool))
    scores, indices = torch.cat([c[0] for c in chunks]), torch.cat([c[1] for c in chunks])
    recall = index.measure_recall(query_embeddings)
    if recall is not None:
        logger.info("mine: %s", recall.line())
        if recall.low:
            logger.warning("mine: %s", recall.warning())
    corpus_embeddings = index.embeddings  # (N, d) rows for the positives' scores, without a copy
    pairs = data.positive_pairs(split, max_positives_per_query, seed)
    rng = random.Random(seed)
    rows: dict[str, list[str]] = {"anchor": [], "positive": [], **{f"negative_{i + 1}": [] for i in range(num_negatives)}}
    near_positive = small_corpus = 0
    row_of = {q: i for i, q in enumerate(query_ids)}
    for query, positive, _ in pairs:
        r = row_of[query]
        positive_score = float(query_embeddings[r] @ torch.from_numpy(corpus_embeddings[doc_index[positive]]))
        candidates, considered = [], 0
        for score, index in zip(scores[r].tolist(), indices[r].tolist()):
            if index < 0 or doc_ids[index] in excluded[query]:
                continue
            considered += 1
            if considered > range_max:
                break
            if perc_pos is None or score <= perc_pos * positive_score:
                candidates.append(index)
        if len(candidates) < num_negatives:
            if min(considered, range_max) >= num_negatives:
                near_positive += 1
            else:
                small_corpus += 1
            continue
        chosen = candidates[:num_negatives] if sampling == "top" else rng.sample(candidates, num_negatives)
        rows["anchor"].append(data.queries[query])
        rows["positive"].append(data.corpus[positive])
        for i, index in enumerate(chosen):
            rows[f"negative_{i + 1}"].append(data.corpus[doc_ids[index]])
    report = MiningReport(len(pairs), len(rows["anchor"]), near_positive, small_corpus, recall)
    if near_positive or small_corpus:
        logger.info("mine_corpus_negatives: dropped %d of %d pairs with fewer than %d surviving candidates",
                    near_positive + small_corpus, len(pairs), num_negatives)
    if not rows["anchor"]:
        raise ValueError("no pair kept enough negatives after filtering (raise range_max or perc_pos)")
    mined = datasets.Dataset.from_dict(rows)
    return (mined, report) if return_report else mined



def _corpus_rows(model, data: RetrievalData, doc_ids: list[str], given, embeddings_dir, batch_size: int,
                 show_progress_bar: bool, devices: Sequence[str] | None = None) -> np.ndarray | torch.Tensor:
    """(N, d) rows of the corpus in ``doc_ids`` order: ``given`` (checked), or encoded by ``model``
    (into ``embeddings_dir`` when given)."""
    texts = [data.corpus[d] for d in doc_ids]
    if isinstance(given, CorpusEmbeddings):
        if given.fingerprint != corpus_fingerprint(doc_ids, texts):
            raise ValueError(f"corpus_embeddings: encode another corpus ({len(given)} documents) than this data set's "
                             f"({len(doc_ids)})")
        return given.embeddings
    if given is not None:
        if given.ndim != 2 or given.shape[0] != len(doc_ids):
            raise ValueError(f"corpus_embeddings: expected {len(doc_ids)} rows (one per document), got {tuple(given.shape)}")
        return given
    logger.info("mine: encoding the %d documents of the corpus", len(doc_ids))
    folder = None if embeddings_dir is None else store_folder(embeddings_dir, corpus_fingerprint(doc_ids, texts))
    return encode_corpus(model, doc_ids, texts, folder=folder, batch_size=batch_size, if_other="replace",
                         show_progress_bar=show_progress_bar, devices=devices).embeddings
