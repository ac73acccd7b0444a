"""Parsers for the original file formats in ``shared/data`` (see its README).

Each reader takes the data set's folder and returns ``{split: {column: list}}`` in the
schema of :mod:`contrastive_bert.data.schemas`, plus label names for classification.
"""

from __future__ import annotations

import csv
import json
from pathlib import Path


def _require(path: Path) -> Path:
    if not path.is_file():
        raise ValueError(f"data file not found: {path}")
    return path


def read_stsb(folder: Path) -> dict[str, dict[str, list]]:
    """STS-B: tab-separated, no header: genre, file, year, id, score (0-5), s1, s2 [, extra].
    Quotes are literal (``QUOTE_NONE``); scores are rescaled to [0, 1]."""
    splits = {}
    for split, name in (("train", "sts-train.csv"), ("validation", "sts-dev.csv"), ("test", "sts-test.csv")):
        columns = {"sentence1": [], "sentence2": [], "score": []}
        with open(_require(folder / name), encoding="utf-8", newline="") as handle:
            for line_no, row in enumerate(csv.reader(handle, delimiter="\t", quoting=csv.QUOTE_NONE), 1):
                if len(row) < 7:
                    raise ValueError(f"{folder / name}: line {line_no} has {len(row)} fields, expected at least 7")
                columns["sentence1"].append(row[5])
                columns["sentence2"].append(row[6])
                columns["score"].append(float(row[4]) / 5.0)
        splits[split] = columns
    return splits


def read_mrpc(folder: Path) -> dict[str, dict[str, list]]:
    """MRPC: tab-separated with header (UTF-8 BOM): Quality, #1 ID, #2 ID, #1 String, #2 String."""
    splits = {}
    for split, name in (("train", "msr-para-train.tsv"), ("validation", "msr-para-val.tsv"), ("test", "msr-para-test.tsv")):
        columns = {"sentence1": [], "sentence2": [], "label": []}
        with open(_require(folder / name), encoding="utf-8-sig", newline="") as handle:
            reader = csv.reader(handle, delimiter="\t", quoting=csv.QUOTE_NONE)
            next(reader)
            for row in reader:
                if not row:
                    continue
                columns["label"].append(int(row[0]))
                columns["sentence1"].append(row[3])
                columns["sentence2"].append(row[4])
        splits[split] = columns
    return splits


def read_banking77(folder: Path) -> tuple[dict[str, dict[str, list]], list[str]]:
    """Banking77: CSV ``text,category``; label order from ``categories.json``. No dev split."""
    label_names = json.loads(_require(folder / "categories.json").read_text(encoding="utf-8"))
    splits = {}
    for split in ("train", "test"):
        with open(_require(folder / f"{split}.csv"), encoding="utf-8", newline="") as handle:
            rows = list(csv.DictReader(handle))
        splits[split] = {"text": [r["text"] for r in rows], "label": [r["category"] for r in rows]}
    return splits, label_names


EMOTION_LABELS = ["sadness", "joy", "love", "anger", "fear", "surprise"]  # dair-ai/emotion's id order


def read_emotion(folder: Path) -> tuple[dict[str, dict[str, list]], list[str]]:
    """Emotion: ``text;label_name`` per line (a ``text;label_name`` header line is skipped)."""
    splits = {}
    for split, name in (("train", "train.txt"), ("validation", "val.txt"), ("test", "test.txt")):
        columns = {"text": [], "label": []}
        for line in _require(folder / name).read_text(encoding="utf-8").splitlines():
            if not line.strip() or line.strip() == "text;label_name":
                continue
            text, label = line.rsplit(";", 1)
            columns["text"].append(text)
            columns["label"].append(label)
        splits[split] = columns
    return splits, EMOTION_LABELS


def read_sst2(folder: Path) -> tuple[dict[str, dict[str, list]], list[str]]:
    """SST-2: tab-separated with header ``sentence\\tlabel``; dev is the validation split."""
    splits = {}
    for split, name in (("train", "train_full.tsv"), ("validation", "dev.tsv"), ("test", "test-labeled.tsv")):
        with open(_require(folder / name), encoding="utf-8", newline="") as handle:
            rows = list(csv.DictReader(handle, delimiter="\t", quoting=csv.QUOTE_NONE))
        splits[split] = {"text": [r["sentence"].strip() for r in rows], "label": [int(r["label"]) for r in rows]}
    return splits, ["negative", "positive"]


def read_answer_selection(folder: Path) -> dict[str, dict[str, list]]:
    """TREC answer selection: CSV ``qtext,label,atext``, many candidates per question."""
    splits = {}
    for split, name in (("train", "train.csv"), ("validation", "dev.csv"), ("test", "test.csv")):
        with open(_require(folder / name), encoding="utf-8", newline="") as handle:
            rows = list(csv.DictReader(handle))
        splits[split] = {
            "question": [r["qtext"] for r in rows],
            "answer": [r["atext"] for r in rows],
            "label": [int(r["label"]) for r in rows],
        }
    return splits
