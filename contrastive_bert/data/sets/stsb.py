"""STS Benchmark (Cer et al. 2017): sentence pairs with a 0-5 similarity score."""

from __future__ import annotations

import csv
from pathlib import Path

from contrastive_bert.data.readers import read_csv_rows
from contrastive_bert.data.spec import DatasetSpec, MtebCard


def read_file(path: Path) -> dict[str, list]:
    """Tab-separated, no header: genre, file, year, id, score (0-5), s1, s2 [, extra source columns].
    Quotes are literal (``QUOTE_NONE``); scores are divided by ``score_scale`` into [0, 1]."""
    columns: dict[str, list] = {"sentence1": [], "sentence2": [], "score": []}
    for line_no, row in enumerate(read_csv_rows(path, delimiter="\t", quoting=csv.QUOTE_NONE), 1):
        if len(row) < 7:
            raise ValueError(f"{path}: line {line_no} has {len(row)} fields, expected at least 7")
        columns["sentence1"].append(row[5])
        columns["sentence2"].append(row[6])
        columns["score"].append(float(row[4]) / DATASET.score_scale)
    return columns


DATASET = DatasetSpec(
    name="stsb",
    task_type="pair-score",
    description="STS Benchmark sentence pairs with similarity scores in [0, 1]",
    files={"train": "sts-train.csv", "validation": "sts-dev.csv", "test": "sts-test.csv"},
    read_file=read_file,
    hub_id="sentence-transformers/stsb",
    hub_revision="ab7a5ac0e35aa22088bdcf23e7fd99b220e53308",
    score_scale=5.0,
    reference="https://github.com/PhilipMay/stsb-multi-mt/",
    licence="scores CC-BY-SA-4.0; sentence texts under their sources' own terms (stsb/LICENSE.txt)",
    citation="""@inproceedings{cer-etal-2017-semeval,
    title = "{S}em{E}val-2017 Task 1: Semantic Textual Similarity Multilingual and Crosslingual Focused Evaluation",
    author = "Cer, Daniel and Diab, Mona and Agirre, Eneko and Lopez-Gazpio, I{\\~n}igo and Specia, Lucia",
    booktitle = "Proceedings of the 11th International Workshop on Semantic Evaluation (SemEval-2017)",
    year = "2017",
    pages = "1--14",
    url = "https://aclanthology.org/S17-2001/",
}""",
    mteb=MtebCard("LocalSTSBenchmark", stock_task="STSBenchmark", date=("2017-01-01", "2017-12-31"),
                  domains=("Blog", "News", "Written")),
)
