"""Registry loaders over every file in ``../shared/data``: row counts from its README, schemas,
first-row spot checks, the format traps (BOM, quotes, extra columns, header lines), the
resolution order (path > data_dir > $CONTRASTIVE_BERT_DATA > hub) and bad input."""

from __future__ import annotations

import csv
import json
import re
import shutil

import datasets
import pytest

from contrastive_bert.data import (
    DATA_DIR_ENV,
    REGISTRY,
    TASK_COLUMNS,
    get_spec,
    load_dataset,
    positive_pairs,
    resolve_data_dir,
    validate_split,
)
from contrastive_bert.data.registry import resolve_dataset_argument
from contrastive_bert.data.schemas import build_split

# Row counts exactly as in shared/data/README.md.
EXPECTED_ROWS = {
    "stsb": {"train": 5749, "validation": 1500, "test": 1379},
    "mrpc": {"train": 3576, "validation": 500, "test": 1725},
    "banking77": {"train": 9002, "validation": 1001, "test": 3080},  # validation: the dev-split rule's 10% of train
    "emotion": {"train": 16000, "validation": 2000, "test": 2000},
    "sst2": {"train": 67349, "validation": 872, "test": 1821},
    "answer_selection": {"train": 4718, "validation": 1148, "test": 1517},
}

_CACHE: dict[str, datasets.DatasetDict] = {}


@pytest.fixture()
def local(shared_data):
    """``local(name)``: the data set loaded from the shared data root (parsed once per session)."""

    def get(name: str) -> datasets.DatasetDict:
        if name not in _CACHE:
            _CACHE[name] = load_dataset(name, data_dir=shared_data)
        return _CACHE[name]

    return get


@pytest.fixture()
def no_env(monkeypatch):
    monkeypatch.delenv(DATA_DIR_ENV, raising=False)


def _write_tiny_stsb(folder, rows=(("5.000", "a b", "a b"), ("0.000", "c d", "e f"), ("2.500", "g", "h"))):
    folder.mkdir(parents=True, exist_ok=True)
    for name in ("sts-train.csv", "sts-dev.csv", "sts-test.csv"):
        lines = [f"genre\tfile\t2012\t{i:04d}\t{score}\t{s1}\t{s2}" for i, (score, s1, s2) in enumerate(rows)]
        (folder / name).write_text("\n".join(lines) + "\n", encoding="utf-8")
    return folder


# --------------------------------------------------------------------------- counts and schemas


RETRIEVAL_SETS = {"scifact", "nfcorpus"}  # tests/data/test_retrieval_data.py


def test_registry_names_every_shared_data_set():
    assert set(REGISTRY) == set(EXPECTED_ROWS) | RETRIEVAL_SETS


@pytest.mark.parametrize("name", sorted(set(EXPECTED_ROWS) | RETRIEVAL_SETS))
def test_hub_equivalent_pinned_to_a_commit(name):
    """A branch (``main``, ``refs/convert/parquet``) moves under a result; a 40-hex commit does not.
    answer_selection has no hub equivalent (its loader says so)."""
    spec = REGISTRY[name]
    if name == "answer_selection":
        assert spec.hub_id is None
        return
    assert re.fullmatch(r"[0-9a-f]{40}", spec.hub_revision or ""), (name, spec.hub_revision)


@pytest.mark.parametrize("name", sorted(EXPECTED_ROWS))
def test_row_counts_and_schema(local, name):
    data = local(name)
    assert {split: len(ds) for split, ds in data.items()} == EXPECTED_ROWS[name]
    task_type = get_spec(name).task_type
    for split, ds in data.items():
        assert ds.column_names == list(TASK_COLUMNS[task_type]), split
        validate_split(ds, task_type, split=split)


