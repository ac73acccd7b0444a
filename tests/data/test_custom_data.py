"""The user's own data: CSV/TSV/JSON/JSONL/parquet files or a ``datasets`` name, with a column mapping."""

from __future__ import annotations

import json

import datasets
import pandas as pd
import pytest

from contrastive_bert.data import load_custom_dataset

PAIRS = {"query": ["a cat sits", "a dog runs", "rain falls"], "doc": ["a cat is sitting", "a dog is running", "sun shines"], "sim": [0.9, 0.8, 0.1]}


def _write(path, frame: pd.DataFrame):
    suffix = path.suffix
    if suffix == ".csv":
        frame.to_csv(path, index=False)
    elif suffix == ".tsv":
        frame.to_csv(path, index=False, sep="\t")
    elif suffix == ".jsonl":
        frame.to_json(path, orient="records", lines=True)
    elif suffix == ".json":
        path.write_text(json.dumps(frame.to_dict(orient="records")))
    elif suffix == ".parquet":
        frame.to_parquet(path)
    return path


@pytest.mark.parametrize("suffix", [".csv", ".tsv", ".jsonl", ".json", ".parquet"])
def test_pair_score_with_mapping(tmp_path, suffix):
    path = _write(tmp_path / f"pairs{suffix}", pd.DataFrame(PAIRS))
    ds = load_custom_dataset(path, "pair-score", columns={"query": "sentence1", "doc": "sentence2", "sim": "score"})
    assert isinstance(ds, datasets.Dataset)
    assert ds.column_names == ["sentence1", "sentence2", "score"]
    assert ds["sentence1"] == PAIRS["query"]
    assert ds["score"] == pytest.approx(PAIRS["sim"])


@pytest.mark.parametrize("suffix", [".csv", ".tsv", ".jsonl", ".parquet"])
def test_classification_label_names_sorted_by_default(tmp_path, suffix):
    frame = pd.DataFrame({"utterance": ["hi", "bye", "hello", "ciao"], "intent": ["greet", "leave", "greet", "leave"]})
    path = _write(tmp_path / f"intents{suffix}", frame)
    ds = load_custom_dataset(path, "classification", columns={"utterance": "text", "intent": "label"})
    assert ds.features["label"].names == ["greet", "leave"]
    assert ds["label"] == [0, 1, 0, 1]
    assert ds["text"] == ["hi", "bye", "hello", "ciao"]


def test_classification_integer_labels_with_declared_names(tmp_path):
    path = _write(tmp_path / "sentiment.csv", pd.DataFrame({"text": ["bad", "good"], "label": [0, 1]}))
    ds = load_custom_dataset(path, "classification", label_names=["negative", "positive"])
    assert ds.features["label"].names == ["negative", "positive"]
    assert ds["label"] == [0, 1]


def test_classification_label_outside_declared_set(tmp_path):
    path = _write(tmp_path / "sentiment.jsonl", pd.DataFrame({"text": ["bad", "meh"], "label": ["negative", "neutral"]}))
    with pytest.raises(ValueError, match=r"label: row 1 of .*sentiment.jsonl has label 'neutral', which is not in the declared label set \(2 labels"):
        load_custom_dataset(path, "classification", label_names=["negative", "positive"])


def test_pair_binary_and_retrieval(tmp_path):
    path = _write(tmp_path / "para.tsv", pd.DataFrame({"s1": ["a", "b"], "s2": ["c", "d"], "is_para": [1, 0]}))
    ds = load_custom_dataset(path, "pair-binary", columns={"s1": "sentence1", "s2": "sentence2", "is_para": "label"})
    assert ds["label"] == [1, 0]
    path = _write(tmp_path / "qa.parquet", pd.DataFrame({"question": ["q1", "q1"], "answer": ["x", "y"], "label": [0, 1]}))
    ds = load_custom_dataset(path, "reranking", split="test")
    assert ds.column_names == ["question", "answer", "label"]


def test_hub_or_datasets_name(monkeypatch):
    calls = []

    def fake_load_dataset(path, name=None, split=None, **kwargs):
        calls.append((path, name, split))
        return datasets.Dataset.from_dict({"premise": ["a"], "hypothesis": ["b"], "label": [1]})

    monkeypatch.setattr(datasets, "load_dataset", fake_load_dataset)
    ds = load_custom_dataset("someone/pairs", "pair-binary", columns={"premise": "sentence1", "hypothesis": "sentence2"},
                             split="validation", config_name="en")
    assert calls == [("someone/pairs", "en", "validation")]
    assert ds[0] == {"sentence1": "a", "sentence2": "b", "label": 1}


