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
"""

from __future__ import annotations

import logging
import random
from dataclasses import dataclass
from typing import Literal

import datasets
import torch
from tqdm.auto import tqdm

from contrastive_bert.data.beir import RetrievalData
from contrastive_bert.embeddings import encode_normalized
from contrastive_bert.topk_search import search_topk

logger = logging.getLogger(__name__)


SEARCH_CHUNK = 256  # queries searched at once (a progress step); the results equal one search of them all


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
    """

    pairs: int
    kept: int
    dropped_near_positive: int
    dropped_small_corpus: int


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
    corpus_embeddings: torch.Tensor | None = None,
    show_progress_bar: bool = False,
    return_report: bool = False,
) -> datasets.Dataset | tuple[datasets.Dataset, MiningReport]:
    """``(anchor, positive, negative_1..negative_n)`` rows for the (query, relevant document)
    pairs of ``split``.

    Pairs are chosen as in :func:`~contrastive_bert.data.training_pairs.retrieval_pairs` (at
    most ``max_positives_per_query`` per query, highest grade first). A pair whose query keeps
    fewer than ``num_negatives`` candidates after filtering is dropped (logged; with
    ``return_report``, ``(rows, MiningReport)`` says how many and why).
    ``corpus_embeddings``: ``(len(data.corpus), dim)`` unit-norm embeddings in ``data.corpus``
    order, to reuse an encoding. ``backend``: top-k search (FAISS when installed, else torch).
    ``show_progress_bar``: bars for encoding (documents, queries) and for the search.
    """
    if isinstance(num_negatives, bool) or not isinstance(num_negatives, int) or num_negatives < 1:
        raise ValueError(f"num_negatives: expected a positive integer, got {num_negatives!r}")
    if isinstance(range_max, bool) or not isinstance(range_max, int) or range_max < num_negatives:
        raise ValueError(f"range_max: expected an integer >= num_negatives ({num_negatives}), got {range_max!r}")
    if perc_pos is not None and not 0 < perc_pos <= 1:
        raise ValueError(f"perc_pos: expected a number in (0, 1] or None, got {perc_pos!r}")
    if sampling not in ("top", "random"):
        raise ValueError(f"sampling: expected 'top' or 'random', got {sampling!r}")
    qrels = data.split(split)
    doc_ids = list(data.corpus)
    doc_index = {doc: i for i, doc in enumerate(doc_ids)}
    if corpus_embeddings is None:
        logger.info("mine: encoding the %d documents of the corpus", len(doc_ids))
        corpus_embeddings = encode_normalized(model, [data.corpus[d] for d in doc_ids], kind="document", batch_size=batch_size,
                                              show_progress_bar=show_progress_bar)
    elif corpus_embeddings.shape[0] != len(doc_ids):
        raise ValueError(f"corpus_embeddings: expected {len(doc_ids)} rows (one per document), got {corpus_embeddings.shape[0]}")
    query_ids = sorted(qrels)
    logger.info("mine: encoding the %d %s queries", len(query_ids), split)
    query_embeddings = encode_normalized(model, [data.queries[q] for q in query_ids], kind="query", batch_size=batch_size,
                                         show_progress_bar=show_progress_bar)
    excluded = {q: data.relevant(q) for q in query_ids}
    pool = min(len(doc_ids), range_max + max(len(e) for e in excluded.values()))
    chunks = []
    for start in tqdm(range(0, len(query_ids), SEARCH_CHUNK), desc=f"Searching {len(doc_ids)} documents", unit="chunk",
                      disable=not show_progress_bar):
        chunks.append(search_topk(query_embeddings[start : start + SEARCH_CHUNK], corpus_embeddings, pool, backend=backend))
    scores, indices = torch.cat([c[0] for c in chunks]), torch.cat([c[1] for c in chunks])
    pairs = data.positive_pairs(split, max_positives_per_query, seed)
    rng = random.Random(seed)
    rows: dict[str, list[str]] = {"anchor": [], "positive": [], **{f"negative_{i + 1}": [] for i in range(num_negatives)}}
    near_positive = small_corpus = 0
    row_of = {q: i for i, q in enumerate(query_ids)}
    for query, positive, _ in pairs:
        r = row_of[query]
        positive_score = float(query_embeddings[r] @ corpus_embeddings[doc_index[positive]])
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
    report = MiningReport(len(pairs), len(rows["anchor"]), near_positive, small_corpus)
    if near_positive or small_corpus:
        logger.info("mine_corpus_negatives: dropped %d of %d pairs with fewer than %d surviving candidates",
                    near_positive + small_corpus, len(pairs), num_negatives)
    if not rows["anchor"]:
        raise ValueError("no pair kept enough negatives after filtering (raise range_max or perc_pos)")
    mined = datasets.Dataset.from_dict(rows)
    return (mined, report) if return_report else mined

