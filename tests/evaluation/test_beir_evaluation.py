"""Scoring a retrieval data set's splits with one corpus encoding gives the same figures as
``evaluate_retrieval`` per split, and retrieval data sets evaluate by name, by BEIR folder and
through ``contrastive-bert eval``."""

from __future__ import annotations

import json

import pytest

from contrastive_bert.cli import main
from contrastive_bert.data import load_dataset
from contrastive_bert.data.beir import RetrievalData
from contrastive_bert.evaluation import evaluate_tasks
from contrastive_bert.evaluation.beir_evaluation import evaluate_retrieval_splits
from contrastive_bert.evaluation.dense_retrieval import evaluate_retrieval


@pytest.fixture()
def small_scifact(shared_data) -> RetrievalData:
    """SciFact with its first 300 documents plus every document judged for 20 dev / 20 test queries."""
    full = RetrievalData.from_splits(load_dataset("scifact", data_dir=shared_data))
    qrels = {split: dict(sorted(full.qrels[split].items())[:20]) for split in ("validation", "test")}
    judged = {doc for split in qrels.values() for docs in split.values() for doc in docs}
    corpus = {doc: text for i, (doc, text) in enumerate(full.corpus.items()) if i < 300 or doc in judged}
    return RetrievalData(corpus=corpus, queries=full.queries, qrels=qrels)


def test_one_encoding_equals_per_split_evaluation(tiny_model, small_scifact):
    together = evaluate_retrieval_splits(tiny_model, small_scifact, ("validation", "test"))
    for split in ("validation", "test"):
        alone = evaluate_retrieval(tiny_model, small_scifact.corpus, small_scifact.queries, small_scifact.qrels[split])
        for metric in ("ndcg_at_10", "map_at_100", "mrr_at_10", "recall_at_100"):
            assert together[split][metric] == pytest.approx(alone[metric], abs=1e-9), (split, metric)
        assert together[split]["main_score"] == together[split]["ndcg_at_10"]
        assert together[split]["num_queries"] == 20


def test_missing_split_is_an_error_before_encoding(tiny_model, small_scifact):
    with pytest.raises(ValueError, match=r"split: the data set has qrels splits \['test', 'validation'\], not 'train'"):
        evaluate_retrieval_splits(tiny_model, small_scifact, ("train",))


def _write_beir(folder, data: RetrievalData) -> None:
    folder.mkdir()
    (folder / "corpus.jsonl").write_text("".join(json.dumps({"_id": d, "title": "", "text": t}) + "\n" for d, t in data.corpus.items()))
    (folder / "queries.jsonl").write_text("".join(json.dumps({"_id": q, "text": t}) + "\n" for q, t in data.queries.items()))
    (folder / "qrels").mkdir()
    rows = ["query-id\tcorpus-id\tscore"] + [f"{q}\t{d}\t{g}" for q, docs in data.qrels["test"].items() for d, g in docs.items()]
    (folder / "qrels" / "test.tsv").write_text("\n".join(rows) + "\n")


def test_beir_folder_evaluates_by_path_and_through_the_cli(tiny_model, tiny_loader, small_scifact, tmp_path, capsys):
    folder = tmp_path / "mini_scifact"
    _write_beir(folder, small_scifact)
    direct = evaluate_retrieval_splits(tiny_model, small_scifact, ("test",))["test"]
    scores = evaluate_tasks(tiny_model, [str(folder)])[str(folder)]
    assert scores["main_score"] == pytest.approx(direct["ndcg_at_10"], abs=1e-9)
    output = tmp_path / "scores.json"
    assert main(["eval", "--model", "default", "--tasks", str(folder), "--output", str(output)]) == 0
    written = json.loads(output.read_text())
    assert json.dumps(written).count("ndcg_at_10") >= 1
    assert pytest.approx(direct["ndcg_at_10"], abs=1e-6) in [v for v in _numbers(written)]


def _numbers(value):
    if isinstance(value, dict):
        for item in value.values():
            yield from _numbers(item)
    elif isinstance(value, (int, float)):
        yield value
