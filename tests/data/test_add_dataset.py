"""Adding a data set is one file: the example module of docs/adding_a_dataset.md, run as written,
registers a data set over files in tmp_path that loads, builds training rows and evaluates
(directly and through mteb) with no other file touched."""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import pytest
from scipy.stats import spearmanr

from contrastive_bert.data import REGISTRY, get_dataset, load_dataset, register_dataset, unregister_dataset
from contrastive_bert.evaluation import evaluate_tasks
from contrastive_bert.training.train_data import build_train_dataset, check_train_datasets

GUIDE = Path(__file__).resolve().parents[2] / "docs" / "adding_a_dataset.md"
TRAIN = [("a man plays a guitar", "a man is playing a guitar", 5.0), ("a cat sleeps", "stocks fell sharply", 0.0),
         ("rain in paris", "it rains in paris", 4.5), ("a dog barks", "the market opened", 0.5)]
TEST = [("a woman cuts an onion", "a woman is slicing an onion", 4.8), ("kids play football", "a bank raised rates", 0.2),
        ("a plane takes off", "an airplane is taking off", 5.0), ("a boy reads", "a girl sings loudly", 1.0),
        ("the sun rises", "sunrise over the hills", 3.5)]


@pytest.fixture()
def headlines(tmp_path):
    """The guide's example module, executed, registered over files in ``tmp_path/headlines``."""
    [source] = re.findall(r"```python\n(.*?)```", GUIDE.read_text(encoding="utf-8"), flags=re.S)
    namespace: dict = {}
    exec(compile(source, str(GUIDE), "exec"), namespace)  # noqa: S102 - the documented example, as written
    folder = tmp_path / "headlines"
    folder.mkdir()
    for name, rows in (("train.tsv", TRAIN), ("test.tsv", TEST)):
        lines = ["s1\ts2\tgold"] + [f"{a}\t{b}\t{g}" for a, b, g in rows]
        (folder / name).write_text("\n".join(lines) + "\n", encoding="utf-8")
    spec = register_dataset(namespace["DATASET"])
    yield spec, tmp_path
    unregister_dataset(spec.name)


def test_new_data_set_loads_in_its_schema(headlines):
    spec, root = headlines
    assert get_dataset("headlines") is spec and "headlines" in REGISTRY
    data = load_dataset("headlines", data_dir=root)
    assert list(data) == ["train", "test"]
    assert data["test"].column_names == ["sentence1", "sentence2", "score"]
    assert data["test"]["score"] == pytest.approx([g / 5 for _, _, g in TEST])
    assert data["train"][0] == {"sentence1": TRAIN[0][0], "sentence2": TRAIN[0][1], "score": 1.0}


def test_new_data_set_builds_training_rows(headlines):
    _, root = headlines
    check_train_datasets(["headlines"], "scored_pairs")
    scored = build_train_dataset(["headlines"], "scored_pairs", data_dir=root, seed=0)
    assert sorted(scored["score"]) == pytest.approx(sorted(g / 5 for _, _, g in TRAIN))
    pairs = build_train_dataset(["headlines"], "pairs", data_dir=root, min_pair_score=0.8, seed=0)
    assert sorted(pairs["anchor"]) == ["a man plays a guitar", "rain in paris"]  # gold >= 4


def test_new_data_set_evaluates_directly_and_through_mteb(headlines, tiny_model):
    from contrastive_bert.evaluation.mteb_tasks import evaluate_mteb_tasks, get_mteb_tasks, summarize_task_result, supported_tasks

    _, root = headlines
    scores = evaluate_tasks(tiny_model, ["headlines"], data_dir=root, show_progress_bar=False)["headlines"]
    a = tiny_model.encode([r[0] for r in TEST], normalize_embeddings=True)
    b = tiny_model.encode([r[1] for r in TEST], normalize_embeddings=True)
    expected = 100 * spearmanr((a * b).sum(1), [r[2] for r in TEST]).statistic
    assert scores["main_score"] == pytest.approx(expected, abs=1e-4) and scores["num_pairs"] == len(TEST)

    assert "headlines" in supported_tasks()
    [task] = get_mteb_tasks(["LocalHeadlinesSTS"], data_dir=root)
    assert task.metadata.name == "LocalHeadlinesSTS" and task.metadata.main_score == "cosine_spearman"
    task.load_data()
    assert np.asarray(task.dataset["default"]["test"]["score"]) == pytest.approx([g for _, _, g in TEST])  # 0-5 again
    [result] = evaluate_mteb_tasks(tiny_model, [task], batch_size=8)
    assert summarize_task_result(result)["main_score"] == pytest.approx(expected, abs=0.5)


def test_registering_a_taken_name_is_refused(headlines):
    spec, _ = headlines
    with pytest.raises(ValueError, match="name: a data set named 'headlines' is already registered; pass replace=True"):
        register_dataset(type(spec)(name="headlines", task_type="pairs", description="x", hub_id="x/y"))
    with pytest.raises(ValueError, match="name: 'rows.jsonl' looks like a data file"):
        register_dataset(type(spec)(name="rows.jsonl", task_type="pairs", description="x", hub_id="x/y"))


@pytest.mark.parametrize(
    "fields, message",
    [
        ({"task_type": "ranking"}, r"task_type: expected one of"),
        ({"files": {}, "hub_id": None}, r"give local files \(files=, read_file=\) or a hub_id"),
        ({"read_file": "train.tsv"}, r"read_file: expected a function reading one file"),
        ({"name": " "}, r"name: expected a non-empty string"),
        ({"score_scale": 0}, r"score_scale: expected a positive number, got 0"),
    ],
)
def test_bad_spec_fields(headlines, fields, message):
    spec, _ = headlines
    base = {"name": "other", "task_type": "pair-score", "description": "x", "files": {"train": "a.tsv"},
            "read_file": spec.read_file}
    with pytest.raises(ValueError, match=message):
        type(spec)(**{**base, **fields})
