"""Retrieval metrics and exact search: hand-computed toy rankings (binary and graded), equality with
pytrec_eval (what mteb calls) and mteb's MRR on random graded runs, exact search against a full sort."""

from __future__ import annotations

import math
import random

import numpy as np
import pytest
import torch

from contrastive_bert.evaluation.dense_retrieval import exact_search
from contrastive_bert.evaluation.retrieval_metrics import rank_documents, retrieval_scores
from contrastive_bert.topk_search import stable_topk

L3, L5 = math.log2(3), math.log2(5)


def test_binary_toy_ranking_hand_computed():
    # ranking: d2 (0), d1 (1), d4 (0), d3 (1), d5 (0); R = 2
    qrels = {"q1": {"d1": 1, "d3": 1}}
    run = {"q1": {"d2": 0.9, "d1": 0.8, "d4": 0.7, "d3": 0.6, "d5": 0.5}}
    s = retrieval_scores(qrels, run, k_values=(1, 3, 5))
    expected = {
        "ndcg_at_1": 0.0,
        "ndcg_at_3": (1 / L3) / (1 + 1 / L3),  # 0.386853
        "ndcg_at_5": (1 / L3 + 1 / L5) / (1 + 1 / L3),  # 0.650920
        "map_at_1": 0.0,
        "map_at_3": (1 / 2) / 2,
        "map_at_5": (1 / 2 + 2 / 4) / 2,
        "mrr_at_1": 0.0,
        "mrr_at_3": 1 / 2,
        "mrr_at_5": 1 / 2,
        "recall_at_1": 0.0,
        "recall_at_3": 1 / 2,
        "recall_at_5": 1.0,
        "precision_at_1": 0.0,
        "precision_at_3": 1 / 3,
        "precision_at_5": 2 / 5,
    }
    assert set(s) == set(expected)
    for key, value in expected.items():
        assert s[key] == pytest.approx(100 * value, abs=1e-12), key


def test_graded_toy_ranking_hand_computed():
    # ranking: b (1), c (0), d (unjudged), a (2); z (1) never retrieved; ideal gains 2, 1, 1
    qrels = {"q": {"a": 2, "b": 1, "c": 0, "z": 1}}
    run = {"q": {"a": 0.1, "b": 0.9, "c": 0.8, "d": 0.5}}
    s = retrieval_scores(qrels, run, k_values=(1, 3, 10))
    ideal_3 = 2 + 1 / L3 + 1 / 2
    assert s["ndcg_at_1"] == pytest.approx(100 * 1 / 2)  # gain 1 against the ideal 2
    assert s["ndcg_at_3"] == pytest.approx(100 * 1 / ideal_3)  # 0.319394
    assert s["ndcg_at_10"] == pytest.approx(100 * (1 + 2 / L5) / ideal_3)  # 0.594505 (a at rank 4)
    assert s["map_at_10"] == pytest.approx(100 * (1 / 1 + 2 / 4) / 3)  # divided by R = 3, not by hits
    assert s["recall_at_3"] == pytest.approx(100 * 1 / 3)
    assert s["recall_at_10"] == pytest.approx(100 * 2 / 3)
    assert s["precision_at_10"] == pytest.approx(100 * 2 / 10)  # /k although only 4 were retrieved
    assert s["mrr_at_1"] == 100.0


def test_mean_over_judged_queries_missing_and_zero_grade_queries_count_zero():
    qrels = {"hit": {"a": 1}, "no_run": {"a": 1}, "only_zero": {"a": 0}, "neg": {"a": -1, "b": 1}}
    run = {"hit": {"a": 1.0}, "only_zero": {"a": 1.0}, "neg": {"a": 0.9, "b": 0.5}, "unjudged": {"a": 1.0}}
    s = retrieval_scores(qrels, run, k_values=(1, 2))
    assert s["ndcg_at_1"] == pytest.approx(100 * 1 / 4)  # a negative grade gains 0, not -1
    assert s["ndcg_at_2"] == pytest.approx(100 * (1 + 1 / L3) / 4)
    assert s["recall_at_2"] == pytest.approx(100 * 2 / 4)
    assert s["mrr_at_2"] == pytest.approx(100 * (1 + 1 / 2) / 4)


def test_ties_break_by_document_id_descending_like_trec_eval():
    assert rank_documents({"a": 0.5, "z": 0.5, "m": 0.5, "b": 0.7}) == ["b", "z", "m", "a"]
    run = {"q": {"a": 0.5, "z": 0.5}}
    assert retrieval_scores({"q": {"z": 1}}, run, k_values=(1,))["ndcg_at_1"] == 100.0
    assert retrieval_scores({"q": {"a": 1}}, run, k_values=(1,))["ndcg_at_1"] == 0.0


