"""Retrieval data sets (BEIR layout) and the one dev-split rule: counts, a BEIR folder by path,
training pairs from qrels, and no dev row in any training data, for every registered data set."""

from __future__ import annotations

from collections import Counter

import pytest

from contrastive_bert.data import REGISTRY, get_dataset, load_dataset
from contrastive_bert.data.beir import (
    RetrievalData,
    corpus_texts,
    document_text,
    read_corpus,
    read_corpus_texts,
    read_qrels,
    read_queries,
    split_queries,
)
from contrastive_bert.data.training_pairs import retrieval_pairs
from contrastive_bert.training.losses_registry import DATA_FORMATS
from contrastive_bert.training.train_data import _COMPATIBLE, build_train_dataset

RETRIEVAL_ROWS = {
    # qrels rows; SciFact ships no dev split: 10% of its 809 train queries (81) become validation
    "scifact": {"corpus": 5183, "queries": 1109, "train": 822, "validation": 97, "test": 339},
    "nfcorpus": {"corpus": 3633, "queries": 3237, "train": 110575, "validation": 11385, "test": 12334},
}


def _beir(folder, qrels, corpus=None, queries=None):
    """A small BEIR folder: ``qrels`` maps split file stem -> [(query, doc, grade)]."""
    import json

    corpus = corpus or {f"d{i}": (f"title {i}", f"text of document {i}") for i in range(6)}
    queries = queries or {f"q{i}": f"query {i}" for i in range(10)}
    folder.mkdir(parents=True)
    (folder / "corpus.jsonl").write_text("".join(json.dumps({"_id": k, "title": t, "text": x}) + "\n" for k, (t, x) in corpus.items()))
    (folder / "queries.jsonl").write_text("".join(json.dumps({"_id": k, "text": t}) + "\n" for k, t in queries.items()))
    (folder / "qrels").mkdir()
    for stem, rows in qrels.items():
        lines = ["query-id\tcorpus-id\tscore"] + [f"{q}\t{d}\t{g}" for q, d, g in rows]
        (folder / "qrels" / f"{stem}.tsv").write_text("\r\n".join(lines) + "\r\n")  # CRLF as the BEIR files
    return folder


@pytest.mark.parametrize("name", sorted(RETRIEVAL_ROWS))
def test_retrieval_sets_load_in_their_schema(shared_data, name):
    data = load_dataset(name, data_dir=shared_data)
    assert {split: len(ds) for split, ds in data.items()} == RETRIEVAL_ROWS[name]
    assert data["corpus"].column_names == ["id", "title", "text"]
    assert data["queries"].column_names == ["id", "text"]
    assert data["test"].column_names == ["query_id", "corpus_id", "score"]
    retrieval = RetrievalData.from_splits(data)
    assert len(retrieval.qrels["test"]) == {"scifact": 300, "nfcorpus": 323}[name]
    assert get_dataset(name).main_score == "ndcg_at_10"


def test_scifact_document_text_is_title_space_text(shared_data):
    data = load_dataset("scifact", data_dir=shared_data)
    retrieval = RetrievalData.from_splits(data)
    first = data["corpus"][0]
    assert retrieval.corpus[first["id"]] == f"{first['title']} {first['text']}".strip()
    assert document_text("", " x ") == "x" and document_text("T", "") == "T"


def test_nfcorpus_grades_are_kept(shared_data):
    test = RetrievalData.from_splits(load_dataset("nfcorpus", data_dir=shared_data)).qrels["test"]
    assert {grade for docs in test.values() for grade in docs.values()} == {1, 2}


def test_beir_folder_by_path(tmp_path):
    folder = _beir(tmp_path / "mine", {"train": [("q1", "d1", 1), ("q2", "d2", 2)], "dev": [("q3", "d3", 1)],
                                       "test": [("q4", "d4", 1), ("q4", "d5", 2)]})
    data = load_dataset(str(folder))
    assert list(data) == ["corpus", "queries", "validation", "test", "train"] or set(data) == {"corpus", "queries", "train", "validation", "test"}
    retrieval = RetrievalData.from_splits(data)
    assert retrieval.qrels["validation"] == {"q3": {"d3": 1}}  # dev.tsv is the validation split
    assert retrieval.qrels["test"] == {"q4": {"d4": 1, "d5": 2}}
    assert retrieval.corpus["d1"] == "title 1 text of document 1"
    assert get_dataset(str(folder)).task_type == "retrieval"


def test_not_a_beir_folder_is_a_clear_error(tmp_path):
    (tmp_path / "empty").mkdir()
    with pytest.raises(ValueError, match="unknown data set"):
        get_dataset(str(tmp_path / "empty"))


def test_qrels_reader_skips_header_and_crlf(tmp_path):
    path = tmp_path / "q.tsv"
    path.write_text("query-id\tcorpus-id\tscore\r\n1\t10\t1\r\n2\t20\t2\r\n\r\n")
    assert read_qrels(path) == {"query_id": ["1", "2"], "corpus_id": ["10", "20"], "score": [1, 2]}


