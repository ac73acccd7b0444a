"""SciFact (Wadden et al. 2020) in the BEIR layout: scientific claims retrieving the abstracts
that support or refute them. No dev split: one is carved from the train queries."""

from __future__ import annotations

from contrastive_bert.data.beir import read_file
from contrastive_bert.data.spec import DatasetSpec, MtebCard

DATASET = DatasetSpec(
    name="scifact",
    task_type="retrieval",
    description="SciFact claim -> abstract retrieval (BEIR): 5,183 abstracts, 809 train / 300 test claims",
    files={"corpus": "corpus.jsonl", "queries": "queries.jsonl", "train": "qrels/train.tsv", "test": "qrels/test.tsv"},
    read_file=read_file,
    hub_id="mteb/scifact",
    reference="https://aclanthology.org/2020.emnlp-main.609/",
    mteb=MtebCard("LocalSciFact", stock_task="SciFact", date=("2020-01-01", "2020-12-31"), domains=("Academic", "Medical", "Written")),
)