def _random_case(seed: int, num_queries: int = 60, num_docs: int = 150):
    rng = random.Random(seed)
    docs = [f"d{i}" for i in range(num_docs)]
    qrels, run = {}, {}
    for q in range(num_queries):
        qid = f"q{q}"
        judged = rng.sample(docs, rng.randint(1, 12))
        qrels[qid] = {d: rng.choice([0, 1, 1, 2, 3]) for d in judged}
        if q % 10 == 0:
            qrels[qid] = {d: 0 for d in judged}  # judged, none relevant
        retrieved = rng.sample(docs, rng.randint(5, num_docs))
        # rounded scores: many ties, broken by document id
        run[qid] = {d: round(rng.random(), 2) for d in retrieved}
    return qrels, run


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_equals_pytrec_eval_and_mteb_mrr_on_random_graded_runs(seed):
    pytrec_eval = pytest.importorskip("pytrec_eval")
    from mteb._evaluators.retrieval_metrics import mrr as mteb_mrr

    qrels, run = _random_case(seed)
    ks = (1, 3, 5, 10, 100, 1000)
    ours = retrieval_scores(qrels, run, k_values=ks)
    measures = {f"{m}.{','.join(map(str, ks))}" for m in ("ndcg_cut", "map_cut", "recall", "P")}
    reference = pytrec_eval.RelevanceEvaluator(qrels, measures).evaluate(run)
    assert len(reference) == len(qrels)  # every judged query was retrieved for
    mrr = mteb_mrr(qrels, run, ks)
    for k in ks:
        for ours_name, trec_name in (("ndcg", "ndcg_cut"), ("map", "map_cut"), ("recall", "recall"), ("precision", "P")):
            expected = 100 * np.mean([reference[q][f"{trec_name}_{k}"] for q in qrels])
            assert ours[f"{ours_name}_at_{k}"] == pytest.approx(expected, abs=1e-6), (ours_name, k)
        assert ours[f"mrr_at_{k}"] == pytest.approx(100 * np.mean(mrr[f"MRR@{k}"]), abs=1e-6)
    assert 0 < ours["ndcg_at_10"] < 100


def test_metric_argument_errors():
    with pytest.raises(ValueError, match="k_values"):
        retrieval_scores({"q": {"a": 1}}, {}, k_values=(0,))
    with pytest.raises(ValueError, match="qrels"):
        retrieval_scores({}, {})
    with pytest.raises(ValueError, match="grade"):
        retrieval_scores({"q": {"a": 0.5}}, {})


def test_stable_topk_keeps_lowest_positions_among_ties():
    scores = torch.tensor([[0.1, 0.5, 0.5, 0.9, 0.5], [0.2, 0.2, 0.2, 0.2, 0.2]])
    values, positions = stable_topk(scores, 3)
    assert positions.tolist() == [[3, 1, 2], [0, 1, 2]]
    assert values.tolist() == scores.gather(1, positions).tolist()
    assert values[0].tolist() == pytest.approx([0.9, 0.5, 0.5])


@pytest.mark.parametrize("chunk_size", [1, 7, 64, 1000])
def test_exact_search_equals_full_stable_sort(chunk_size):
    generator = torch.Generator().manual_seed(0)
    queries = torch.randn(9, 8, generator=generator)
    corpus = torch.randn(130, 8, generator=generator)
    # every third document a unit basis vector: its cosine is exactly the query's coordinate, so
    # documents along the same axis tie exactly, across chunks; the lower index must come first
    for row in range(0, 130, 3):
        corpus[row] = torch.nn.functional.one_hot(torch.tensor(row % 5), 8).float()
    scores, indices = exact_search(queries, corpus.numpy(), top_k=40, chunk_size=chunk_size)
    cosine = torch.nn.functional.normalize(queries, dim=1) @ torch.nn.functional.normalize(corpus, dim=1).T
    full = torch.sort(cosine, dim=1, descending=True, stable=True)
    assert scores.shape == indices.shape == (9, 40) and indices.dtype == torch.int64
    assert (full.values[:, 39] == full.values[:, 40]).any()  # the cut-off itself falls inside ties
    assert indices.tolist() == full.indices[:, :40].tolist()
    torch.testing.assert_close(scores, full.values[:, :40], rtol=0, atol=1e-6)
    assert exact_search(queries, corpus[:5], top_k=1000)[1].shape == (9, 5)  # k capped at N


def test_exact_search_argument_errors():
    with pytest.raises(ValueError, match="top_k"):
        exact_search(torch.ones(2, 3), torch.ones(4, 3), top_k=0)
    with pytest.raises(ValueError, match="dimension"):
        exact_search(torch.ones(2, 3), torch.ones(4, 5))
    with pytest.raises(ValueError, match="query_embeddings"):
        exact_search(torch.ones(3), torch.ones(4, 3))


def test_exact_search_checks_a_large_corpus_chunk_by_chunk(monkeypatch):
    """The finiteness check reads the corpus as the search does, a chunk at a time (over a million
    mapped rows, one ``isfinite`` call held 2.5 GB of temporaries), and still finds one bad value in
    the last chunk; a float64 corpus is searched without a float32 copy of it made first."""
    seen = []
    isfinite = torch.isfinite
    monkeypatch.setattr(torch, "isfinite", lambda tensor: seen.append(tuple(tensor.shape)) or isfinite(tensor))
    corpus = torch.randn(10, 3, dtype=torch.float64)
    scores, indices = exact_search(torch.randn(2, 3), corpus, top_k=10, chunk_size=4)
    assert scores.dtype == torch.float32 and indices.shape == (2, 10)
    assert seen == [(2, 3), (4, 3), (4, 3), (2, 3)]  # the queries, then the corpus in chunks of 4 rows
    corpus[9, 2] = float("nan")
    with pytest.raises(ValueError, match="corpus_embeddings: contains NaN"):
        exact_search(torch.randn(2, 3), corpus, top_k=3, chunk_size=4)
