"""Texts to unit-norm embeddings: the one encode helper of evaluation and mining.

Every scorer and miner here compares embeddings by cosine, so every caller wants the same thing:
float32, L2-normalised, on the CPU, one row per text in the order given. Retrieval encodes queries
and documents through the model's ``encode_query`` / ``encode_document`` (as mteb does, so that a
model's query and document prompts apply); evaluation sets that repeat sentences across pairs and
candidates (STS, classification, answer selection) encode each distinct text once.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from contextvars import ContextVar
from typing import Literal

import torch

__all__ = ["encode_normalized", "reuse_encodings"]

_MEMO: ContextVar[dict | None] = ContextVar("encode_memo", default=None)


@contextmanager
def reuse_encodings() -> Iterator[None]:
    """Inside the block, :func:`encode_normalized` encodes the same texts with the same model, kind
    and batch size once. For work that encodes one corpus twice with a model that does not change
    in between: training mines hard negatives with the model it then scores before training (the
    corpus is the expensive part: thousands of documents up to 256 tokens). The caller promises
    that the model's weights do not change inside the block."""
    token = _MEMO.set({})
    try:
        yield
    finally:
        _MEMO.reset(token)


def _memo_key(model, texts: list[str], kind: str, unique: bool, batch_size: int) -> tuple:
    digest = hashlib.sha1()
    for text in texts:
        digest.update(text.encode("utf-8") + b"\x00")
    return id(model), kind, unique, batch_size, len(texts), digest.hexdigest()


def encode_normalized(
    model,
    texts: Sequence[str],
    *,
    kind: Literal["text", "query", "document"] = "text",
    unique: bool = False,
    batch_size: int = 64,
    show_progress_bar: bool = False,
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
    """
    if kind not in ("text", "query", "document"):
        raise ValueError(f"kind: expected 'text', 'query' or 'document', got {kind!r}")
    encode = model.encode if kind == "text" else getattr(model, f"encode_{kind}")
    texts = list(texts)
    memo = _MEMO.get()
    if memo is not None:
        key = _memo_key(model, texts, kind, unique, batch_size)
        if key not in memo:
            memo[key] = _encode(encode, texts, unique, batch_size, show_progress_bar)
        return memo[key].clone()
    return _encode(encode, texts, unique, batch_size, show_progress_bar)


def _encode(encode, texts: list[str], unique: bool, batch_size: int, show_progress_bar: bool) -> torch.Tensor:
    distinct = list(dict.fromkeys(texts)) if unique else texts
    embeddings = encode(distinct, batch_size=batch_size, convert_to_tensor=True, normalize_embeddings=True,
                        show_progress_bar=show_progress_bar)
    embeddings = torch.as_tensor(embeddings).float().cpu()
    if not unique:
        return embeddings
    row = {text: i for i, text in enumerate(distinct)}
    return embeddings[[row[text] for text in texts]]
