"""The index follows the corpus size: ``auto`` is exact below the threshold and approximate above
it (the threshold monkeypatched), an approximate index reports its recall@100 against exact search
in one line and warns, naming its knob, when a bad setting loses neighbours; the exact FAISS search
equals ``IndexFlatIP``'s without copying the rows; mining builds its index once per call."""

from __future__ import annotations

import logging

import numpy as np
import pytest
import torch

import contrastive_bert.vector_index as vector_index
from contrastive_bert.corpus_mining import mine_corpus_negatives
from contrastive_bert.data.beir import RetrievalData
from contrastive_bert.embedding_store import encode_corpus
from contrastive_bert.vector_index import VectorIndex, resolve_index_type

faiss = pytest.importorskip("faiss")


def _unit_rows(rows: int, seed: int, dim: int = 32) -> np.ndarray:
    values = np.random.default_rng(seed).standard_normal((rows, dim)).astype(np.float32)
    return values / np.linalg.norm(values, axis=1, keepdims=True)


def test_auto_is_exact_below_the_threshold_and_approximate_above(monkeypatch):
    assert resolve_index_type("auto", 1_000_000) == "flat" and resolve_index_type("auto", 1_000_001) == "ivf"
    rows = _unit_rows(300, 0)
    assert VectorIndex(rows).index_type == "flat" and VectorIndex(rows).measure_recall(rows[:5]) is None
    monkeypatch.setattr(vector_index, "AUTO_EXACT_MAX_DOCUMENTS", 100)
    assert VectorIndex(rows).index_type == "ivf" and VectorIndex(rows[:100]).index_type == "flat"
    assert VectorIndex(rows, backend="torch").index_type == "flat"  # no FAISS: exact, with a warning
    with pytest.raises(ValueError, match="index_type: 'ivf' is a FAISS index; backend 'torch' searches exactly only"):
        VectorIndex(rows, "ivf", backend="torch")
    with pytest.raises(ValueError, match="index_type: expected one of auto, flat, ivf, hnsw"):
        VectorIndex(rows, "annoy")
    with pytest.raises(ValueError, match="nprobe: expected a positive int"):
        VectorIndex(rows, "ivf", nprobe=0)


def test_exact_faiss_search_equals_index_flat_ip_and_torch():
    rows, queries = _unit_rows(500, 1), _unit_rows(30, 2)
    flat = faiss.IndexFlatIP(32)
    flat.add(rows)
    expected_scores, expected_rows = flat.search(queries, 20)
    scores, found = VectorIndex(rows, "flat").search(queries, 20)
    assert np.array_equal(scores.numpy(), expected_scores) and np.array_equal(found.numpy(), expected_rows)
    torch_scores, torch_rows = VectorIndex(rows, "flat", backend="torch").search(torch.from_numpy(queries), 20)
    assert torch.allclose(torch_scores, scores, atol=1e-6) and torch.equal(torch_rows, found)
    assert VectorIndex(rows).embeddings is rows  # searched where the rows lie: no copy


@pytest.mark.parametrize("index_type, setting, knob", [("ivf", {"nprobe": 1}, "raise nprobe (--nprobe, now 1)"),
                                                      ("hnsw", {"ef_search": 1}, "raise efSearch (--ef-search, now 1)")])
def test_recall_is_measured_and_a_bad_setting_warns(index_type, setting, knob):
    rows, queries = _unit_rows(2000, 3), _unit_rows(150, 4)
    good = VectorIndex(rows, index_type).measure_recall(queries)
    assert good.queries == 100 and good.k == 100 and good.recall >= 0.95 and not good.low
    assert good.line().startswith("recall@100 of the approximate index against exact search, on 100 sample queries: ")
    bad = VectorIndex(rows, index_type, **setting).measure_recall(queries)
    assert bad.low and bad.recall < 0.5 and knob in bad.warning()


def _data(documents: int = 60) -> RetrievalData:
    corpus = {f"d{i}": f"document {i} about " + " ".join(["cats", "stars", "rivers", "trees", "rocks"][j % 5] for j in range(i % 7 + 1))
              for i in range(documents)}
    queries = {f"q{i}": f"what about {['cats', 'stars', 'rivers', 'trees', 'rocks'][i % 5]} {i}?" for i in range(12)}
    train = {f"q{i}": {f"d{i}": 1} for i in range(12)}
    return RetrievalData(corpus=corpus, queries=queries, qrels={"train": train})


def test_mining_above_the_threshold_logs_recall_and_builds_its_index_once(tiny_model, monkeypatch, caplog):
    import contrastive_bert.corpus_mining as corpus_mining
    import contrastive_bert.vector_index as module

    built = []
    original = module.build_faiss_index
    monkeypatch.setattr(module, "build_faiss_index", lambda *a, **k: built.append(a[1]) or original(*a, **k))
    monkeypatch.setattr(corpus_mining, "SEARCH_CHUNK", 5)  # 12 queries: three chunks, one index
    data = _data()
    options = dict(num_negatives=2, range_max=10, perc_pos=None)
    exact = mine_corpus_negatives(tiny_model, data, **options)
    assert built == [] and "recall@100" not in caplog.text  # below the threshold: exact, no recall line
    monkeypatch.setattr(vector_index, "AUTO_EXACT_MAX_DOCUMENTS", 50)
    with caplog.at_level(logging.INFO, logger="contrastive_bert.corpus_mining"):
        approximate, report = mine_corpus_negatives(tiny_model, data, return_report=True, **options)
    assert built == ["ivf"] and report.recall is not None and report.recall.queries == 12
    # recall@min(100, N): all 60 documents here
    assert sum("recall@60 of the approximate index against exact search, on 12 sample queries" in r.message for r in caplog.records) == 1
    assert approximate.to_dict() == exact.to_dict()  # 60 documents in 7 lists, 32 probed: IVF finds them all
    caplog.clear()
    with caplog.at_level(logging.INFO, logger="contrastive_bert.corpus_mining"):
        mine_corpus_negatives(tiny_model, data, index_type="ivf", nprobe=1, **options)
    warnings = [r.message for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warnings) == 1 and "raise nprobe (--nprobe, now 1)" in warnings[0]


def test_mining_takes_its_corpus_embeddings_explicitly(tiny_model):
    data = _data()
    ids = list(data.corpus)
    given = encode_corpus(tiny_model, ids, [data.corpus[d] for d in ids])
    options = dict(num_negatives=2, range_max=10, perc_pos=None)
    assert mine_corpus_negatives(tiny_model, data, corpus_embeddings=given, **options).to_dict() == \
        mine_corpus_negatives(tiny_model, data, **options).to_dict()
    other = encode_corpus(tiny_model, ids[:-1], [data.corpus[d] for d in ids[:-1]])
    with pytest.raises(ValueError, match=r"corpus_embeddings: encode another corpus \(59 documents\)"):
        mine_corpus_negatives(tiny_model, data, corpus_embeddings=other, **options)
