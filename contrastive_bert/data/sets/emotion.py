"""Emotion (Saravia et al. 2018): English tweets labelled with six basic emotions."""

from __future__ import annotations

from pathlib import Path

from contrastive_bert.data.readers import require_file
from contrastive_bert.data.spec import DatasetSpec, MtebCard


def read_file(path: Path) -> dict[str, list]:
    """``text;label_name`` per line (a ``text;label_name`` header line is skipped)."""
    lines = [line for line in require_file(path).read_text(encoding="utf-8").splitlines()
             if line.strip() and line.strip() != "text;label_name"]
    rows = [line.rsplit(";", 1) for line in lines]
    return {"text": [text for text, _ in rows], "label": [label for _, label in rows]}


DATASET = DatasetSpec(
    name="emotion",
    task_type="classification",
    description="Emotion classification of tweets, 6 labels",
    files={"train": "train.txt", "validation": "val.txt", "test": "test.txt"},
    read_file=read_file,
    label_names=("sadness", "joy", "love", "anger", "fear", "surprise"),  # dair-ai/emotion's id order
    hub_id="dair-ai/emotion",
    hub_revision="cab853a1dbdf4c42c2b3ef2173804746df8825fe",
    reference="https://www.aclweb.org/anthology/D18-1404",
    licence="educational and research use only (dair-ai/emotion's terms)",
    citation="""@inproceedings{saravia-etal-2018-carer,
    title = "{CARER}: Contextualized Affect Representations for Emotion Recognition",
    author = "Saravia, Elvis and Liu, Hsien-Chi Toby and Huang, Yen-Hao and Wu, Junlin and Chen, Yi-Shin",
    booktitle = "Proceedings of the 2018 Conference on Empirical Methods in Natural Language Processing",
    year = "2018",
    pages = "3687--3697",
    url = "https://aclanthology.org/D18-1404/",
}""",
    mteb=MtebCard("LocalEmotionClassification", stock_task="EmotionClassification", date=("2017-01-01", "2018-12-31"),
                  domains=("Social", "Written"), samples_per_label=16),
)
