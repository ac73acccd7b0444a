"""Semantic textual similarity: cosine Spearman x100 (the field's main score) and Pearson."""

from __future__ import annotations

import numpy as np
from scipy.stats import pearsonr, spearmanr

from contrastive_bert.data.schemas import validate_split
from contrastive_bert.embeddings import encode_normalized


def sts_scores(embeddings1: np.ndarray, embeddings2: np.ndarray, gold: np.ndarray) -> dict[str, float]:
    """Correlations x100 between row-wise cosine similarity of (n, d) embeddings and gold scores (n,)."""
    e1 = embeddings1 / np.linalg.norm(embeddings1, axis=1, keepdims=True)
    e2 = embeddings2 / np.linalg.norm(embeddings2, axis=1, keepdims=True)
    cosine = (e1 * e2).sum(axis=1)
    spearman = float(spearmanr(cosine, gold).statistic) * 100
    pearson = float(pearsonr(cosine, gold).statistic) * 100
    return {"main_score": spearman, "cosine_spearman": spearman, "cosine_pearson": pearson}


def evaluate_sts(model, dataset, batch_size: int = 64, show_progress_bar: bool = False) -> dict[str, float]:
    """STS evaluation of ``model`` on a ``pair-score`` split (``sentence1``, ``sentence2``, ``score``)."""
    validate_split(dataset, "pair-score", split="sts dataset")
    texts = list(dataset["sentence1"]) + list(dataset["sentence2"])
    embeddings = encode_normalized(model, texts, unique=True, batch_size=batch_size, show_progress_bar=show_progress_bar).numpy()
    n = len(dataset)
    scores = sts_scores(embeddings[:n], embeddings[n:], np.asarray(dataset["score"], dtype=np.float64))
    scores["num_pairs"] = n
    return scores
