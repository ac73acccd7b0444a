"""SST-2 (GLUE): movie-review sentences labelled negative / positive."""

from __future__ import annotations

import csv
from pathlib import Path

from contrastive_bert.data.readers import read_csv_records
from contrastive_bert.data.spec import DatasetSpec, MtebCard


def read_file(path: Path) -> dict[str, list]:
    """Tab-separated with header ``sentence\\tlabel`` (1 = positive); training sentences carry a
    trailing space, stripped here."""
    records = read_csv_records(path, delimiter="\t", quoting=csv.QUOTE_NONE)
    return {"sentence": [s.strip() for s in records["sentence"]], "label": [int(v) for v in records["label"]]}


DATASET = DatasetSpec(
    name="sst2",
    task_type="classification",
    description="SST-2 binary sentiment",
    files={"train": "train_full.tsv", "validation": "dev.tsv", "test": "test-labeled.tsv"},
    read_file=read_file,
    columns={"sentence": "text"},
    label_names=("negative", "positive"),
    hub_id="nyu-mll/glue",
    hub_config="sst2",
    hub_revision="bcdcba79d07bc864c1c254ccfcedcce55bcc9a8c",
    hub_splits={"train": "train", "test": "validation"},  # GLUE hides its test labels: its dev set is the test set
    reference="https://aclanthology.org/D13-1170/",
    licence="the Stanford Sentiment Treebank's release terms (no licence file upstream)",
    citation="""@inproceedings{socher-etal-2013-recursive,
    title = "Recursive Deep Models for Semantic Compositionality Over a Sentiment Treebank",
    author = "Socher, Richard and Perelygin, Alex and Wu, Jean and Chuang, Jason and Manning, Christopher D. and Ng, Andrew and Potts, Christopher",
    booktitle = "Proceedings of the 2013 Conference on Empirical Methods in Natural Language Processing",
    year = "2013",
    pages = "1631--1642",
    url = "https://aclanthology.org/D13-1170/",
}""",
    mteb=MtebCard("LocalSST2Classification", date=("2013-01-01", "2013-12-31"), domains=("Reviews", "Written")),
)
