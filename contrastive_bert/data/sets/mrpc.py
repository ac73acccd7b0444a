"""Microsoft Research Paraphrase Corpus: sentence pairs labelled 1 = paraphrase."""

from __future__ import annotations

import csv
from pathlib import Path

from contrastive_bert.data.readers import read_csv_rows
from contrastive_bert.data.spec import DatasetSpec, MtebCard


def read_file(path: Path) -> dict[str, list]:
    """Tab-separated with a header (UTF-8 BOM): Quality, #1 ID, #2 ID, #1 String, #2 String."""
    rows = [row for row in read_csv_rows(path, delimiter="\t", quoting=csv.QUOTE_NONE, encoding="utf-8-sig")[1:] if row]
    return {"sentence1": [r[3] for r in rows], "sentence2": [r[4] for r in rows], "label": [int(r[0]) for r in rows]}


DATASET = DatasetSpec(
    name="mrpc",
    task_type="pair-binary",
    description="Microsoft Research Paraphrase Corpus (1 = paraphrase)",
    files={"train": "msr-para-train.tsv", "validation": "msr-para-val.tsv", "test": "msr-para-test.tsv"},
    read_file=read_file,
    hub_id="nyu-mll/glue",
    hub_config="mrpc",
    hub_revision="bcdcba79d07bc864c1c254ccfcedcce55bcc9a8c",
    reference="https://aclanthology.org/I05-5002/",
    licence="Microsoft Shared Source License (mrpc/LICENCE.html)",
    citation="""@inproceedings{dolan-brockett-2005-automatically,
    title = "Automatically Constructing a Corpus of Sentential Paraphrases",
    author = "Dolan, William B. and Brockett, Chris",
    booktitle = "Proceedings of the Third International Workshop on Paraphrasing (IWP2005)",
    year = "2005",
    url = "https://aclanthology.org/I05-5002/",
}""",
    mteb=MtebCard("LocalMRPCPairClassification", date=("2005-01-01", "2005-12-31"), domains=("News", "Written")),
)
