"""Answer selection / reranking: MRR and MAP of candidates ranked by cosine similarity."""

from __future__ import annotations

from collections import defaultdict

import numpy as np

from contrastive_bert.data.schemas import validate_split
from contrastive_bert.embeddings import encode_normalized


def ranking_scores(groups: list[tuple[np.ndarray, np.ndarray]]) -> dict[str, float]:
    """MRR x100 and MAP x100 over ``(scores (c,), relevance (c,))`` groups, one per query.

    Queries without a relevant candidate are skipped, as in the standard TREC-QA protocol;
    ties are broken by candidate order (stable sort)."""
    reciprocal_ranks, average_precisions = [], []
    for scores, relevance in groups:
        if relevance.sum() == 0:
            continue
        ranked = relevance[np.argsort(-scores, kind="stable")]
        hits = np.flatnonzero(ranked)
        reciprocal_ranks.append(1.0 / (hits[0] + 1))
        average_precisions.append(np.mean([(i + 1) / (rank + 1) for i, rank in enumerate(hits)]))
    if not reciprocal_ranks:
        raise ValueError("dataset: no question has a relevant candidate")
    mrr = float(np.mean(reciprocal_ranks)) * 100
    return {"main_score": mrr, "mrr": mrr, "map": float(np.mean(average_precisions)) * 100, "num_queries": len(reciprocal_ranks)}


def evaluate_answer_selection(model, dataset, batch_size: int = 64, show_progress_bar: bool = False) -> dict[str, float]:
    """Rank each question's candidates (``question``, ``answer``, ``label`` rows) by cosine."""
    validate_split(dataset, "reranking", split="answer selection dataset")
    questions, answers = list(dataset["question"]), list(dataset["answer"])
    embeddings = encode_normalized(model, questions + answers, unique=True, batch_size=batch_size,
                                   show_progress_bar=show_progress_bar).numpy()
    q, a = embeddings[: len(questions)], embeddings[len(questions) :]
    cosine = (q * a).sum(axis=1)
    by_question: dict[str, list[int]] = defaultdict(list)
    for row, question in enumerate(questions):
        by_question[question].append(row)
    labels = np.asarray(dataset["label"])
    return ranking_scores([(cosine[rows], labels[rows]) for rows in by_question.values()])
