"""Data files as data sets: format inference from columns, explicit formats, training rows from
pairs/triplets/pair-score/labelled files, one-line errors for empty or mis-shaped files, and the
one-line offline error when no data root is given and the hub is unreachable."""

from __future__ import annotations

import re

import json

import pytest

from contrastive_bert.data import (
    DATA_DIR_ENV,
    get_dataset,
    infer_format,
    load_dataset,
    resolve_dataset_argument,
)
from contrastive_bert.evaluation import evaluate_tasks
from contrastive_bert.training.train_data import build_train_dataset, check_train_datasets


def _jsonl(path, rows):
    path.write_text("".join(json.dumps(row) + "\n" for row in rows), encoding="utf-8")
    return path


MINED = [  # `contrastive-bert mine --output-format triplet` rows: one per (anchor, negative)
    {"anchor": "a cat sits", "positive": "a cat is sitting", "negative": "a dog is running"},
    {"anchor": "a cat sits", "positive": "a cat is sitting", "negative": "rain falls"},
    {"anchor": "a dog runs", "positive": "a dog is running", "negative": "a cat is sitting"},
]


@pytest.mark.parametrize(
    "columns, expected",
    [
        (["anchor", "positive", "negative"], ("triplets", {})),
        (["anchor", "positive", "negative_2", "negative_1"], ("triplets", {})),
        (["anchor", "positive"], ("pairs", {})),
        (["anchor", "positive", "id"], ("pairs", {})),
        (["sentence1", "sentence2", "score"], ("pair-score", {})),
        (["sentence1", "sentence2", "label"], ("pair-binary", {})),
        (["text", "label"], ("classification", {})),
        (["question", "answer", "label"], ("reranking", {})),
    ],
)
def test_infer_format(columns, expected):
    assert infer_format(columns) == expected


@pytest.mark.parametrize("columns", [["x", "y", "z"], ["foo", "bar"]])
def test_infer_format_rejects_unknown_columns(columns):
    """Two unknown columns are refused like three: read as positional pairs they trained silently."""
    with pytest.raises(ValueError, match=rf"cannot tell the format from the columns {re.escape(str(columns))}"):
        infer_format(columns)


def test_mined_triplets_file_trains_as_pairs_with_negatives(tmp_path):
    path = _jsonl(tmp_path / "stsb-hard.jsonl", MINED)
    spec = resolve_dataset_argument(str(path))
    assert spec.task_type == "triplets" and spec.name == str(path)
    check_train_datasets([str(path)], "pairs")
    rows = build_train_dataset([str(path)], "pairs", seed=0)
    assert rows.column_names == ["anchor", "positive", "negative"]
    assert sorted(map(tuple, zip(rows["anchor"], rows["positive"], rows["negative"]))) == sorted(
        (r["anchor"], r["positive"], r["negative"]) for r in MINED
    )
    # the name resolves without re-registration anywhere a registry name is accepted
    assert get_dataset(str(path)) is spec
    assert len(load_dataset(str(path), split="train")) == 3


def test_n_tuple_negatives_keep_their_order(tmp_path):
    path = _jsonl(tmp_path / "ntuple.jsonl", [{"anchor": "a", "positive": "b", "negative_2": "d", "negative_1": "c"}])
    rows = build_train_dataset([str(path)], "pairs")
    assert rows.column_names == ["anchor", "positive", "negative_1", "negative_2"]
    assert rows[0] == {"anchor": "a", "positive": "b", "negative_1": "c", "negative_2": "d"}


def test_triplets_and_pairs_do_not_mix(tmp_path):
    path = _jsonl(tmp_path / "mined.jsonl", MINED)
    with pytest.raises(ValueError, match=r"datasets: \[.*mined.jsonl'\] carry hard negatives and \['stsb'\] do not"):
        check_train_datasets([str(path), "stsb"], "pairs")


def test_two_unnamed_columns_are_refused(tmp_path):
    """Two columns of other names are no longer read as (anchor, positive) in order (issue 21)."""
    path = tmp_path / "qa.csv"
    path.write_text("question text,answer text\nwho?,me\nwhere?,here\n", encoding="utf-8")
    with pytest.raises(ValueError, match=r"cannot tell the format from the columns \['question text', 'answer text'\]; "
                                         r"expected pairs \(anchor, positive\)"):
        build_train_dataset([str(path)], "pairs", seed=0)


