"""MTEB integration: local tasks load the right rows, mteb.evaluate runs offline and agrees with a
direct computation; the bundled model reproduces its published STS-B score through mteb (slow)."""

from __future__ import annotations

import socket

import numpy as np
import pytest
from scipy.stats import spearmanr
from sklearn.metrics import average_precision_score
from sklearn.metrics.pairwise import paired_cosine_distances

from contrastive_bert.evaluation.mteb_tasks import (
    LocalBanking77Classification,
    LocalEmotionClassification,
    LocalMRPCPairClassification,
    LocalSST2Classification,
    LocalSTSBenchmark,
    evaluate_mteb_tasks,
    get_mteb_tasks,
    run_mteb,
    summarize_task_result,
    supported_tasks,
)

PUBLISHED_STSB = 82.03  # all-MiniLM-L6-v2, STS-B test, cosine Spearman x100


@pytest.fixture()
def no_network(monkeypatch):
    """Any attempt to open a socket fails the test."""

    def refuse(*args, **kwargs):
        raise RuntimeError("network access attempted during an offline MTEB run")

    monkeypatch.setattr(socket.socket, "connect", refuse)
    monkeypatch.setattr(socket, "create_connection", refuse)


def _cosine(e1: np.ndarray, e2: np.ndarray) -> np.ndarray:
    """Row-wise cosine similarity of two (n, d) embedding matrices, computed here with numpy."""
    return (e1 * e2).sum(1) / (np.linalg.norm(e1, axis=1) * np.linalg.norm(e2, axis=1))


@pytest.mark.parametrize(
    ("cls", "rows"),
    [
        (LocalSTSBenchmark, {"train": 5749, "validation": 1500, "test": 1379}),
        (LocalMRPCPairClassification, {"train": 3576, "validation": 500, "test": 1725}),
        (LocalBanking77Classification, {"train": 10003, "test": 3080}),
        (LocalEmotionClassification, {"train": 16000, "validation": 2000, "test": 2000}),
        (LocalSST2Classification, {"train": 67349, "validation": 872, "test": 1821}),
    ],
)
def test_local_tasks_load_all_rows_in_mteb_layout(shared_data, cls, rows):
    task = cls(data_dir=shared_data)
    assert task.metadata.eval_splits == ["test"] and task.metadata.eval_langs == ["eng-Latn"]
    task.load_data()
    splits = task.dataset["default"]
    assert {name: len(split) for name, split in splits.items()} == rows
    test = splits["test"]
    if isinstance(task, LocalSTSBenchmark):
        assert task.column_names == ("sentence1", "sentence2")
        assert set(test.column_names) == {"sentence1", "sentence2", "score"}
        scores = np.asarray(test["score"])
        assert scores.min() >= 0 and scores.max() <= 5 and scores.max() > 4.5  # rescaled from [0, 1]
    elif isinstance(task, LocalMRPCPairClassification):
        assert set(test.column_names) == {"sentence1", "sentence2", "labels"}
        assert set(test["labels"]) == {0, 1}
    else:
        assert set(test.column_names) == {"text", "label"}
        assert task.metadata.main_score == "accuracy"


def test_sts_scores_are_original_scale(shared_data):
    from contrastive_bert.data import load_dataset

    task = LocalSTSBenchmark(data_dir=shared_data)
    task.load_data()
    ours = load_dataset("stsb", split="test", data_dir=shared_data)
    np.testing.assert_allclose(task.dataset["default"]["test"]["score"], np.asarray(ours["score"]) * 5)