@pytest.mark.parametrize("name", sorted(EXPECTED_ROWS))
def test_split_argument_returns_one_dataset(local, shared_data, name):
    split = "test"
    ds = load_dataset(name, split=split, data_dir=shared_data)
    assert isinstance(ds, datasets.Dataset)
    assert len(ds) == EXPECTED_ROWS[name][split]
    assert ds[0] == local(name)[split][0]


def test_stsb_rows(local, shared_data):
    data = local("stsb")
    assert data["train"][0] == {"sentence1": "A plane is taking off.", "sentence2": "An air plane is taking off.", "score": 1.0}
    assert data["train"][1]["score"] == pytest.approx(3.8 / 5)
    assert data["test"][0] == {"sentence1": "A girl is styling her hair.", "sentence2": "A girl is brushing her hair.", "score": 0.5}
    # quotes are literal text (QUOTE_NONE), not CSV quoting
    assert 'A dog in a "superman" shirt sleeps on a blanket.' in data["train"]["sentence1"]
    for split, ds in data.items():
        scores = ds["score"]
        assert min(scores) == 0.0 and max(scores) == 1.0, split  # 0-5 rescaled to [0, 1]
    # every raw line, including those with extra source columns, maps to one row: fields 5 and 6
    with open(shared_data / "stsb" / "sts-train.csv", encoding="utf-8", newline="") as handle:
        raw = list(csv.reader(handle, delimiter="\t", quoting=csv.QUOTE_NONE))
    extra = [i for i, row in enumerate(raw) if len(row) > 7]
    assert extra, "the README promises rows with extra columns"
    for i in extra[:5]:
        assert data["train"][i]["sentence1"] == raw[i][5]
        assert data["train"][i]["sentence2"] == raw[i][6]
        assert data["train"][i]["score"] == pytest.approx(float(raw[i][4]) / 5)


def test_mrpc_rows_bom_stripped(local, shared_data):
    data = local("mrpc")
    first = data["train"][0]
    assert first["label"] == 1
    assert first["sentence1"].startswith("Amrozi accused his brother")
    assert first["sentence2"].startswith("Referring to him as only")
    for split, ds in data.items():
        assert set(ds["label"]) == {0, 1}, split
        for column in ("sentence1", "sentence2"):
            assert not any("\ufeff" in s or "\r" in s for s in ds[column]), (split, column)
    raw = (shared_data / "mrpc" / "msr-para-train.tsv").read_text(encoding="utf-8-sig").splitlines()
    assert raw[0].startswith("Quality")  # header, BOM gone with utf-8-sig
    assert sum(data["train"]["label"]) == sum(line.startswith("1\t") for line in raw[1:])


def test_banking77_labels_in_categories_order(local, shared_data):
    data = local("banking77")
    categories = json.loads((shared_data / "banking77" / "categories.json").read_text(encoding="utf-8"))
    assert len(categories) == 77
    for ds in data.values():
        assert ds.features["label"].names == categories
        assert len(set(ds["label"])) == 77
    first = load_dataset("banking77", split="train", data_dir=shared_data, dev_split=False)[0]  # as published
    assert first["text"] == "I am still waiting on my card?"
    assert data["train"].features["label"].int2str(first["label"]) == "card_arrival"


def test_emotion_rows(local):
    data = local("emotion")
    names = data["train"].features["label"].names
    assert names == ["sadness", "joy", "love", "anger", "fear", "surprise"]
    assert data["train"][0] == {"text": "i didnt feel humiliated", "label": names.index("sadness")}
    for split, ds in data.items():
        assert set(ds["label"]) == set(range(6)), split
        assert "text" not in ds["text"][:1]  # the `text;label_name` header line is not a row


def test_sst2_rows(local):
    data = local("sst2")
    assert data["train"].features["label"].names == ["negative", "positive"]
    assert data["train"][0] == {"text": "hide new secretions from the parental units", "label": 0}
    assert data["validation"][0]["text"] == "it 's a charming and often affecting journey ."
    assert not any(t != t.strip() for t in data["train"]["text"][:1000])


