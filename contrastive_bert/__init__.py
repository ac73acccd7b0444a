"""contrastive_bert: contrastive training and evaluation of sentence-embedding models.

Built on sentence-transformers: models are ``SentenceTransformer``s, losses follow the
sentence-transformers loss contract and train inside ``SentenceTransformerTrainer``.
"""

__version__ = "0.1.0"
