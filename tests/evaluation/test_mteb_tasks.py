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
    LocalNFCorpus,
    LocalSciFact,
    LocalSST2Classification,
    LocalSTSBenchmark,
    evaluate_mteb_tasks,
    get_mteb_tasks,
    run_mteb,
    summarize_task_result,
    supported_tasks,
)

PUBLISHED_STSB = 82.03  # all-MiniLM-L6-v2, STS-B test, cosine Spearman x100
# all-MiniLM-L6-v2, test nDCG@10 x100 by the MTEB protocol (leaderboard figures, documents cut at 256 tokens)
PUBLISHED_NDCG_AT_10 = {"scifact": 64.51, "nfcorpus": 31.59}


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
    assert supported_tasks() == ["banking77", "emotion", "mrpc", "nfcorpus", "scifact", "sst2", "stsb"]
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


@pytest.mark.parametrize(("cls", "documents", "queries", "judgements"), [(LocalSciFact, 5183, 300, 339), (LocalNFCorpus, 3633, 323, 12334)])
def test_local_retrieval_tasks_load_in_mteb_layout(shared_data, cls, documents, queries, judgements):
    task = cls(data_dir=shared_data)
    assert task.metadata.type == "Retrieval" and task.metadata.main_score == "ndcg_at_10"
    assert task.metadata.eval_splits == ["test"] and task.k_values[-1] == 1000 and not task.ignore_identical_ids
    task.load_data()
    split = task.dataset["default"]["test"]
    assert set(split["corpus"].column_names) == {"id", "title", "text"} and len(split["corpus"]) == documents
    assert set(split["queries"].column_names) == {"id", "text"} and len(split["queries"]) == queries
    assert set(split["queries"]["id"]) == set(split["relevant_docs"])
    assert sum(len(docs) for docs in split["relevant_docs"].values()) == judgements

    sampled = cls(data_dir=shared_data, max_samples=7)
    sampled.load_data()
    sampled_split = sampled.dataset["default"]["test"]
    assert len(sampled_split["queries"]) == 7 and len(sampled_split["corpus"]) == documents  # the corpus stays whole
    assert all(sampled_split["relevant_docs"][q] == split["relevant_docs"][q] for q in sampled_split["relevant_docs"])


def _scifact_subset(shared_data, num_queries: int = 10, num_documents: int = 50):
    """The first ``num_queries`` judged SciFact test queries, and a corpus of their relevant
    abstracts filled up to ``num_documents`` with other abstracts, read from the BEIR files."""
    import datasets

    from contrastive_bert.data.beir import QRELS_COLUMNS, read_corpus, read_qrels, read_queries

    folder = shared_data / "scifact"
    qrels = read_qrels(folder / "qrels" / "test.tsv")
    query_ids = sorted(set(qrels["query_id"]), key=int)[:num_queries]
    keep = [i for i, q in enumerate(qrels["query_id"]) if q in query_ids]
    test = {name: [qrels[name][i] for i in keep] for name in QRELS_COLUMNS}
    corpus = read_corpus(folder / "corpus.jsonl")
    relevant = set(test["corpus_id"])
    rows = [i for i, d in enumerate(corpus["id"]) if d in relevant]
    rows += [i for i, d in enumerate(corpus["id"]) if d not in relevant][: num_documents - len(rows)]
    queries = read_queries(folder / "queries.jsonl")
    query_rows = [i for i, q in enumerate(queries["id"]) if q in query_ids]
    return datasets.DatasetDict({
        "corpus": datasets.Dataset.from_dict({name: [corpus[name][i] for i in sorted(rows)] for name in corpus}),
        "queries": datasets.Dataset.from_dict({name: [queries[name][i] for i in query_rows] for name in queries}),
        "test": datasets.Dataset.from_dict(test),
    })


def test_retrieval_through_mteb_equals_our_scorer(tiny_model, shared_data, no_network):
    from contrastive_bert.data.beir import RetrievalData
    from contrastive_bert.evaluation.beir_evaluation import evaluate_retrieval_splits

    subset = _scifact_subset(shared_data)
    assert len(subset["corpus"]) == 50 and len(subset["queries"]) == 10
    task = LocalSciFact(loader=lambda: subset)
    [result] = evaluate_mteb_tasks(tiny_model, [task], batch_size=16)
    mteb_scores = summarize_task_result(result)

    data = RetrievalData.from_splits(subset)
    ours = evaluate_retrieval_splits(tiny_model, data, ["test"], batch_size=16)["test"]
    assert ours["num_queries"] == 10 and ours["num_documents"] == 50
    assert 0 < ours["ndcg_at_10"] < 100 and ours["ndcg_at_10"] != ours["recall_at_100"]  # a non-trivial ranking
    # mteb rounds nDCG/MAP/Recall to 5 decimals of a fraction (5e-4 here); its MRR is not rounded
    for key in ("ndcg_at_10", "map_at_100", "recall_at_100", "recall_at_10", "ndcg_at_1", "map_at_10", "precision_at_3"):
        assert ours[key] == pytest.approx(mteb_scores[key], abs=5.1e-4), key
    for key in ("mrr_at_10", "mrr_at_1"):
        assert ours[key] == pytest.approx(mteb_scores[key], abs=1e-9), key
    assert mteb_scores["main_score"] == pytest.approx(ours["main_score"], abs=5.1e-4)


def test_retrieval_task_loader_errors():
    import datasets

    with pytest.raises(ValueError, match="loader"):
        LocalSciFact(loader="not a function")
    task = LocalSciFact(loader=lambda: datasets.DatasetDict({"corpus": datasets.Dataset.from_dict({"id": ["d"]})}))
    with pytest.raises(ValueError, match=r"needs splits \['queries', 'test'\]"):
        task.load_data()


@pytest.mark.slow
@pytest.mark.parametrize("name", ["scifact", "nfcorpus"])
def test_bundled_model_reproduces_published_retrieval_ndcg(bundled_model, shared_data, name):
    """MTEB leaderboard nDCG@10 of all-MiniLM-L6-v2, through our evaluator (documents cut at 256 tokens)."""
    from contrastive_bert.data import load_dataset
    from contrastive_bert.data.beir import RetrievalData
    from contrastive_bert.evaluation.beir_evaluation import evaluate_retrieval_splits

    assert bundled_model.max_seq_length == 256
    data = RetrievalData.from_splits(load_dataset(name, data_dir=shared_data))
    scores = evaluate_retrieval_splits(bundled_model, data, ["test"], batch_size=64)["test"]
    print(f"{name}: nDCG@10 {scores['main_score']:.3f}, MAP@100 {scores['map_at_100']:.3f}, "
          f"Recall@100 {scores['recall_at_100']:.3f}")
    assert scores["main_score"] == pytest.approx(PUBLISHED_NDCG_AT_10[name], abs=0.05)