def test_answer_selection_rows(local):
    data = local("answer_selection")
    first = data["train"][0]
    assert first["label"] == 1
    assert first["question"].startswith("Who is the author of the book , `` The Iron Lady")
    assert first["answer"].startswith("the IRON LADY ; A Biography of Margaret Thatcher by Hugo Young")
    for ds in data.values():
        assert set(ds["label"]) == {0, 1}
        assert len(set(ds["question"])) < len(ds)  # many candidates per question


# --------------------------------------------------------------------------- resolution order


def test_explicit_path_wins_over_data_dir_and_env(tmp_path, shared_data, monkeypatch):
    tiny = _write_tiny_stsb(tmp_path / "mystsb")
    monkeypatch.setenv(DATA_DIR_ENV, str(shared_data))
    data = load_dataset("stsb", path=tiny, data_dir=shared_data)
    assert {split: len(ds) for split, ds in data.items()} == {"train": 3, "validation": 3, "test": 3}
    assert data["train"]["score"] == [1.0, 0.0, 0.5]


def test_data_dir_wins_over_env(tmp_path, shared_data, monkeypatch):
    _write_tiny_stsb(tmp_path / "root" / "stsb")
    monkeypatch.setenv(DATA_DIR_ENV, str(tmp_path / "root"))
    assert len(load_dataset("stsb", split="train", data_dir=shared_data)) == 5749
    # without data_dir the environment variable is used
    assert len(load_dataset("stsb", split="train")) == 3
    assert resolve_data_dir() == tmp_path / "root"
    assert resolve_data_dir(shared_data) == shared_data


def test_env_root_used_before_hub(tmp_path, monkeypatch):
    _write_tiny_stsb(tmp_path / "root" / "stsb")
    monkeypatch.setenv(DATA_DIR_ENV, str(tmp_path / "root"))

    def offline(*args, **kwargs):
        raise AssertionError("the hub must not be used when a local data root is set")

    monkeypatch.setattr(datasets, "load_dataset", offline)
    assert len(load_dataset("stsb", split="test")) == 3


def _fake_hub(monkeypatch, payload):
    calls = []
    monkeypatch.setattr("contrastive_bert.data.hub.hub_reachable", lambda: True)

    def fake_load_dataset(path, name=None, *args, **kwargs):
        calls.append((path, name))
        return payload

    monkeypatch.setattr(datasets, "load_dataset", fake_load_dataset)
    return calls


def test_hub_fallback_stsb(no_env, monkeypatch):
    split = datasets.Dataset.from_dict({"sentence1": ["a", "b"], "sentence2": ["c", "d"], "score": [0.2, 1.0]})
    calls = _fake_hub(monkeypatch, datasets.DatasetDict({"train": split, "validation": split, "test": split}))
    data = load_dataset("stsb")
    assert calls == [("sentence-transformers/stsb", None)]
    assert set(data) == {"train", "validation", "test"}
    assert data["test"]["score"] == [0.2, 1.0]
    assert resolve_data_dir() is None


def test_hub_fallback_empty_env_means_unset(monkeypatch):
    monkeypatch.setenv(DATA_DIR_ENV, "")
    split = datasets.Dataset.from_dict({"sentence1": ["a"], "sentence2": ["c"], "label": [1], "idx": [0]})
    calls = _fake_hub(monkeypatch, datasets.DatasetDict({"train": split, "validation": split, "test": split}))
    data = load_dataset("mrpc", split="train")
    assert calls == [("nyu-mll/glue", "mrpc")]
    assert data.column_names == ["sentence1", "sentence2", "label"]  # hub extras (idx) dropped


