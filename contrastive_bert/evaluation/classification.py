"""Classification on frozen embeddings: logistic regression (MTEB's protocol) and k-NN."""

from __future__ import annotations

import numpy as np
from sklearn.linear_model import LogisticRegression
from sklearn.metrics import accuracy_score, f1_score

from contrastive_bert.data.schemas import validate_split
from contrastive_bert.embeddings import encode_normalized


def knn_predict(train_embeddings: np.ndarray, train_labels: np.ndarray, test_embeddings: np.ndarray, k: int = 1) -> np.ndarray:
    """Majority label of the ``k`` most cosine-similar training rows (ties: the nearest wins).

    Shapes: train (n, d), labels (n,), test (m, d) -> (m,)."""
    if k < 1:
        raise ValueError(f"k: expected a positive number of neighbours, got {k}")
    train = train_embeddings / np.linalg.norm(train_embeddings, axis=1, keepdims=True)
    test = test_embeddings / np.linalg.norm(test_embeddings, axis=1, keepdims=True)
    neighbours = np.argsort(-(test @ train.T), axis=1, kind="stable")[:, :k]
    predictions = []
    for row in train_labels[neighbours]:
        values, counts = np.unique(row, return_counts=True)
        winners = set(values[counts == counts.max()])
        predictions.append(next(label for label in row if label in winners))
    return np.asarray(predictions)


def classification_scores(
    train_embeddings: np.ndarray,
    train_labels: np.ndarray,
    test_embeddings: np.ndarray,
    test_labels: np.ndarray,
    k: int = 1,
    seed: int = 42,
) -> dict[str, float]:
    """Accuracy x100 of logistic regression (main score) and k-NN on fixed embeddings."""
    classifier = LogisticRegression(max_iter=1000, random_state=seed)
    classifier.fit(train_embeddings, train_labels)
    predicted = classifier.predict(test_embeddings)
    knn = knn_predict(train_embeddings, train_labels, test_embeddings, k=k)
    accuracy = float(accuracy_score(test_labels, predicted)) * 100
    return {
        "main_score": accuracy,
        "accuracy": accuracy,
        "f1_macro": float(f1_score(test_labels, predicted, average="macro")) * 100,
        f"knn_accuracy_k{k}": float(accuracy_score(test_labels, knn)) * 100,
    }


def evaluate_classification(
    model, train_dataset, test_dataset, k: int = 1, batch_size: int = 64, seed: int = 42, show_progress_bar: bool = False
) -> dict[str, float]:
    """Fit on ``train_dataset`` embeddings, score on ``test_dataset`` (both ``text``/``label``)."""
    validate_split(train_dataset, "classification", split="train dataset")
    validate_split(test_dataset, "classification", split="test dataset")
    train, test = (
        encode_normalized(model, split["text"], unique=True, batch_size=batch_size, show_progress_bar=show_progress_bar).numpy()
        for split in (train_dataset, test_dataset)
    )
    scores = classification_scores(
        train, np.asarray(train_dataset["label"]), test, np.asarray(test_dataset["label"]), k=k, seed=seed
    )
    scores["num_test"] = len(test_dataset)
    return scores