def test_sts_through_mteb_equals_direct_cosine_spearman(tiny_model, shared_data, no_network, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)  # nothing may be written to the working directory
    task = LocalSTSBenchmark(data_dir=shared_data, max_samples=300)
    # one encode call with the same batch size on both paths: same padding, same embeddings
    [result] = evaluate_mteb_tasks(tiny_model, [task], batch_size=32)
    summary = summarize_task_result(result)
    assert result.task_name == "LocalSTSBenchmark"
    assert list(tmp_path.iterdir()) == []

    task.load_data()  # same seeded subsample
    data = task.dataset["default"]["test"]
    assert len(data) == 300
    e1, e2 = tiny_model.encode(data["sentence1"], batch_size=32), tiny_model.encode(data["sentence2"], batch_size=32)
    # mteb's formula, 1 - ||a/|a| - b/|b|||^2 / 2: in float32 it orders near-tied pairs of this
    # random model differently from a/|a| . b/|b| (Spearman 1.7e-4 apart), so compare like with like
    cosine = 1 - paired_cosine_distances(e1, e2)
    np.testing.assert_allclose(cosine, _cosine(e1, e2), atol=1e-5)
    direct = 100 * spearmanr(cosine, data["score"]).statistic
    assert np.isfinite(direct) and np.ptp(cosine) > 1e-3  # a non-degenerate ranking
    assert summary["main_score"] == pytest.approx(direct, abs=1e-6)
    assert summary["cosine_spearman"] == summary["main_score"]


def test_pair_classification_cosine_ap_equals_direct(tiny_model, shared_data, no_network):
    task = LocalMRPCPairClassification(data_dir=shared_data, max_samples=200)
    [result] = evaluate_mteb_tasks(tiny_model, [task], batch_size=32)
    summary = summarize_task_result(result)
    task.load_data()
    data = task.dataset["default"]["test"]
    cosine = _cosine(tiny_model.encode(data["sentence1"], batch_size=32), tiny_model.encode(data["sentence2"], batch_size=32))
    direct_ap = 100 * average_precision_score(data["labels"], cosine)
    assert summary["cosine_ap"] == pytest.approx(direct_ap, abs=1e-6)
    assert summary["main_score"] == summary["max_ap"] >= summary["cosine_ap"]


def test_run_mteb_classification_offline(tiny_model, shared_data, no_network):
    scores = run_mteb(tiny_model, ["emotion", "sst2"], data_dir=shared_data, max_samples=60, n_experiments=1)
    assert set(scores) == {"LocalEmotionClassification", "LocalSST2Classification"}
    for name, entry in scores.items():
        assert entry["mteb_task"] == name and entry["split"] == "test"
        assert entry["main_score"] == entry["accuracy"]
        assert 0.0 <= entry["main_score"] <= 100.0
        assert "scores_per_experiment" not in entry


def test_classification_subsample_is_stratified(shared_data):
    task = LocalEmotionClassification(data_dir=shared_data, max_samples=300, n_experiments=2)
    assert task.n_experiments == 2 and task.samples_per_label == 16
    task.load_data()
    test = task.dataset["default"]["test"]
    assert len(test) == 300 and len(set(test["label"])) == 6
    assert len(task.dataset["default"]["train"]) == 16000  # the classifier's training pool is not cut


def test_output_folder_gets_mteb_result_files(tiny_model, shared_data, tmp_path):
    import mteb

    out = tmp_path / "mteb"
    run_mteb(tiny_model, ["stsb"], data_dir=shared_data, output_folder=out, max_samples=40)
    [path] = list(out.rglob("LocalSTSBenchmark.json"))
    loaded = mteb.TaskResult.from_disk(path)
    assert loaded.task_name == "LocalSTSBenchmark" and "test" in loaded.scores


def test_get_mteb_tasks_local_vs_stock(shared_data, monkeypatch):
    monkeypatch.delenv("CONTRASTIVE_BERT_DATA", raising=False)
    monkeypatch.setattr("contrastive_bert.evaluation.mteb_tasks.hub_reachable", lambda: True)  # as online
    local = get_mteb_tasks(["stsb", "Banking77Classification", "emotion"], data_dir=shared_data)
    assert [t.metadata.name for t in local] == [
        "LocalSTSBenchmark",
        "LocalBanking77Classification",
        "LocalEmotionClassification",
    ]
    online = get_mteb_tasks(["stsb", "banking77", "emotion", "sst2"], data_dir=shared_data, online=True)
    assert [t.metadata.name for t in online] == [
        "STSBenchmark",
        "Banking77Classification",
        "EmotionClassification",
        "LocalSST2Classification",  # mteb has no stock SST-2 text task: our wrapper (local data here)
    ]
    no_data = get_mteb_tasks(["stsb", "mrpc"])
    assert [t.metadata.name for t in no_data] == ["STSBenchmark", "LocalMRPCPairClassification"]
    monkeypatch.setenv("CONTRASTIVE_BERT_DATA", str(shared_data))
    assert get_mteb_tasks(["stsb"])[0].metadata.name == "LocalSTSBenchmark"


