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
    hub_revision="d56462d0e63a25450459c4f213e49ffdb866f7f9",
    licence="claims CC-BY-4.0, abstracts ODC-By-1.0",
    citation="""@inproceedings{wadden-etal-2020-fact,
    title = "Fact or Fiction: Verifying Scientific Claims",
    author = "Wadden, David and Lin, Shanchuan and Lo, Kyle and Wang, Lucy Lu and van Zuylen, Madeleine and Cohan, Arman and Hajishirzi, Hannaneh",
    booktitle = "Proceedings of the 2020 Conference on Empirical Methods in Natural Language Processing (EMNLP)",
    year = "2020",
    pages = "7534--7550",
    url = "https://aclanthology.org/2020.emnlp-main.609/",
}""",
    hub_id="mteb/scifact",
    reference="https://aclanthology.org/2020.emnlp-main.609/",
    mteb=MtebCard("LocalSciFact", stock_task="SciFact", date=("2020-01-01", "2020-12-31"), domains=("Academic", "Medical", "Written")),
)
