"""Heads appended to a SentenceTransformer as modules (saved and loaded with the model)."""

from contrastive_bert.heads.label_embedding import LabelEmbeddingClassifier  # noqa: F401
