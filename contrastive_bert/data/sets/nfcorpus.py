"""NFCorpus (Boteva et al. 2016) in the BEIR layout: nutrition and medical questions retrieving
PubMed documents, graded relevance (1 or 2), with train, dev and test judgements."""

from __future__ import annotations

from contrastive_bert.data.beir import read_file
from contrastive_bert.data.spec import DatasetSpec, MtebCard

DATASET = DatasetSpec(
    name="nfcorpus",
    task_type="retrieval",
    description="NFCorpus medical retrieval (BEIR): 3,633 documents, 2,590 train / 324 dev / 323 test queries, graded",
    files={"corpus": "corpus.jsonl", "queries": "queries.jsonl", "train": "qrels/train.tsv",
           "validation": "qrels/dev.tsv", "test": "qrels/test.tsv"},
    read_file=read_file,
    hub_revision="ec0fa4fe99da2ff19ca1214b7966684033a58814",
    licence="research use (no licence stated upstream)",
    citation="""@inproceedings{boteva2016,
    title = "A Full-Text Learning to Rank Dataset for Medical Information Retrieval",
    author = "Boteva, Vera and Gholipour, Demian and Sokolov, Artem and Riezler, Stefan",
    booktitle = "Proceedings of the 38th European Conference on Information Retrieval (ECIR)",
    year = "2016",
    url = "https://link.springer.com/chapter/10.1007/978-3-319-30671-1_58",
}""",
    hub_id="mteb/nfcorpus",
    reference="https://link.springer.com/chapter/10.1007/978-3-319-30671-1_58",
    mteb=MtebCard("LocalNFCorpus", stock_task="NFCorpus", date=("2016-01-01", "2016-12-31"), domains=("Medical", "Academic", "Written")),
)