def test_hub_fallback_sst2_dev_becomes_test(no_env, monkeypatch):
    label = datasets.ClassLabel(names=["negative", "positive"])
    features = datasets.Features({"sentence": datasets.Value("string"), "label": label, "idx": datasets.Value("int32")})
    make = lambda texts, labels: datasets.Dataset.from_dict(  # noqa: E731
        {"sentence": texts, "label": labels, "idx": list(range(len(texts)))}, features=features
    )
    hidden = datasets.Dataset.from_dict({"sentence": ["?"], "label": [-1], "idx": [0]})  # GLUE hides test labels
    calls = _fake_hub(monkeypatch, datasets.DatasetDict({
        "train": make(["good", "bad"], [1, 0]), "validation": make(["fine"], [1]), "test": hidden,
    }))
    data = load_dataset("sst2", dev_split=False)
    assert calls == [("nyu-mll/glue", "sst2")]
    assert set(data) == {"train", "test"}
    assert data["test"]["text"] == ["fine"]
    carved = load_dataset("sst2")  # the hub's sst2 has no labelled dev split left: the dev-split rule makes one
    assert list(carved) == ["train", "validation", "test"]
    assert sorted([*carved["train"]["text"], *carved["validation"]["text"]]) == ["bad", "good"]
    assert data["train"].features["label"].names == ["negative", "positive"]


def test_hub_fallback_validates_columns(no_env, monkeypatch):
    split = datasets.Dataset.from_dict({"s1": ["a"], "s2": ["b"], "score": [0.5]})
    _fake_hub(monkeypatch, datasets.DatasetDict({"train": split}))
    with pytest.raises(ValueError, match=r"missing column\(s\) \['sentence1', 'sentence2'\]"):
        load_dataset("stsb")


def test_hub_fallback_without_hub_id(no_env, monkeypatch):
    _fake_hub(monkeypatch, None)
    with pytest.raises(ValueError, match="'answer_selection' has no hub equivalent; pass data_dir"):
        load_dataset("answer_selection")


# --------------------------------------------------------------------------- bad input


def test_unknown_name_suggests_closest():
    with pytest.raises(ValueError, match=r"unknown data set 'stsbb'.*Did you mean 'stsb'"):
        load_dataset("stsbb")
    with pytest.raises(ValueError, match=r"unknown data set 'bankin77'.*Did you mean 'banking77'"):
        get_spec("bankin77")
    with pytest.raises(ValueError, match=r"unknown data set 'zzzzqqq'; known: answer_selection, banking77"):
        get_spec("zzzzqqq")


@pytest.mark.parametrize(("typed", "meant"), [("STS-B", "stsb"), ("SST-2", "sst2"), ("Banking-77", "banking77"),
                                              ("Emotion", "emotion"), ("answer-selection", "answer_selection")])
def test_a_name_spelled_with_other_case_or_dashes_gets_the_one_meant(typed, meant):
    with pytest.raises(ValueError, match=rf"unknown data set '{typed}'.*Did you mean '{meant}'\?"):
        get_spec(typed)


def test_bad_data_dir(tmp_path):
    with pytest.raises(ValueError, match="data_dir: .* is not a directory"):
        load_dataset("stsb", data_dir=tmp_path / "nope")
    with pytest.raises(ValueError, match=r"data_dir: .* has no stsb/ folder for data set 'stsb'"):
        load_dataset("stsb", data_dir=tmp_path)


def test_bad_env_data_dir(tmp_path, monkeypatch):
    monkeypatch.setenv(DATA_DIR_ENV, str(tmp_path / "missing"))
    with pytest.raises(ValueError, match="data_dir: .*missing is not a directory"):
        load_dataset("mrpc")


def test_bad_explicit_path(tmp_path):
    with pytest.raises(ValueError, match="path: .* is not a directory holding the stsb files"):
        load_dataset("stsb", path=tmp_path / "nope")


