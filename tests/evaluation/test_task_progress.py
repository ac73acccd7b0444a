"""``evaluate_tasks``: a progress bar over tasks and encoding when asked (off when stderr is not a
terminal), pre-loaded data used as given, and ``main_score`` taken from the data set's field."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from contrastive_bert.data import get_dataset, register_dataset, unregister_dataset
from contrastive_bert.data.schemas import build_split
from contrastive_bert.evaluation import evaluate_split, evaluate_tasks
from contrastive_bert.evaluation.tasks import default_progress_bar

QA = {"question": ["q1", "q1", "q2", "q2"], "answer": ["x", "y", "x", "y"], "label": [0, 1, 1, 0]}


class RecordingModel:
    """Fixed 2-d vectors per text; records the ``show_progress_bar`` value of every encode call."""

    vectors = {"q1": [1.0, 0.0], "q2": [0.0, 1.0], "x": [0.9, 0.1], "y": [0.1, 0.9], "z": [0.5, 0.5]}

    def __init__(self):
        self.bars: list[bool] = []

    def encode(self, texts, batch_size=32, convert_to_numpy=True, normalize_embeddings=False, show_progress_bar=False, **kw):
        self.bars.append(show_progress_bar)
        out = np.asarray([self.vectors[t] for t in texts], dtype=np.float32)
        return out / np.linalg.norm(out, axis=1, keepdims=True)


@pytest.fixture()
def qa_data():
    return {"answer_selection": {"test": build_split("reranking", QA)}}


def test_progress_bar_on_when_asked(qa_data, capsys):
    model = RecordingModel()
    results = evaluate_tasks(model, ["answer_selection"], data=qa_data, show_progress_bar=True)
    assert model.bars == [True]
    assert "Evaluating" in capsys.readouterr().err  # tqdm's bar over the tasks
    # q1: relevant y ranked 2nd (x is closer), q2: relevant x ranked 2nd -> MRR 1/2
    assert results["answer_selection"]["mrr"] == pytest.approx(50.0)


def test_progress_bar_off_when_not_a_terminal(qa_data, capsys):
    assert default_progress_bar() is False  # pytest captures stderr: not a TTY
    model = RecordingModel()
    evaluate_tasks(model, ["answer_selection"], data=qa_data)
    assert model.bars == [False]
    assert "Evaluating" not in capsys.readouterr().err


def test_main_score_follows_the_data_set_field(qa_data):
    spec = register_dataset(dataclasses.replace(get_dataset("answer_selection"), name="qa_by_map", main_score="map"))
    try:
        # q1's candidates rank x, z, y; z and y relevant: RR 1/2, AP (1/2 + 2/3) / 2
        data = {"test": build_split("reranking", {"question": ["q1"] * 3, "answer": ["x", "y", "z"], "label": [0, 1, 1]})}
        scores = evaluate_split(RecordingModel(), spec.name, data)
        assert scores["mrr"] == pytest.approx(50.0)
        assert scores["main_score"] == scores["map"] == pytest.approx((1 / 2 + 2 / 3) / 2 * 100)
        assert next(iter(scores)) == "main_score"
    finally:
        unregister_dataset(spec.name)
    bad = dataclasses.replace(spec, name="qa_bad", main_score="ndcg")
    with pytest.raises(ValueError, match=r"main_score: 'qa_bad' names 'ndcg', but its evaluator reports"):
        evaluate_split(RecordingModel(), bad, qa_data["answer_selection"])