def test_pair_score_tsv_trains_scored_pairs_and_positive_pairs(tmp_path):
    path = tmp_path / "sts.tsv"
    path.write_text("sentence1\tsentence2\tscore\na\tb\t0.9\nc\td\t0.1\ne\tf\t0.8\n", encoding="utf-8")
    assert get_dataset(str(path)).task_type == "pair-score"
    scored = build_train_dataset([str(path)], "scored_pairs", seed=0)
    assert sorted(scored["score"]) == pytest.approx([0.1, 0.8, 0.9])
    pairs = build_train_dataset([str(path)], "pairs", min_pair_score=0.8, seed=0)
    assert sorted(pairs["anchor"]) == ["a", "e"]


def test_labelled_file_with_explicit_format_and_mapping(tmp_path):
    path = tmp_path / "intents.json"
    path.write_text(json.dumps([{"utterance": "hi", "intent": "greet"}, {"utterance": "bye", "intent": "leave"},
                                {"utterance": "hello", "intent": "greet"}]), encoding="utf-8")
    spec = resolve_dataset_argument(str(path), format="labelled", columns={"utterance": "text", "intent": "label"})
    assert spec.task_type == "classification"
    rows = build_train_dataset([spec], "labelled", seed=0)
    assert rows.features["label"].names == ["greet", "leave"]
    assert sorted(zip(rows["text"], rows["label"])) == [("bye", 1), ("hello", 0), ("hi", 0)]
    with pytest.raises(ValueError, match=r"datasets: .*intents.json' is a classification data set, but this loss trains on pairs"):
        check_train_datasets([spec], "pairs")


def test_pair_score_file_evaluates_as_sts(tmp_path, tiny_model):
    path = tmp_path / "sts.csv"
    path.write_text("sentence1,sentence2,score\na man plays,a man is playing,1.0\na cat,the weather,0.0\n"
                    "a dog barks,a dog is barking,0.9\nrain,a car drives,0.2\n", encoding="utf-8")
    results = evaluate_tasks(tiny_model, [str(path)], show_progress_bar=False)
    assert results[str(path)]["num_pairs"] == 4
    assert results[str(path)]["main_score"] == results[str(path)]["cosine_spearman"]


def test_labelled_file_cannot_be_evaluated_on_its_own_rows(tmp_path, tiny_model):
    path = tmp_path / "labels.csv"
    path.write_text("text,label\ngood,1\nbad,0\n", encoding="utf-8")
    with pytest.raises(ValueError, match=r"tasks: .*labels.csv' has no training rows apart from its 'test' rows"):
        evaluate_tasks(tiny_model, [str(path)])


def test_pairs_file_is_not_an_evaluation_task(tmp_path):
    path = _jsonl(tmp_path / "mined.jsonl", MINED)
    with pytest.raises(ValueError, match=r"tasks: .*mined.jsonl' is a triplets data set \(training rows\)"):
        evaluate_tasks(None, [str(path)])


# --------------------------------------------------------------------------- bad files


@pytest.mark.parametrize("name, content", [("empty.jsonl", ""), ("empty.csv", ""), ("header.csv", "anchor,positive\n"),
                                           ("broken.json", "{not json"), ("blank.tsv", "\n\n")])
def test_empty_or_malformed_file_is_one_line_error(tmp_path, name, content):
    path = tmp_path / name
    path.write_text(content, encoding="utf-8")
    with pytest.raises(ValueError, match=rf"dataset: could not read .*{name} as \w+ data \(empty or malformed file\?\)") as error:
        resolve_dataset_argument(str(path))
    assert "\n" not in str(error.value)
    with pytest.raises(ValueError, match="could not read"):
        check_train_datasets([str(path)], "pairs")


