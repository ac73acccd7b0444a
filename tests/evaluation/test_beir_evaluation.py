"""The retrieval scorer: hand-computed scores on known embeddings, one corpus encoding for all
splits giving the figures of each split scored alone, and retrieval data sets evaluated by name, by
BEIR folder and through ``contrastive-bert eval`` (its equality with ``mteb.evaluate`` is in
``test_mteb_tasks.py``)."""

from __future__ import annotations

import json
import math

import pytest
import torch

from contrastive_bert.cli import main
from contrastive_bert.data import load_dataset
from contrastive_bert.data.beir import RetrievalData
from contrastive_bert.evaluation import evaluate_tasks
from contrastive_bert.evaluation.beir_evaluation import evaluate_retrieval_splits

L3 = math.log2(3)


@pytest.fixture()
def small_scifact(shared_data) -> RetrievalData:
    """SciFact with its first 300 documents plus every document judged for 20 dev / 20 test queries."""
    full = RetrievalData.from_splits(load_dataset("scifact", data_dir=shared_data))
    qrels = {split: dict(sorted(full.qrels[split].items())[:20]) for split in ("validation", "test")}
    judged = {doc for split in qrels.values() for docs in split.values() for doc in docs}
    corpus = {doc: text for i, (doc, text) in enumerate(full.corpus.items()) if i < 300 or doc in judged}
    return RetrievalData(corpus=corpus, queries=full.queries, qrels=qrels)


class _LookupModel:
    """A stand-in encoder: each text's embedding is looked up in a table; records the calls."""

    def __init__(self, table: dict[str, list[float]]):
        self.table, self.calls = table, []

    def _encode(self, kind, texts, **kwargs):
        self.calls.append((kind, list(texts)))
        return torch.tensor([self.table[t] for t in texts])

    def encode_query(self, texts, **kwargs):
        return self._encode("query", texts, **kwargs)

    def encode_document(self, texts, **kwargs):
        return self._encode("document", texts, **kwargs)


def test_scores_on_known_embeddings_hand_computed():
    table = {"Q1": [1, 0], "Q2": [0, 1], "Q3": [1, 1], "D1": [1, 0.1], "D2": [0.1, 1], "D3": [-1, 0]}
    model = _LookupModel(table)
    corpus = {"d1": "D1", "d2": "D2", "d3": "D3"}
    queries = {"q1": "Q1", "q2": "Q2", "q3": "Q3"}  # q3 is not judged: never encoded
    qrels = {"q1": {"d1": 1}, "q2": {"d1": 2, "d2": 1}}
    out = evaluate_retrieval_splits(model, RetrievalData(corpus=corpus, queries=queries, qrels={"test": qrels}))["test"]
    assert model.calls == [("document", ["D1", "D2", "D3"]), ("query", ["Q1", "Q2"])]
    # q1: d1 first -> 1; q2: d2 (1) then d1 (2): DCG 1 + 2/log2 3 against ideal 2 + 1/log2 3
    assert out["ndcg_at_1"] == pytest.approx(100 * (1 + 1 / 2) / 2)
    assert out["main_score"] == out["ndcg_at_10"] == pytest.approx(100 * (1 + (1 + 2 / L3) / (2 + 1 / L3)) / 2)
    assert out["mrr_at_10"] == 100.0  # both first documents are relevant (grade >= 1)
    assert out["num_queries"] == 2 and out["num_documents"] == 3


def test_one_encoding_equals_per_split_evaluation(tiny_model, small_scifact, monkeypatch):
    documents = []
    encode_document = tiny_model.encode_document
    monkeypatch.setattr(tiny_model, "encode_document", lambda texts, **kw: (documents.append(len(texts)), encode_document(texts, **kw))[1])
    together = evaluate_retrieval_splits(tiny_model, small_scifact, ("validation", "test"))
    assert documents == [len(small_scifact.corpus)]  # the corpus is encoded once for both splits
    for split in ("validation", "test"):
        alone = evaluate_retrieval_splits(tiny_model, small_scifact, (split,))[split]
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