def test_offline_without_local_data_is_one_line_error(shared_data, monkeypatch):
    monkeypatch.delenv("CONTRASTIVE_BERT_DATA", raising=False)
    monkeypatch.setattr("contrastive_bert.evaluation.mteb_tasks.hub_reachable", lambda: False)
    with pytest.raises(ValueError, match=r"dataset 'stsb': no local data root given .* pass --data-dir DIR or set CONTRASTIVE_BERT_DATA=DIR"):
        get_mteb_tasks(["stsb", "mrpc"])
    with pytest.raises(ValueError, match=r"online: the stock mteb tasks \['Banking77Classification'\] need the hub, which is unreachable"):
        get_mteb_tasks(["banking77", "sst2"], data_dir=shared_data, online=True)
    assert [t.metadata.name for t in get_mteb_tasks(["stsb"], data_dir=shared_data)] == ["LocalSTSBenchmark"]


def test_bad_arguments_raise_value_error(shared_data):
    with pytest.raises(ValueError, match=r"names: unsupported MTEB task 'stsbb'; supported: banking77, emotion, mrpc"):
        get_mteb_tasks(["stsbb"], data_dir=shared_data)
    assert supported_tasks() == ["banking77", "emotion", "mrpc", "sst2", "stsb"]
    with pytest.raises(ValueError, match="names: expected a non-empty list"):
        get_mteb_tasks([], data_dir=shared_data)
    with pytest.raises(ValueError, match="names: expected a non-empty list"):
        get_mteb_tasks("stsb", data_dir=shared_data)
    with pytest.raises(ValueError, match="names: duplicate"):
        get_mteb_tasks(["stsb", "STSBenchmark"], data_dir=shared_data)
    with pytest.raises(ValueError, match="max_samples"):
        get_mteb_tasks(["stsb"], data_dir=shared_data, max_samples=0)
    with pytest.raises(ValueError, match="n_experiments"):
        get_mteb_tasks(["banking77"], data_dir=shared_data, n_experiments=0)
    with pytest.raises(ValueError, match="data_dir"):
        get_mteb_tasks(["stsb"], data_dir=shared_data / "does-not-exist")
    with pytest.raises(ValueError, match="batch_size"):
        evaluate_mteb_tasks(None, [], batch_size=0)


@pytest.mark.slow
def test_bundled_model_reproduces_published_stsb_through_mteb(bundled_model, shared_data, no_network):
    from contrastive_bert.data import load_dataset

    scores = run_mteb(bundled_model, ["stsb"], data_dir=shared_data)
    main = scores["LocalSTSBenchmark"]["main_score"]
    assert main == pytest.approx(PUBLISHED_STSB, abs=0.3)

    data = load_dataset("stsb", split="test", data_dir=shared_data)
    cosine = _cosine(bundled_model.encode(data["sentence1"]), bundled_model.encode(data["sentence2"]))
    assert main == pytest.approx(100 * spearmanr(cosine, data["score"]).statistic, abs=0.01)


def test_eval_cli_mteb_writes_json(tiny_model, tmp_path, shared_data, capsys):
    """`contrastive-bert eval --mteb` runs mteb on the local STS-B task and writes its scores."""
    import json

    from contrastive_bert.cli import main

    model_dir = tmp_path / "model"
    tiny_model.save(str(model_dir))
    output = tmp_path / "scores.json"
    code = main(["eval", "--mteb", "--model", str(model_dir), "--tasks", "stsb", "--data-dir", str(shared_data),
                 "--output", str(output)])
    assert code == 0
    scores = json.loads(output.read_text())
    assert set(scores) == {"LocalSTSBenchmark"}
    assert -100 <= scores["LocalSTSBenchmark"]["main_score"] <= 100
    assert "LocalSTSBenchmark" in capsys.readouterr().out
    # an existing output file is refused, before any model loads
    assert main(["eval", "--mteb", "--model", str(model_dir), "--tasks", "stsb", "--output", str(output)]) == 2
    assert main(["eval", "--mteb", "--tasks", "nosuchtask"]) == 2
