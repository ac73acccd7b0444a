"""Texts to unit-norm embeddings: the one encode helper of evaluation and mining.

Every scorer and miner here compares embeddings by cosine, so every caller wants the same thing:
float32, L2-normalised, on the CPU, one row per text in the order given. Retrieval encodes queries
and documents through the model's ``encode_query`` / ``encode_document`` (as mteb does, so that a
model's query and document prompts apply); evaluation sets that repeat sentences across pairs and
candidates (STS, classification, answer selection) encode each distinct text once. A whole
corpus is encoded through :func:`contrastive_bert.embedding_store.encode_corpus` (in chunks, kept
on disk and resumable when given a folder); work that needs one corpus's embeddings twice passes
them (or that folder) explicitly.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Literal

import torch

__all__ = ["encode_normalized"]


def encode_normalized(
    model,
    texts: Sequence[str],
    *,
    kind: Literal["text", "query", "document"] = "text",
    unique: bool = False,
    batch_size: int = 64,
    show_progress_bar: bool = False,
    pool: dict | None = None,
    device: str | None = None,
) -> torch.Tensor:
    """``(len(texts), d)`` float32 unit-norm embeddings on the CPU.

    Args:
        model: a SentenceTransformer (or anything with its ``encode`` methods).
        texts: the texts, in the order of the rows returned.
        kind: ``"text"`` (``model.encode``), ``"query"`` (``model.encode_query``) or ``"document"``
            (``model.encode_document``).
        unique: encode each distinct text once and copy its row to every repeat; False encodes
            the texts as given (the batches mteb forms for a retrieval corpus).
        batch_size / show_progress_bar: passed to the model's encode call.
        pool / device: passed to the encode call when given (a multi-process pool from
            ``model.start_multi_process_pool``; the device to encode on).
    """
    if kind not in ("text", "query", "document"):
        raise ValueError(f"kind: expected 'text', 'query' or 'document', got {kind!r}")
    encode = model.encode if kind == "text" else getattr(model, f"encode_{kind}")
    options = {name: value for name, value in (("pool", pool), ("device", device)) if value is not None}
    return _encode(encode, list(texts), unique, batch_size, show_progress_bar, options)


def _encode(encode, texts: list[str], unique: bool, batch_size: int, show_progress_bar: bool,
            options: dict | None = None) -> torch.Tensor:
    distinct = list(dict.fromkeys(texts)) if unique else texts
    embeddings = encode(distinct, batch_size=batch_size, convert_to_tensor=True, normalize_embeddings=True,
                        show_progress_bar=show_progress_bar, **(options or {}))
    embeddings = torch.as_tensor(embeddings).float().cpu()
    if not unique:
        return embeddings
    row = {text: i for i, text in enumerate(distinct)}
    return embeddings[[row[text] for text in texts]]
