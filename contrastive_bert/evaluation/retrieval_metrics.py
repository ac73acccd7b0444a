"""Ranked-retrieval metrics (nDCG, MAP, MRR, Recall, Precision at k), as trec_eval and MTEB compute them.

:func:`retrieval_scores` reproduces what ``mteb`` 2.x reports for a retrieval task, without its
``pytrec_eval`` dependency: mteb scores a run with ``pytrec_eval`` (trec_eval's ``ndcg_cut``,
``map_cut``, ``recall``, ``P``) and MRR with its own loop. Their conventions, kept here exactly:

- A query's documents are ranked by score, descending; equal scores by document id, *descending*
  (trec_eval's order, which mteb's MRR copies).
- nDCG@k: gain = the judged grade (a negative grade counts as 0, an unjudged document as 0),
  discount ``log2(rank + 1)``; the ideal ranking is every positively judged document of the
  query, highest grade first, cut at k.
- Relevant means grade >= 1. MAP@k divides the summed precision at each relevant document in
  the top k by the number of relevant documents (not by ``min(k, R)``); Recall@k likewise;
  Precision@k divides by k even when fewer than k documents were retrieved.
- A query judged only with grade 0 scores 0 on every metric but is counted in the mean.

One difference from pytrec_eval, on purpose: a query in ``qrels`` with no entry in ``run``
counts as 0 (pytrec_eval leaves it out of the mean). MTEB always retrieves for every judged
query, so on MTEB's protocol the two agree.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence

import numpy as np

DEFAULT_K_VALUES: tuple[int, ...] = (1, 3, 5, 10, 100, 1000)
MAIN_METRIC = "ndcg_at_10"
METRIC_NAMES: tuple[str, ...] = ("ndcg", "map", "mrr", "recall", "precision")


def check_k_values(k_values: Sequence[int]) -> list[int]:
    """The distinct cut-offs, ascending; ``ValueError`` unless a non-empty sequence of positive ints."""
    if isinstance(k_values, (str, bytes)) or not isinstance(k_values, Sequence) or len(k_values) == 0:
        raise ValueError(f"k_values: expected a non-empty sequence of positive ints, got {k_values!r}")
    for k in k_values:
        if isinstance(k, bool) or not isinstance(k, (int, np.integer)) or k < 1:
            raise ValueError(f"k_values: expected positive ints, got {k!r} in {list(k_values)}")
    return sorted({int(k) for k in k_values})


def _check_qrels(qrels: Mapping[str, Mapping[str, int]]) -> None:
    if not isinstance(qrels, Mapping) or len(qrels) == 0:
        raise ValueError("qrels: expected a non-empty {query id: {document id: grade}} mapping")
    for query_id, judged in qrels.items():
        if not isinstance(judged, Mapping):
            raise ValueError(f"qrels: query {query_id!r} maps to {type(judged).__name__}, expected {{document id: grade}}")
        for doc_id, grade in judged.items():
            if isinstance(grade, bool) or not isinstance(grade, (int, np.integer)):
                raise ValueError(f"qrels: grade of ({query_id!r}, {doc_id!r}) is {grade!r}, expected an int")


def rank_documents(doc_scores: Mapping[str, float]) -> list[str]:
    """Document ids by score, descending; ties by document id, descending (trec_eval's order)."""
    return [doc for doc, _ in sorted(doc_scores.items(), key=lambda item: (item[1], item[0]), reverse=True)]


def _query_scores(judged: Mapping[str, int], ranked: list[str], ks: list[int]) -> dict[str, list[float]]:
    """Each metric at each k (fractions) for one query, ``ranked`` already cut at max(ks)."""
    grades = np.array([judged.get(doc, 0) for doc in ranked], dtype=np.float64)
    gains = np.maximum(grades, 0.0)
    relevant = grades >= 1
    num_relevant = sum(1 for grade in judged.values() if grade >= 1)
    ideal = np.sort(np.array([g for g in judged.values() if g > 0], dtype=np.float64))[::-1]

    discounts = 1.0 / np.log2(np.arange(2, max(len(ranked), len(ideal), 1) + 2))
    dcg = np.concatenate([[0.0], np.cumsum(gains * discounts[: len(gains)])])
    idcg = np.concatenate([[0.0], np.cumsum(ideal * discounts[: len(ideal)])])
    hits = np.concatenate([[0], np.cumsum(relevant)])
    precision_at_hit = np.where(relevant, hits[1:] / np.arange(1, len(ranked) + 1), 0.0)
    sum_precision = np.concatenate([[0.0], np.cumsum(precision_at_hit)])
    first_hit = int(np.argmax(relevant)) + 1 if relevant.any() else math.inf

    out: dict[str, list[float]] = {name: [] for name in METRIC_NAMES}
    for k in ks:
        cut = min(k, len(ranked))
        ideal_k = idcg[min(k, len(ideal))]
        out["ndcg"].append(float(dcg[cut] / ideal_k) if ideal_k > 0 else 0.0)
        out["map"].append(float(sum_precision[cut] / num_relevant) if num_relevant else 0.0)
        out["mrr"].append(1.0 / first_hit if first_hit <= k else 0.0)
        out["recall"].append(float(hits[cut] / num_relevant) if num_relevant else 0.0)
        out["precision"].append(float(hits[cut] / k))
    return out


def retrieval_scores(
    qrels: Mapping[str, Mapping[str, int]],
    run: Mapping[str, Mapping[str, float]],
    k_values: Sequence[int] = DEFAULT_K_VALUES,
) -> dict[str, float]:
    """``{"ndcg_at_k", "map_at_k", "mrr_at_k", "recall_at_k", "precision_at_k"}`` x100, averaged
    over the queries of ``qrels``, for every k in ``k_values``.

    Args:
        qrels: query id -> {document id: graded relevance (int)}.
        run: query id -> {document id: score}, the retrieved documents (any number; queries not
            in ``qrels`` are ignored, judged queries missing from it score 0).
        k_values: cut-offs.

    The conventions are trec_eval's and MTEB's (module docstring); the main score is
    ``ndcg_at_10`` (:data:`MAIN_METRIC`).
    """
    ks = check_k_values(k_values)
    _check_qrels(qrels)
    if not isinstance(run, Mapping):
        raise ValueError(f"run: expected a {{query id: {{document id: score}}}} mapping, got {type(run).__name__}")
    totals = {name: np.zeros(len(ks)) for name in METRIC_NAMES}
    for query_id, judged in qrels.items():
        doc_scores = run.get(query_id)
        if not doc_scores:
            continue
        ranked = rank_documents(doc_scores)[: ks[-1]]
        for name, values in _query_scores(judged, ranked, ks).items():
            totals[name] += values
    scores: dict[str, float] = {}
    for name in METRIC_NAMES:
        for k, total in zip(ks, totals[name]):
            scores[f"{name}_at_{k}"] = 100.0 * float(total) / len(qrels)
    return scores
