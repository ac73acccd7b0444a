"""Evaluation correctness on hand-computed cases (STS correlations, k-NN ties, logistic
regression, MRR/MAP), the encode-once cache, the task wiring, and (slow) the bundled
model's published scores."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from contrastive_bert.data import load_dataset
from contrastive_bert.data.schemas import build_split
from contrastive_bert.embeddings import encode_normalized
from contrastive_bert.evaluation import (
    check_tasks,
    classification_scores,
    evaluate_answer_selection,
    evaluate_classification,
    evaluate_split,
    evaluate_sts,
    evaluate_task,
    evaluate_tasks,
    knn_predict,
    ranking_scores,
    sts_scores,
)


class CountingModel:
    """A fake SentenceTransformer: fixed vectors per text, counting how often each text is encoded."""

    def __init__(self, vectors: dict[str, list[float]] | None = None, dim: int = 8):
        self.vectors = vectors or {}
        self.dim = dim
        self.calls = 0
        self.encoded: list[str] = []

    def _vector(self, text: str) -> np.ndarray:
        if text in self.vectors:
            return np.asarray(self.vectors[text], dtype=np.float32)
        rng = np.random.default_rng(abs(hash(text)) % (2**32))
        return rng.normal(size=self.dim).astype(np.float32)

    def encode(self, texts, batch_size=32, convert_to_numpy=True, normalize_embeddings=False, show_progress_bar=False, **kw):
        self.calls += 1
        self.encoded.extend(texts)
        out = np.stack([self._vector(t) for t in texts])
        if normalize_embeddings:
            out = out / np.linalg.norm(out, axis=1, keepdims=True)
        return out


# --------------------------------------------------------------------------- STS


def test_sts_scores_hand_computed():
    # second vectors at angles 0, 60, 90, 180 degrees from [1, 0]: cosines 1, 0.5, 0, -1
    e1 = np.array([[1.0, 0.0], [2.0, 0.0], [0.0, 3.0], [1.0, 0.0]])
    e2 = np.array([[5.0, 0.0], [1.0, np.sqrt(3.0)], [4.0, 0.0], [-1.0, 0.0]])
    cosine = np.array([1.0, 0.5, 0.0, -1.0])
    gold = np.array([0.8, 1.0, 0.2, 0.0])  # ranks: cosine 4,3,2,1 vs gold 3,4,2,1
    # Spearman without ties: 1 - 6 * sum d^2 / (n (n^2 - 1)) = 1 - 6 * 2 / 60 = 0.8
    spearman = 1 - 6 * (1 + 1 + 0 + 0) / (4 * (16 - 1))
    c, g = cosine - cosine.mean(), gold - gold.mean()
    pearson = (c * g).sum() / np.sqrt((c**2).sum() * (g**2).sum())
    scores = sts_scores(e1, e2, gold)
    assert scores["main_score"] == pytest.approx(80.0)
    assert scores["cosine_spearman"] == pytest.approx(spearman * 100)
    assert scores["cosine_pearson"] == pytest.approx(pearson * 100)
    # perfectly reversed ranking
    assert sts_scores(e1, e2, -cosine)["main_score"] == pytest.approx(-100.0)


def test_sts_scores_ignore_vector_length():
    rng = np.random.default_rng(0)
    e1, e2, gold = rng.normal(size=(10, 4)), rng.normal(size=(10, 4)), rng.uniform(size=10)
    scaled = sts_scores(e1 * rng.uniform(1, 9, size=(10, 1)), e2 * 3, gold)
    assert scaled == pytest.approx(sts_scores(e1, e2, gold))


def test_evaluate_sts_with_fake_model():
    model = CountingModel({"a": [1, 0], "b": [1, 0], "c": [0, 1], "d": [1, 1], "e": [0, -1]}, dim=2)
    data = build_split("pair-score", {"sentence1": ["a", "a", "a", "c"], "sentence2": ["b", "d", "c", "e"],
                                      "score": [1.0, 0.7, 0.3, 0.0]})
    scores = evaluate_sts(model, data)
    assert scores["main_score"] == pytest.approx(100.0)  # cosines 1, 0.707, 0, -1: same order as gold
    assert scores["num_pairs"] == 4
    assert model.calls == 1 and sorted(model.encoded) == ["a", "b", "c", "d", "e"]


# --------------------------------------------------------------------------- k-NN and classification


def test_knn_predict_k1_and_majority():
    train = np.array([[1.0, 0.0], [0.9, 0.1], [0.0, 1.0], [0.1, 0.9], [0.2, 0.8]])
    labels = np.array([0, 0, 1, 1, 1])
    test = np.array([[1.0, 0.05], [0.05, 1.0], [0.6, 0.4]])
    assert knn_predict(train, labels, test, k=1).tolist() == [0, 1, 0]
    # k=5: everything votes, label 1 has 3 of 5
    assert knn_predict(train, labels, test, k=5).tolist() == [1, 1, 1]


def test_knn_tie_breaking_nearest_wins():
    # query at 10 degrees: neighbours ordered b (label 7, nearest), a (label 3)
    train = np.array([[1.0, 0.0], [np.cos(0.2), np.sin(0.2)], [0.0, 1.0]])
    labels = np.array([3, 7, 3])
    query = np.array([[np.cos(0.17), np.sin(0.17)]])
    assert knn_predict(train, labels, query, k=2).tolist() == [7]  # 1 vote each: nearest (7) wins
    assert knn_predict(train, labels, query, k=3).tolist() == [3]  # 2 votes beat 1
    # exactly equal similarity: the earlier training row wins (stable sort)
    twins = np.array([[1.0, 0.0], [2.0, 0.0]])
    assert knn_predict(twins, np.array([5, 4]), np.array([[1.0, 1.0]]), k=1).tolist() == [5]
    assert knn_predict(twins, np.array([4, 5]), np.array([[1.0, 1.0]]), k=2).tolist() == [4]


def test_knn_rejects_bad_k():
    with pytest.raises(ValueError, match="k: expected a positive number of neighbours, got 0"):
        knn_predict(np.eye(2), np.array([0, 1]), np.eye(2), k=0)


def test_classification_scores_separable_is_perfect():
    rng = np.random.default_rng(0)
    centres = np.array([[5.0, 0.0, 0.0], [0.0, 5.0, 0.0], [0.0, 0.0, 5.0]])
    train_labels = np.repeat(np.arange(3), 20)
    test_labels = np.repeat(np.arange(3), 7)
    train = centres[train_labels] + rng.normal(scale=0.3, size=(60, 3))
    test = centres[test_labels] + rng.normal(scale=0.3, size=(21, 3))
    scores = classification_scores(train, train_labels, test, test_labels, k=3)
    assert scores == {"main_score": 100.0, "accuracy": 100.0, "f1_macro": 100.0, "knn_accuracy_k3": 100.0}


def test_classification_scores_hand_counted():
    train = np.array([[1.0, 0.0], [0.0, 1.0]])
    test = np.array([[1.0, 0.1], [0.1, 1.0], [0.9, 0.0], [1.0, 0.2]])
    scores = classification_scores(train, np.array([0, 1]), test, np.array([0, 1, 1, 1]))
    assert scores["knn_accuracy_k1"] == pytest.approx(50.0)  # predictions 0, 1, 0, 0
    assert scores["accuracy"] == pytest.approx(50.0)


def test_evaluate_classification_fits_on_train():
    names = ["pos", "neg"]
    model = CountingModel({"good": [1, 0], "great": [0.9, 0.1], "bad": [0, 1], "awful": [0.1, 0.9],
                           "fine": [0.8, 0.3], "poor": [0.2, 0.7]}, dim=2)
    train = build_split("classification", {"text": ["good", "great", "bad", "awful"], "label": ["pos", "pos", "neg", "neg"]}, names)
    test = build_split("classification", {"text": ["fine", "poor", "good"], "label": ["pos", "neg", "pos"]}, names)
    scores = evaluate_classification(model, train, test)
    assert scores["knn_accuracy_k1"] == 100.0
    assert scores["num_test"] == 3
    assert model.calls == 2
    assert model.encoded.count("good") == 2  # once per split


# --------------------------------------------------------------------------- ranking


def test_ranking_scores_hand_computed():
    groups = [
        # relevant candidates end up at ranks 2 and 3: RR 1/2, AP (1/2 + 2/3) / 2
        (np.array([0.9, 0.8, 0.7, 0.1]), np.array([0, 1, 1, 0])),
        # relevant at rank 1 (scores unsorted): RR 1, AP 1
        (np.array([0.2, 0.95, 0.5]), np.array([0, 1, 0])),
        # no relevant candidate: skipped
        (np.array([0.3, 0.4]), np.array([0, 0])),
    ]
    scores = ranking_scores(groups)
    ap1 = (1 / 2 + 2 / 3) / 2
    assert scores["mrr"] == pytest.approx((1 / 2 + 1) / 2 * 100)
    assert scores["map"] == pytest.approx((ap1 + 1) / 2 * 100)
    assert scores["main_score"] == scores["mrr"]
    assert scores["num_queries"] == 2


def test_ranking_scores_ties_keep_candidate_order():
    tied = np.array([0.5, 0.5, 0.5])
    assert ranking_scores([(tied, np.array([0, 0, 1]))])["mrr"] == pytest.approx(100 / 3)
    assert ranking_scores([(tied, np.array([1, 0, 0]))])["mrr"] == pytest.approx(100.0)


def test_ranking_scores_needs_a_relevant_candidate():
    with pytest.raises(ValueError, match="no question has a relevant candidate"):
        ranking_scores([(np.array([0.1, 0.2]), np.array([0, 0]))])


def test_evaluate_answer_selection_groups_by_question():
    model = CountingModel({"q1": [1, 0], "q2": [0, 1], "x": [0.9, 0.1], "y": [0.5, 0.5], "z": [0.0, 1.0]}, dim=2)
    data = build_split("reranking", {
        "question": ["q1", "q1", "q1", "q2", "q2"],
        "answer": ["x", "y", "z", "x", "z"],
        "label": [0, 0, 1, 0, 1],  # q1: relevant z ranked 3rd; q2: relevant z ranked 1st
    })
    scores = evaluate_answer_selection(model, data)
    assert scores["mrr"] == pytest.approx((1 / 3 + 1) / 2 * 100)
    assert scores["map"] == pytest.approx((1 / 3 + 1) / 2 * 100)
    assert scores["num_queries"] == 2


# --------------------------------------------------------------------------- encode once


def test_encode_unique_encodes_each_text_once():
    model = CountingModel()
    texts = ["a", "b", "a", "c", "b", "a"]
    out = encode_normalized(model, texts, unique=True, batch_size=2).numpy()
    assert model.calls == 1
    assert model.encoded == ["a", "b", "c"]  # first-seen order, each once
    assert out.shape == (6, 8)
    np.testing.assert_allclose(np.linalg.norm(out, axis=1), 1.0, rtol=1e-5)
    np.testing.assert_array_equal(out[0], out[2])
    np.testing.assert_array_equal(out[1], out[4])
    np.testing.assert_allclose(out[3], model._vector("c") / np.linalg.norm(model._vector("c")), rtol=1e-6)


def test_encode_unique_matches_plain_encode(tiny_model):
    texts = ["a man is playing a guitar.", "a woman slices an onion.", "a man is playing a guitar."]
    expected = tiny_model.encode(texts, normalize_embeddings=True, convert_to_numpy=True)
    np.testing.assert_allclose(encode_normalized(tiny_model, texts, unique=True).numpy(), expected, atol=1e-5)
    as_given = encode_normalized(tiny_model, texts)
    assert as_given.dtype == torch.float32 and as_given.device.type == "cpu"
    np.testing.assert_array_equal(as_given.numpy(), expected)  # the same call as the model's own encode
    queries = encode_normalized(tiny_model, texts, kind="query")
    np.testing.assert_array_equal(queries.numpy(), tiny_model.encode_query(texts, normalize_embeddings=True, convert_to_numpy=True))
    with pytest.raises(ValueError, match="^kind: expected 'text', 'query' or 'document', got 'passage'$"):
        encode_normalized(tiny_model, texts, kind="passage")


# --------------------------------------------------------------------------- tasks


def test_check_tasks():
    assert check_tasks(["stsb", "banking77"]) == ["stsb", "banking77"]
    with pytest.raises(ValueError, match="tasks: expected at least one task name"):
        check_tasks([])
    with pytest.raises(ValueError, match=r"unknown data set 'emotions'.*Did you mean 'emotion'\?"):
        check_tasks(["stsb", "emotions"])
    with pytest.raises(ValueError, match=r"unknown data set 'sts-b'.*Did you mean 'stsb'\? "):  # not sst2 too
        check_tasks(["sts-b"])
    with pytest.raises(ValueError) as caught:  # far from every name: no suggestion (answer_selection was offered)
        check_tasks(["nonsense"])
    assert "Did you mean" not in str(caught.value)


def test_evaluate_split_dispatches_by_task_type(shared_data):
    model = CountingModel(dim=4)
    mrpc = load_dataset("mrpc", data_dir=shared_data)
    small = {"test": mrpc["test"].select(range(40))}
    scores = evaluate_split(model, "mrpc", small)  # pair-binary scored as STS against the label
    assert set(scores) == {"main_score", "cosine_spearman", "cosine_pearson", "num_pairs"}
    assert scores["num_pairs"] == 40
    emotion = load_dataset("emotion", data_dir=shared_data)
    small = {"train": emotion["train"].select(range(60)), "test": emotion["test"].select(range(20))}
    scores = evaluate_split(model, "emotion", small)
    assert set(scores) == {"main_score", "accuracy", "f1_macro", "knn_accuracy_k1", "num_test"}
    answers = load_dataset("answer_selection", split="test", data_dir=shared_data)
    scores = evaluate_split(model, "answer_selection", {"test": answers.select(range(50))})
    assert {"mrr", "map", "num_queries"} <= set(scores)
    with pytest.raises(ValueError, match=r"split: 'banking77' has splits \['train', 'test'\], not 'validation'"):
        evaluate_split(model, "banking77", load_dataset("banking77", data_dir=shared_data, dev_split=False), split="validation")


def test_evaluate_tasks_with_tiny_model(tiny_model, shared_data):
    results = evaluate_tasks(tiny_model, ["answer_selection"], data_dir=shared_data, split="validation")
    assert set(results) == {"answer_selection"}
    assert 0 < results["answer_selection"]["main_score"] <= 100
    with pytest.raises(ValueError, match="unknown data set 'stsbb'"):
        evaluate_tasks(tiny_model, ["stsbb"], data_dir=shared_data)


def test_task_evaluator(tiny_model, shared_data):
    from contrastive_bert.training.task_evaluator import TaskEvaluator

    evaluator = TaskEvaluator("stsb", data_dir=shared_data, max_rows=64)
    assert evaluator.name == "stsb-dev"
    assert len(evaluator.data["validation"]) == 64
    metrics = evaluator(tiny_model)
    assert set(metrics) == {"stsb-dev_main_score", "stsb-dev_cosine_spearman", "stsb-dev_cosine_pearson"}
    expected = evaluate_sts(tiny_model, evaluator.data["validation"])["main_score"]
    assert metrics["stsb-dev_main_score"] == pytest.approx(expected)
    # banking77 has no validation split: a stratified 10% of train is held out
    held = TaskEvaluator("banking77", data_dir=shared_data)
    assert len(held.data["train"]) + len(held.data["validation"]) == 10003
    assert len(set(held.data["validation"]["label"])) == 77
    with pytest.raises(ValueError, match="split: 'answer_selection' has no 'dev' split"):
        TaskEvaluator("answer_selection", split="dev", data_dir=shared_data)


# --------------------------------------------------------------------------- slow: the bundled model


@pytest.mark.slow
def test_bundled_model_reproduces_stsb_test(bundled_model, shared_data):
    scores = evaluate_task(bundled_model, "stsb", data_dir=shared_data)
    assert scores["num_pairs"] == 1379
    assert scores["main_score"] == pytest.approx(82.03, abs=0.3)


@pytest.mark.slow
def test_bundled_model_banking77(bundled_model, shared_data):
    scores = evaluate_task(bundled_model, "banking77", data_dir=shared_data)
    assert scores["num_test"] == 3080
    assert scores["accuracy"] == pytest.approx(90.8, abs=0.5)
    assert scores["knn_accuracy_k1"] == pytest.approx(92.0, abs=0.5)
