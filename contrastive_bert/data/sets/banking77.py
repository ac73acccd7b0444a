"""Banking77 (Casanueva et al. 2020): online-banking queries labelled with 77 intents."""

from __future__ import annotations

import json
from pathlib import Path

from contrastive_bert.data.readers import read_csv_records, require_file
from contrastive_bert.data.spec import DatasetSpec, MtebCard


def read_file(path: Path) -> dict[str, list]:
    """CSV with header ``text,category``."""
    records = read_csv_records(path)
    return {"text": records["text"], "label": records["category"]}


def read_label_names(folder: Path) -> list[str]:
    """The 77 intents in ``categories.json`` order (the label ids)."""
    return json.loads(require_file(folder / "categories.json").read_text(encoding="utf-8"))


DATASET = DatasetSpec(
    name="banking77",
    task_type="classification",
    description="Banking77 intent detection, 77 intents",
    files={"train": "train.csv", "test": "test.csv"},
    read_file=read_file,
    read_label_names=read_label_names,
    # Hugging Face's parquet copy of PolyAI/banking77 (the same 10,003 / 3,080 rows and ClassLabel names):
    # the original repository is a loading script, which datasets>=4 refuses, and its parquet
    # conversion is a branch (refs/convert/parquet), which moves; this pins a commit.
    hub_id="legacy-datasets/banking77",
    reference="https://arxiv.org/abs/2003.04807",
    licence="CC-BY-4.0",
    citation="""@inproceedings{casanueva-etal-2020-efficient,
    title = "Efficient Intent Detection with Dual Sentence Encoders",
    author = "Casanueva, I{\\~n}igo and Tem{\\v{c}}inas, Tadas and Gerz, Daniela and Henderson, Matthew and Vuli{\\'c}, Ivan",
    booktitle = "Proceedings of the 2nd Workshop on Natural Language Processing for Conversational AI",
    year = "2020",
    pages = "38--45",
    url = "https://aclanthology.org/2020.nlp4convai-1.5/",
}""",
    hub_revision="f54121560de48f2852f90be299010d1d6dc612ec",
    mteb=MtebCard("LocalBanking77Classification", stock_task="Banking77Classification", date=("2019-01-01", "2019-12-31")),
)
