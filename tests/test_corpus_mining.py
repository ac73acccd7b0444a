"""Corpus mining for retrieval: no judged-relevant document (of any split) is ever a negative, the
positive-aware filter drops near-positives, and the chosen negatives are the hardest survivors
of an exact search (checked against a brute-force reference)."""

from __future__ import annotations

import pytest
import torch

from contrastive_bert.corpus_mining import mine_corpus_negatives
from contrastive_bert.data.beir import RetrievalData
from contrastive_bert.embeddings import encode_normalized

WORDS = ["protein", "cell", "gene", "virus", "dose", "trial", "mouse", "cancer", "brain", "heart", "diet", "sleep"]


@pytest.fixture()
def data() -> RetrievalData:
    corpus = {f"d{i}": " ".join(WORDS[(i * j) % len(WORDS)] for j in range(1, 6)) + f" study {i}" for i in range(40)}
    queries = {f"q{i}": " ".join(WORDS[(i + j) % len(WORDS)] for j in range(3)) for i in range(12)}
    train = {f"q{i}": {f"d{i}": 1, f"d{i + 12}": 2} for i in range(8)}
    dev = {"q8": {"d8": 1}}
    # judged relevant to q0..q3 only in the test split: must never be mined for them either
    test = {f"q{i}": {f"d{i + 24}": 1} for i in range(4)}
    return RetrievalData(corpus=corpus, queries=queries, qrels={"train": train, "validation": dev, "test": test})


def _brute_force(model, data, query, positive, num_negatives, perc_pos, range_max):
    doc_ids = list(data.corpus)
    corpus = encode_normalized(model, [data.corpus[d] for d in doc_ids])
    q = encode_normalized(model, [data.queries[query]])[0]
    scores = corpus @ q
    positive_score = float(scores[doc_ids.index(positive)])
    order = torch.argsort(scores, descending=True, stable=True).tolist()
    considered = [i for i in order if doc_ids[i] not in data.relevant(query)][:range_max]
    survivors = [doc_ids[i] for i in considered if perc_pos is None or float(scores[i]) <= perc_pos * positive_score]
    return [data.corpus[d] for d in survivors[:num_negatives]]


def test_judged_relevant_documents_are_never_negatives(tiny_model, data):
    mined = mine_corpus_negatives(tiny_model, data, "train", num_negatives=5, range_max=30, perc_pos=None, backend="torch")
    text_to_id = {text: doc for doc, text in data.corpus.items()}
    query_of = {text: q for q, text in data.queries.items()}
    assert len(mined) == 16  # 8 queries x 2 judged documents, none dropped
    for row in mined:
        query = query_of[row["anchor"]]
        negatives = {text_to_id[row[f"negative_{i}"]] for i in range(1, 6)}
        assert not negatives & data.relevant(query), query  # train, dev and test judgements all excluded
        assert text_to_id[row["positive"]] in data.qrels["train"][query]


@pytest.mark.parametrize("perc_pos", [None, 0.99])
def test_hardest_survivors_equal_brute_force(tiny_model, data, perc_pos):
    mined = mine_corpus_negatives(tiny_model, data, "train", num_negatives=3, range_max=20, perc_pos=perc_pos,
                                  sampling="top", backend="torch", max_positives_per_query=None)
    assert len(mined) >= 8
    query_of = {text: q for q, text in data.queries.items()}
    text_to_id = {text: doc for doc, text in data.corpus.items()}
    for row in mined:
        query, positive = query_of[row["anchor"]], text_to_id[row["positive"]]
        expected = _brute_force(tiny_model, data, query, positive, 3, perc_pos, 20)
        assert [row[f"negative_{i}"] for i in range(1, 4)] == expected


def test_faiss_and_torch_search_mine_the_same(tiny_model, data):
    pytest.importorskip("faiss")
    kwargs = dict(num_negatives=2, range_max=20, perc_pos=0.99, sampling="top")
    assert mine_corpus_negatives(tiny_model, data, backend="faiss", **kwargs).to_dict() == \
        mine_corpus_negatives(tiny_model, data, backend="torch", **kwargs).to_dict()


def test_perc_pos_drops_near_positives(tiny_model, data):
    """A candidate scoring above perc_pos x the positive's score is dropped; with perc_pos tiny no
    candidate survives and the call says what to change."""
    with pytest.raises(ValueError, match="raise range_max or perc_pos"):
        mine_corpus_negatives(tiny_model, data, num_negatives=1, range_max=5, perc_pos=1e-6, backend="torch")


@pytest.mark.parametrize(("kwargs", "message"), [
    ({"num_negatives": 0}, "num_negatives: expected a positive integer"),
    ({"range_max": 1, "num_negatives": 2}, r"range_max: expected an integer >= num_negatives \(2\)"),
    ({"perc_pos": 1.5}, r"perc_pos: expected a number in \(0, 1\]"),
    ({"sampling": "best"}, "sampling: expected 'top' or 'random'"),
    ({"split": "dev"}, r"split: the data set has qrels splits \['test', 'train', 'validation'\], not 'dev'"),
])
def test_bad_arguments(tiny_model, data, kwargs, message):
    with pytest.raises(ValueError, match=message):
        mine_corpus_negatives(tiny_model, data, **kwargs)


def test_the_report_says_how_many_pairs_were_dropped_and_why(tiny_model, data):
    """A pair whose candidates all score above perc_pos x its positive is a near-positive drop (as
    a brute-force count finds); a query with fewer unjudged documents than negatives asked for is
    a small-corpus drop."""
    from contrastive_bert.corpus_mining import MiningReport

    mined, report = mine_corpus_negatives(tiny_model, data, num_negatives=4, range_max=20, perc_pos=0.98, backend="torch",
                                          return_report=True)
    pairs = data.positive_pairs("train", 4, 0)
    near = sum(len(_brute_force(tiny_model, data, q, p, 10**6, 0.98, 20)) < 4 for q, p, _ in pairs)
    assert report == MiningReport(pairs=len(pairs), kept=len(mined), dropped_near_positive=near, dropped_small_corpus=0)
    assert report.kept + near == len(pairs) and 0 < near < len(pairs)
    small = RetrievalData(corpus={"d0": "a cell", "d1": "a gene", "d2": "a virus"}, queries={"q0": "cells", "q1": "genes"},
                          qrels={"train": {"q0": {"d0": 1}, "q1": {"d1": 1, "d2": 1}}})
    _, report = mine_corpus_negatives(tiny_model, small, num_negatives=2, range_max=2, perc_pos=None, backend="torch",
                                      return_report=True)
    assert report == MiningReport(pairs=3, kept=1, dropped_near_positive=0, dropped_small_corpus=2)