# --------------------------------------------------------------------------- bad input


def test_missing_file(tmp_path):
    with pytest.raises(ValueError, match=r"source: file not found: .*missing.csv"):
        load_custom_dataset(tmp_path / "missing.csv", "pair-score")


def test_unsupported_file_type(tmp_path):
    path = tmp_path / "data.xlsx"
    path.write_text("x")
    with pytest.raises(ValueError, match=r"source: unsupported file type '.xlsx'"):
        load_custom_dataset(path, "pair-score")


def test_unknown_task_type(tmp_path):
    with pytest.raises(ValueError, match=r"task_type: expected one of .*got 'ranking'"):
        load_custom_dataset(tmp_path / "x.csv", "ranking")


def test_mapping_names_a_missing_column(tmp_path):
    path = _write(tmp_path / "pairs.csv", pd.DataFrame(PAIRS))
    with pytest.raises(ValueError, match=r"columns: \['question'\] not found in .*pairs.csv; its columns are \['query', 'doc', 'sim'\]"):
        load_custom_dataset(path, "pair-score", columns={"question": "sentence1"})


def test_unmapped_columns(tmp_path):
    path = _write(tmp_path / "pairs.csv", pd.DataFrame(PAIRS))
    with pytest.raises(ValueError, match=r"lacks \['sentence2', 'score'\] for task type 'pair-score'.*columns=\{'<your column>': 'sentence2'\}"):
        load_custom_dataset(path, "pair-score", columns={"query": "sentence1"})


def test_non_numeric_score(tmp_path):
    path = tmp_path / "pairs.csv"
    path.write_text("s1,s2,score\na,b,0.5\nc,d,high\n")
    with pytest.raises(ValueError, match=r"score: row 1 of .*pairs.csv is not a number: 'high'"):
        load_custom_dataset(path, "pair-score", columns={"s1": "sentence1", "s2": "sentence2"})


def test_out_of_range_score(tmp_path):
    path = _write(tmp_path / "pairs.jsonl", pd.DataFrame({"sentence1": ["a", "b"], "sentence2": ["c", "d"], "score": [4.5, 0.2]}))
    with pytest.raises(ValueError, match=r"score: row 0 of .*pairs.jsonl is 4.5, expected a value in \[0, 1\] \(rescale"):
        load_custom_dataset(path, "pair-score")


def test_binary_label_out_of_range(tmp_path):
    path = _write(tmp_path / "para.csv", pd.DataFrame({"sentence1": ["a"], "sentence2": ["c"], "label": [3]}))
    with pytest.raises(ValueError, match="label: row 0 of .*para.csv is 3, expected 0 or 1"):
        load_custom_dataset(path, "pair-binary")


@pytest.mark.parametrize("name, content", [("pairs.csv", "sentence1,sentence2,score\n"), ("pairs.jsonl", ""), ("pairs.parquet", None)])
def test_empty_file(tmp_path, name, content):
    path = tmp_path / name
    if content is None:
        empty = pd.DataFrame({"sentence1": pd.Series([], dtype=str), "sentence2": pd.Series([], dtype=str),
                              "score": pd.Series([], dtype=float)})
        empty.to_parquet(path)
    else:
        path.write_text(content)
    with pytest.raises(ValueError, match=r"source: could not read .*pairs\.\w+ as \w+ data \(empty or malformed file\?\)"):
        load_custom_dataset(path, "pair-score")


def test_empty_split_from_hub(monkeypatch):
    empty = datasets.Dataset.from_dict({"sentence1": [], "sentence2": [], "score": []})
    monkeypatch.setattr(datasets, "load_dataset", lambda *args, **kwargs: empty)
    with pytest.raises(ValueError, match="the split is empty"):
        load_custom_dataset("someone/empty", "pair-score")


def test_integer_labels_keep_numeric_order(tmp_path):
    labels = [10, 2, 0, 1, 2, 10]
    path = _write(tmp_path / "intents.csv", pd.DataFrame({"text": [f"t{i}" for i in range(6)], "label": labels}))
    ds = load_custom_dataset(path, "classification")
    assert ds.features["label"].names == ["0", "1", "2", "10"]  # not the string order 0, 1, 10, 2
    assert [ds.features["label"].int2str(i) for i in ds["label"]] == [str(v) for v in labels]