@pytest.mark.parametrize(
    "name, folder, missing",
    [
        ("stsb", "stsb", "sts-test.csv"),
        ("mrpc", "mrpc", "msr-para-val.tsv"),
        ("banking77", "banking77", "categories.json"),
        ("emotion", "emotion", "val.txt"),
        ("sst2", "sst2", "dev.tsv"),
        ("answer_selection", "answer_selection_wang", "dev.csv"),
    ],
)
def test_missing_file(tmp_path, shared_data, name, folder, missing):
    copy = tmp_path / folder
    copy.mkdir()
    for source in (shared_data / folder).iterdir():
        if source.name != missing:
            shutil.copyfile(source, copy / source.name)
    with pytest.raises(ValueError, match=rf"data file not found: .*{missing}"):
        load_dataset(name, data_dir=tmp_path)


def test_unknown_split(shared_data):
    with pytest.raises(ValueError, match=r"split: data set 'banking77' has splits \['train', 'test'\], not 'validation'"):
        load_dataset("banking77", split="validation", data_dir=shared_data, dev_split=False)
    with pytest.raises(ValueError, match=r"split: data set 'banking77' has splits \['train', 'validation', 'test'\], not 'dev'"):
        load_dataset("banking77", split="dev", data_dir=shared_data)


def test_malformed_stsb_line(tmp_path):
    folder = _write_tiny_stsb(tmp_path / "stsb")
    (folder / "sts-dev.csv").write_text("genre\tfile\t2012\t0001\t3.0\tonly one sentence\n", encoding="utf-8")
    with pytest.raises(ValueError, match=r"sts-dev.csv: line 1 has 6 fields, expected at least 7"):
        load_dataset("stsb", path=folder)


def test_stsb_out_of_range_score_file(tmp_path):
    folder = _write_tiny_stsb(tmp_path / "stsb", rows=(("5.5", "a", "b"),))
    with pytest.raises(ValueError, match=r"score: row 0 of .*stsb/sts-train.csv is 1.1, expected a value in \[0, 1\]"):
        load_dataset("stsb", path=folder)


def test_emotion_unknown_label_file(tmp_path):
    folder = tmp_path / "emotion"
    folder.mkdir()
    for name in ("train.txt", "val.txt", "test.txt"):
        (folder / name).write_text("i am happy;joy\ni am bored;boredom\n", encoding="utf-8")
    with pytest.raises(ValueError, match=r"label: row 1 of .*emotion/train.txt has label 'boredom', which is not in the declared label set \(6 labels"):
        load_dataset("emotion", path=folder)


def test_empty_split_file(tmp_path):
    folder = tmp_path / "answer_selection_wang"
    folder.mkdir()
    for name in ("train.csv", "dev.csv"):
        (folder / name).write_text("qtext,label,atext\nwho?,1,me\n", encoding="utf-8")
    (folder / "test.csv").write_text("qtext,label,atext\n", encoding="utf-8")
    with pytest.raises(ValueError, match="the split is empty"):
        load_dataset("answer_selection", data_dir=tmp_path)


# --------------------------------------------------------------------------- schema validation


def test_build_split_classification_names_and_ids():
    ds = build_split("classification", {"text": ["a", "b", "c"], "label": ["neg", 1, "neg"]}, ["neg", "pos"])
    assert ds["label"] == [0, 1, 0]
    assert ds.features["label"].names == ["neg", "pos"]


