"""Turn data-set splits into the rows contrastive and scored-pair losses train on."""

from __future__ import annotations

import datasets

from contrastive_bert.data.schemas import TASK_COLUMNS, negative_columns


def positive_pairs(dataset: datasets.Dataset, min_score: float = 0.8, keep_negatives: bool = True) -> datasets.Dataset:
    """(anchor, positive[, negative...]) rows from a pairs, triplets, pair or reranking split.

    ``pairs``/``triplets`` rows are kept as they are (their negatives too, unless
    ``keep_negatives`` is False); ``pair-score`` rows with ``score >= min_score`` (STS-B: 4/5),
    ``pair-binary`` and ``reranking`` rows with ``label == 1``. Returns columns ``anchor``,
    ``positive`` and any negative columns.
    """
    columns = set(dataset.column_names)
    if {"anchor", "positive"} <= columns:
        negatives = negative_columns(dataset.column_names) if keep_negatives else []
        return dataset.select_columns(["anchor", "positive", *negatives])
    if set(TASK_COLUMNS["pair-score"]) <= columns:
        kept = dataset.filter(lambda row: row["score"] >= min_score)
        a, p = "sentence1", "sentence2"
    elif set(TASK_COLUMNS["pair-binary"]) <= columns:
        kept = dataset.filter(lambda row: row["label"] == 1)
        a, p = "sentence1", "sentence2"
    elif set(TASK_COLUMNS["reranking"]) <= columns:
        kept = dataset.filter(lambda row: row["label"] == 1)
        a, p = "question", "answer"
    else:
        raise ValueError(
            f"dataset: expected a pairs, triplets, pair-score, pair-binary or reranking split, got columns {dataset.column_names}"
        )
    if len(kept) == 0:
        raise ValueError("dataset: no positive pairs left after filtering (lower min_score?)")
    return datasets.Dataset.from_dict({"anchor": kept[a], "positive": kept[p]})


def labelled_negative_triplets(dataset: datasets.Dataset, seed: int = 0) -> datasets.Dataset:
    """(anchor, positive, negative) rows from a reranking split (``question, answer, label``): every
    correct answer (label 1) with one wrong candidate (label 0) of the same question, drawn with
    ``seed``. These labelled negatives are real hard negatives (same question, same topic); a
    question without a wrong candidate gives no rows."""
    import random

    if not set(TASK_COLUMNS["reranking"]) <= set(dataset.column_names):
        raise ValueError(f"dataset: labelled negatives need a reranking split (question, answer, label), got columns {dataset.column_names}")
    by_question: dict[str, tuple[list[str], list[str]]] = {}
    for question, answer, label in zip(dataset["question"], dataset["answer"], dataset["label"]):
        by_question.setdefault(question, ([], []))[0 if int(label) == 1 else 1].append(answer)
    rng = random.Random(seed)
    rows: dict[str, list[str]] = {"anchor": [], "positive": [], "negative": []}
    for question, (positives, negatives) in by_question.items():
        for positive in positives:
            if negatives:
                rows["anchor"].append(question)
                rows["positive"].append(positive)
                rows["negative"].append(rng.choice(negatives))
    if not rows["anchor"]:
        raise ValueError("dataset: no question has both a correct and a wrong candidate")
    return datasets.Dataset.from_dict(rows)


def scored_pairs(dataset: datasets.Dataset) -> datasets.Dataset:
    """(sentence1, sentence2, score) rows from a pair-score or pair-binary split (label 0/1 as score)."""
    if "label" in dataset.column_names and "score" not in dataset.column_names:
        dataset = dataset.map(lambda row: {"score": float(row["label"])}).remove_columns("label")
    return dataset.select_columns(list(TASK_COLUMNS["pair-score"]))


def retrieval_pairs(
    data, split: str = "train", max_positives_per_query: int | None = 4, scored: bool = False, seed: int = 0
) -> datasets.Dataset:
    """(query, relevant document) rows from a retrieval data set's ``split`` judgements.

    ``data``: the ``DatasetDict`` of :func:`~contrastive_bert.data.load_dataset` (or a
    :class:`~contrastive_bert.data.beir.RetrievalData`). Each query gives at most
    ``max_positives_per_query`` rows: its most relevant documents first (highest grade; within a
    grade an order drawn with ``seed``), so that a query judged against hundreds of documents
    (NFCorpus: up to several hundred) weighs no more in an epoch than one judged against a few;
    None keeps every judgement. Returns ``anchor``, ``positive`` columns, or with ``scored``
    ``sentence1``, ``sentence2``, ``score`` (grade / the split's highest grade, in (0, 1]).
    """
    from contrastive_bert.data.beir import RetrievalData

    retrieval = data if isinstance(data, RetrievalData) else RetrievalData.from_splits(data)
    pairs = retrieval.positive_pairs(split, max_positives_per_query, seed)
    top_grade = max((grade for _, _, grade in pairs), default=1)
    anchors = [retrieval.queries[q] for q, _, _ in pairs]
    positives = [retrieval.corpus[d] for _, d, _ in pairs]
    scores = [grade / top_grade for _, _, grade in pairs]
    if not anchors:
        raise ValueError(f"data: split {split!r} has no relevant (query, document) pair")
    if scored:
        return datasets.Dataset.from_dict({"sentence1": anchors, "sentence2": positives, "score": scores})
    return datasets.Dataset.from_dict({"anchor": anchors, "positive": positives})
