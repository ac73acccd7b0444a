"""TREC answer-sentence selection (Wang et al. 2007): candidate answer sentences per question."""

from __future__ import annotations

from pathlib import Path

from contrastive_bert.data.readers import read_csv_records
from contrastive_bert.data.spec import DatasetSpec


def read_file(path: Path) -> dict[str, list]:
    """CSV with header ``qtext,label,atext`` (1 = the sentence answers the question)."""
    records = read_csv_records(path)
    return {"question": records["qtext"], "answer": records["atext"], "label": [int(v) for v in records["label"]]}


DATASET = DatasetSpec(
    name="answer_selection",
    task_type="reranking",
    description="TREC answer-sentence selection (Wang et al. 2007)",
    files={"train": "train.csv", "validation": "dev.csv", "test": "test.csv"},
    read_file=read_file,
    folder="answer_selection_wang",
    reference="https://aclanthology.org/D07-1003/",
    licence="none stated upstream (answer_selection_wang/README.md); TREC QA data, research use",
    citation="""@inproceedings{wang-etal-2007-jeopardy,
    title = "What is the {J}eopardy Model? A Quasi-Synchronous Grammar for {QA}",
    author = "Wang, Mengqiu and Smith, Noah A. and Mitamura, Teruko",
    booktitle = "Proceedings of the 2007 Joint Conference on Empirical Methods in Natural Language Processing and Computational Natural Language Learning (EMNLP-CoNLL)",
    year = "2007",
    pages = "22--32",
    url = "https://aclanthology.org/D07-1003/",
}""",
)