def test_missing_file_and_unknown_columns(tmp_path):
    with pytest.raises(ValueError, match=r"dataset: file not found: .*nope.jsonl"):
        get_dataset(str(tmp_path / "nope.jsonl"))
    path = _jsonl(tmp_path / "odd.jsonl", [{"x": "a", "y": "b", "z": "c"}])
    with pytest.raises(ValueError, match=r"dataset: .*odd.jsonl: cannot tell the format from the columns \['x', 'y', 'z'\]"):
        get_dataset(str(path))
    with pytest.raises(ValueError, match=r"columns: .*odd.jsonl lacks \['sentence1', 'sentence2', 'score'\] for task type 'pair-score'"):
        resolve_dataset_argument(str(path), format="pair-score")
    with pytest.raises(ValueError, match=r"format: expected one of .*labelled.*got 'quads'"):
        resolve_dataset_argument(str(path), format="quads")
    with pytest.raises(ValueError, match=r"format: 'stsb' is a registered pair-score data set; a format and columns apply to data files only"):
        resolve_dataset_argument("stsb", format="pairs")


def test_bad_score_in_file_fails_when_loaded(tmp_path):
    path = tmp_path / "sts.csv"
    path.write_text("sentence1,sentence2,score\na,b,0.5\nc,d,high\n", encoding="utf-8")
    with pytest.raises(ValueError, match=r"score: row 1 of .*sts.csv is not a number: 'high'"):
        get_dataset(str(path))


def test_rewritten_file_is_read_again(tmp_path):
    path = _jsonl(tmp_path / "data.jsonl", MINED[:1])
    assert len(load_dataset(str(path), split="train")) == 1
    _jsonl(path, [{"anchor": "x", "positive": "y"}] * 2)
    import os

    os.utime(path, ns=(1, 1))  # a different modification time even on coarse clocks
    assert get_dataset(str(path)).task_type == "pairs"
    assert len(load_dataset(str(path), split="train")) == 2


# --------------------------------------------------------------------------- offline, no data root


def test_offline_without_data_root_is_one_line_error(monkeypatch):
    import datasets

    monkeypatch.delenv(DATA_DIR_ENV, raising=False)
    monkeypatch.setattr("contrastive_bert.data.hub.hub_reachable", lambda: False)
    monkeypatch.setattr(datasets, "load_dataset", lambda *a, **k: pytest.fail("datasets must not be asked when offline"))
    with pytest.raises(ValueError) as error:
        load_dataset("mrpc")
    message = str(error.value)
    assert "\n" not in message
    assert message.startswith("dataset 'mrpc': no local data root given (--data-dir not set, $CONTRASTIVE_BERT_DATA unset)")
    assert "hub is unreachable for 'nyu-mll/glue' (config 'mrpc')" in message
    assert "pass --data-dir DIR or set CONTRASTIVE_BERT_DATA=DIR, where DIR holds mrpc/" in message


def test_hub_connection_error_is_wrapped(monkeypatch):
    import datasets

    monkeypatch.delenv(DATA_DIR_ENV, raising=False)
    monkeypatch.setattr("contrastive_bert.data.hub.hub_reachable", lambda: True)

    def refuse(*args, **kwargs):
        raise ConnectionError("Couldn't reach 'sentence-transformers/stsb' on the Hub (LocalEntryNotFoundError)")

    monkeypatch.setattr(datasets, "load_dataset", refuse)
    with pytest.raises(ValueError, match=r"dataset 'stsb': no local data root given .*'sentence-transformers/stsb'"):
        load_dataset("stsb")


def test_hub_probe_fails_fast_without_network(monkeypatch):
    import socket

    from contrastive_bert.data import hub

    def refuse(*args, **kwargs):
        raise OSError("Name or service not known")

    monkeypatch.setattr(socket, "create_connection", refuse)
    monkeypatch.setattr("huggingface_hub.constants.HF_HUB_OFFLINE", False)
    hub.hub_reachable.cache_clear()
    try:
        assert hub.hub_reachable() is False
        monkeypatch.setattr("huggingface_hub.constants.HF_HUB_OFFLINE", True)  # datasets reads its cache
        hub.hub_reachable.cache_clear()
        assert hub.hub_reachable() is True
    finally:
        hub.hub_reachable.cache_clear()