@pytest.mark.parametrize(
    "task_type, columns, label_names, message",
    [
        ("pair-score", {"sentence1": [], "sentence2": [], "score": []}, None, "the split is empty"),
        ("pair-score", {"sentence1": ["a"], "sentence2": ["b"], "score": ["high"]}, None, "score: row 0 of split is not a number: 'high'"),
        ("pair-score", {"sentence1": ["a"], "sentence2": ["b"], "score": [float("nan")]}, None, "score: row 0 of split is not a number: nan"),
        ("pair-score", {"sentence1": ["a", "c"], "sentence2": ["b", "d"], "score": [0.5, 4.0]}, None, r"score: row 1 of split is 4.0, expected a value in \[0, 1\]"),
        ("pair-score", {"sentence1": ["a"], "sentence2": ["b"], "score": [-0.1]}, None, r"expected a value in \[0, 1\]"),
        ("pair-binary", {"sentence1": ["a", "c"], "sentence2": ["b", "d"], "label": [1, 2]}, None, "label: row 1 of split is 2, expected 0 or 1"),
        ("reranking", {"question": ["q"], "answer": ["a"], "label": [-1]}, None, "label: row 0 of split is -1, expected 0 or 1"),
        ("classification", {"text": ["a"], "label": ["x"]}, ["y", "z"], r"label: row 0 has label 'x', which is not in the declared label set \(2 labels"),
        ("classification", {"text": ["a"], "label": [2]}, ["y", "z"], "label: row 0 has label 2, which is not in the declared label set"),
        ("classification", {"text": ["a"], "label": [True]}, ["y", "z"], "label: row 0 has label True"),
        ("classification", {"text": ["a"], "label": ["y"]}, None, "label_names: a classification data set needs its list of label names"),
        ("pair-binary", {"sentence1": [None], "sentence2": ["b"], "label": [1]}, None, "sentence1: row 0 of split is not a string: None"),
        ("ranking", {"text": ["a"]}, None, r"task_type: expected one of \['classification', 'pair-binary', 'pair-score', 'pairs', 'reranking', 'retrieval', 'triplets'\], got 'ranking'"),
    ],
)
def test_build_split_rejects_bad_rows(task_type, columns, label_names, message):
    with pytest.raises(ValueError, match=message):
        build_split(task_type, columns, label_names)


def test_validate_split_missing_columns():
    ds = datasets.Dataset.from_dict({"text1": ["a"], "text2": ["b"], "score": [0.5]})
    with pytest.raises(ValueError, match=r"dev: missing column\(s\) \['sentence1', 'sentence2'\] for task type 'pair-score'"):
        validate_split(ds, "pair-score", split="dev")


# --------------------------------------------------------------------------- positive pairs


def test_positive_pairs_from_each_task_type(local):
    stsb = local("stsb")["train"]
    pairs = positive_pairs(stsb, min_score=0.8)
    assert pairs.column_names == ["anchor", "positive"]
    assert len(pairs) == sum(score >= 0.8 for score in stsb["score"])
    assert pairs[0] == {"anchor": "A plane is taking off.", "positive": "An air plane is taking off."}
    mrpc = local("mrpc")["train"]
    assert len(positive_pairs(mrpc)) == sum(mrpc["label"])
    answers = local("answer_selection")["train"]
    qa = positive_pairs(answers)
    assert len(qa) == sum(answers["label"])
    assert qa[0]["anchor"].startswith("Who is the author")


def test_positive_pairs_errors():
    ds = build_split("pair-score", {"sentence1": ["a"], "sentence2": ["b"], "score": [0.3]})
    with pytest.raises(ValueError, match="no positive pairs left after filtering"):
        positive_pairs(ds, min_score=0.8)
    texts = build_split("classification", {"text": ["a"], "label": ["x"]}, ["x"])
    with pytest.raises(ValueError, match="expected a pairs, triplets, pair-score, pair-binary or reranking split"):
        positive_pairs(texts)
    assert positive_pairs(ds, min_score=0.3)[0] == {"anchor": "a", "positive": "b"}


@pytest.mark.parametrize(("typed", "ours"), [("STSBenchmark", "'stsb'"), ("Banking77Classification", "'banking77'"),
                                             ("mteb/scifact", "'scifact'"), ("nyu-mll/glue", "'mrpc' or 'sst2'")])
def test_an_mteb_or_hub_name_gets_the_name_used_here(typed, ours):
    """A user coming from mteb or the hub types its name for a data set: the error names ours."""
    with pytest.raises(ValueError, match=re.escape(f"{typed!r} is what mteb or the hub call {ours} here")):
        resolve_dataset_argument(typed)