def test_corpus_and_queries_read_line_by_line(tmp_path):
    path = tmp_path / "corpus.jsonl"
    path.write_text('{"_id": 7, "title": "T", "text": "body"}\n\n{"_id": "b", "text": "only text"}\n'
                    '{"_id": "c", "title": "only title", "text": null}\n', encoding="utf-8")
    assert read_corpus(path) == {"id": ["7", "b", "c"], "title": ["T", "", "only title"], "text": ["body", "only text", ""]}
    assert read_corpus_texts(path) == corpus_texts(read_corpus(path)) == {"7": "T body", "b": "only text", "c": "only title"}
    queries = tmp_path / "queries.jsonl"
    queries.write_text('{"_id": "q1", "text": "why?"}\n{"_id": "q2"}\n', encoding="utf-8")
    assert read_queries(queries) == {"id": ["q1", "q2"], "text": ["why?", ""]}
    path.write_text('{"title": "no id", "text": "x"}\n', encoding="utf-8")
    with pytest.raises(KeyError, match="_id"):
        read_corpus_texts(path)


def test_split_queries_is_fixed_and_disjoint():
    ids = [str(i) for i in range(50)]
    kept, held = split_queries(ids, 0.1, seed=0)
    assert len(held) == 5 and not set(kept) & set(held) and sorted(kept + held) == sorted(ids)
    assert split_queries(reversed(ids), 0.1, seed=0) == (kept, held)  # input order does not matter
    assert split_queries(ids, 0.1, seed=1) != (kept, held)


def test_retrieval_pairs_cap_and_grade_order(tmp_path):
    rows = [("q1", f"d{i}", 1) for i in range(5)] + [("q1", "d5", 2), ("q2", "d0", 1), ("q2", "d1", 0)]
    corpus = {f"d{i}": ("", f"doc {i}") for i in range(6)}
    folder = _beir(tmp_path / "cap", {"train": rows, "dev": [("q3", "d0", 1)], "test": [("q4", "d0", 1)]}, corpus=corpus)
    data = load_dataset(str(folder))
    pairs = retrieval_pairs(data, "train", max_positives_per_query=2, seed=0)
    by_query = Counter(pairs["anchor"])
    assert by_query == {"query 1": 2, "query 2": 1}  # capped at 2; the grade-0 judgement is no positive
    first_q1 = pairs["positive"][pairs["anchor"].index("query 1")]
    assert first_q1 == "doc 5"  # the grade-2 document comes first
    scored = retrieval_pairs(data, "train", max_positives_per_query=None, scored=True)
    assert len(scored) == 7 and max(scored["score"]) == 1.0 and min(scored["score"]) == 0.5
    with pytest.raises(ValueError, match="max_positives_per_query"):
        retrieval_pairs(data, "train", max_positives_per_query=0)


# ------------------------------------------------------------------ the dev-split rule, every data set


def _rows(dataset) -> Counter:
    return Counter(tuple(row.values()) for row in dataset)


@pytest.mark.parametrize("name", sorted(REGISTRY))
def test_no_dev_row_in_training_data(shared_data, name):
    """Training rows come only from ``train``; a carved validation split is disjoint from it (as
    multisets of rows, so duplicated texts in the published data are accounted for)."""
    spec = get_dataset(name)
    data = load_dataset(name, data_dir=shared_data)
    published = load_dataset(name, data_dir=shared_data, dev_split=False)
    assert "validation" in data, f"{name}: every registered data set has a dev split"
    if spec.task_type == "retrieval":
        train_queries, dev_queries = set(data["train"]["query_id"]), set(data["validation"]["query_id"])
        assert not train_queries & dev_queries
        if "validation" not in published:
            assert _rows(data["train"]) + _rows(data["validation"]) == _rows(published["train"])
        retrieval = RetrievalData.from_splits(data)
        dev_texts = {retrieval.queries[q] for q in dev_queries}
        train_texts = {retrieval.queries[q] for q in train_queries}
        rows = build_train_dataset([name], "pairs", data_dir=shared_data, seed=0)
        assert set(rows["anchor"]) <= train_texts and not set(rows["anchor"]) & (dev_texts - train_texts)
        return
    if "validation" not in published:  # carved: train and validation partition the published train rows
        assert _rows(data["train"]) + _rows(data["validation"]) == _rows(published["train"])
        assert abs(len(data["validation"]) - 0.1 * len(published["train"])) <= 1
    formats = [f for f in DATA_FORMATS if spec.task_type in _COMPATIBLE[f]]
    train_rows = _rows(data["train"])
    for data_format in formats:
        built = build_train_dataset([name], data_format, data_dir=shared_data, seed=0)
        if data_format == "labelled":
            assert not _rows(built) - train_rows, f"{name}: a training row not in train"
            continue
        # pair rows: every (anchor, positive) must come from a train row
        first, second = {"pair-score": ("sentence1", "sentence2"), "pair-binary": ("sentence1", "sentence2"),
                         "reranking": ("question", "answer")}[spec.task_type]
        train_pairs = Counter(zip(data["train"][first], data["train"][second]))
        columns = ("anchor", "positive") if "anchor" in built.column_names else ("sentence1", "sentence2")
        built_pairs = Counter(zip(built[columns[0]], built[columns[1]]))
        assert not built_pairs - train_pairs, f"{name}/{data_format}: a training pair not in train"
