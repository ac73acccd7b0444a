"""Search a corpus with a trained model: what a user does after adapting a model to their documents.

:class:`CorpusIndex` encodes a corpus once (documents through ``model.encode_document``, as the
retrieval scorer does) and answers text queries with each query's top-k documents by cosine. The
exact search is the scorer's own (:func:`~contrastive_bert.evaluation.dense_retrieval.exact_search`,
through the package's one exact search :func:`~contrastive_bert.topk_search.exact_topk`: equal
scores in corpus order), so a model's search results rank the documents exactly as its nDCG@10 was
measured; FAISS serves large corpora (``backend="faiss"``: ``IndexFlatIP``, exact, or
``index_type="hnsw"``, approximate).

An index saved to a folder (``save``) loads back only with the model that built it: the folder
keeps a SHA-256 of the model's weights, which must match exactly (a model trained one more step
differs), and the embedding of a probe sentence, re-encoded at load (the modules without weights:
pooling, normalisation); searching one model's document embeddings with another model's queries
returns wrong hits without any error. A corpus fingerprint (ids and texts) tells whether a saved
index still matches a corpus.

Example::

    from contrastive_bert.inference import CorpusIndex
    from contrastive_bert.models import load_model

    model = load_model("output/scifact/final")
    index = CorpusIndex.build(model, {"d1": "Aspirin lowers fever.", "d2": "The moon orbits the earth."})
    index.search("what reduces a fever?", top_k=1)   # [[SearchHit(id='d1', score=0.61, rank=1)]]
    index.save("output/scifact-index")
    index = CorpusIndex.load("output/scifact-index", model)
"""

from __future__ import annotations

import hashlib
import json
import logging
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

import numpy as np
import torch

from contrastive_bert.embeddings import encode_normalized
from contrastive_bert.evaluation.dense_retrieval import exact_search
from contrastive_bert.topk_search import build_faiss_index, check_top_k, faiss_available

logger = logging.getLogger(__name__)

__all__ = ["CorpusIndex", "SearchHit", "corpus_fingerprint", "weights_fingerprint"]

#: Encoded at build time and again at load time: a different model gives a different embedding.
PROBE_TEXT = "contrastive_bert corpus index probe: which model built these embeddings?"
#: Cosine between the stored and the re-encoded probe above which the model counts as the same
#: (a model saved and reloaded, or moved to another device, stays above 0.9999); the weights must
#: match exactly besides (:func:`weights_fingerprint`), which a trained model never passes.
SAME_MODEL_COSINE = 0.999
FORMAT_VERSION = 1
META_FILE, EMBEDDINGS_FILE, DOCUMENTS_FILE = "index.json", "embeddings.npy", "documents.jsonl"

Backend = Literal["exact", "faiss"]
IndexType = Literal["flat", "hnsw"]


@dataclass(frozen=True)
class SearchHit:
    """One retrieved document: its id, its cosine to the query, and its rank (1 = best)."""

    id: str
    score: float
    rank: int


def corpus_fingerprint(ids: Sequence[str], texts: Sequence[str]) -> str:
    """A SHA-1 of the documents in order (ids and texts): equal fingerprints, same corpus."""
    digest = hashlib.sha1()
    for doc_id, text in zip(ids, texts):
        digest.update(doc_id.encode("utf-8") + b"\x00" + text.encode("utf-8") + b"\x01")
    return digest.hexdigest()


def weights_fingerprint(model: Any) -> str | None:
    """A SHA-256 of ``model``'s state dict (names, dtypes, shapes and bytes of every tensor, in
    order): any changed weight changes it, the same weights on another device do not. None for a
    model without a ``state_dict`` (an embedding function)."""
    if not callable(getattr(model, "state_dict", None)):
        return None
    digest = hashlib.sha256()
    for name, tensor in model.state_dict().items():
        data = tensor.detach().to("cpu").contiguous().reshape(-1)
        digest.update(f"{name}\x00{data.dtype}\x00{tuple(tensor.shape)}\x00".encode("utf-8"))
        digest.update(data.view(torch.uint8).numpy())
    return digest.hexdigest()


def _as_documents(corpus: Any) -> tuple[list[str], list[str]]:
    """``(ids, texts)`` from ``{id: text}``, a sequence of texts (ids ``"0"``, ``"1"``, ...) or
    anything with a ``corpus`` mapping (:class:`~contrastive_bert.data.beir.RetrievalData`)."""
    if hasattr(corpus, "corpus") and isinstance(corpus.corpus, Mapping):
        corpus = corpus.corpus
    if isinstance(corpus, Mapping):
        ids, texts = [str(i) for i in corpus], list(corpus.values())
    elif isinstance(corpus, Sequence) and not isinstance(corpus, str):
        ids, texts = [str(i) for i in range(len(corpus))], list(corpus)
    else:
        raise ValueError(f"corpus: expected {{id: text}}, a list of texts or a RetrievalData, got {type(corpus).__name__}")
    if not ids:
        raise ValueError("corpus: is empty; expected at least one document")
    bad = next((i for i, text in zip(ids, texts) if not isinstance(text, str)), None)
    if bad is not None:
        raise ValueError(f"corpus: document {bad!r} is not a string")
    return ids, texts


def _check_backend(backend: str, index_type: str) -> None:
    if backend not in ("exact", "faiss"):
        raise ValueError(f"backend: expected 'exact' or 'faiss', got {backend!r}")
    if index_type not in ("flat", "hnsw"):
        raise ValueError(f"index_type: expected 'flat' or 'hnsw', got {index_type!r}")
    if index_type == "hnsw" and backend != "faiss":
        raise ValueError("index_type: 'hnsw' needs backend='faiss'")
    if backend == "faiss":
        if not faiss_available():
            raise ValueError("backend: 'faiss' requested but faiss is not installed (pip install faiss-cpu)")


class CorpusIndex:
    """A corpus's unit-norm document embeddings, searchable by text queries.

    Attributes:
        model: the SentenceTransformer that encoded the documents (and encodes the queries).
        ids: (N,) document ids, in corpus order.
        texts: (N,) the document texts as encoded.
        embeddings: (N, d) float32 unit-norm document embeddings on the CPU.
        backend: ``"exact"`` (torch, the retrieval scorer's search) or ``"faiss"``.
        index_type: FAISS index, ``"flat"`` (exact) or ``"hnsw"`` (approximate, for millions of documents).
    """

    def __init__(self, model, ids: Sequence[str], texts: Sequence[str], embeddings: torch.Tensor,
                 backend: Backend = "exact", index_type: IndexType = "flat", probe: torch.Tensor | None = None) -> None:
        _check_backend(backend, index_type)
        if embeddings.ndim != 2 or embeddings.shape[0] != len(ids) or len(ids) != len(texts):
            raise ValueError(f"embeddings: expected ({len(ids)}, d) rows for {len(ids)} ids and {len(texts)} texts, "
                             f"got {tuple(embeddings.shape)}")
        self.model = model
        self.ids, self.texts = list(ids), list(texts)
        self.embeddings = embeddings.float().cpu()
        self.backend, self.index_type = backend, index_type
        self.probe = probe if probe is not None else self._encode_probe(model)
        self._faiss_index = None

    @staticmethod
    def _encode_probe(model) -> torch.Tensor:
        return encode_normalized(model, [PROBE_TEXT], kind="document")[0]

    @classmethod
    def build(cls, model, corpus: Any, *, batch_size: int = 64, show_progress_bar: bool = False,
              backend: Backend = "exact", index_type: IndexType = "flat") -> CorpusIndex:
        """Encode ``corpus`` (``{id: text}``, a list of texts, or a RetrievalData) with ``model``."""
        ids, texts = _as_documents(corpus)
        if isinstance(batch_size, bool) or not isinstance(batch_size, int) or batch_size < 1:
            raise ValueError(f"batch_size: expected a positive int, got {batch_size!r}")
        _check_backend(backend, index_type)  # before the expensive encoding
        embeddings = encode_normalized(model, texts, kind="document", batch_size=batch_size, show_progress_bar=show_progress_bar)
        return cls(model, ids, texts, embeddings, backend, index_type)

    def __len__(self) -> int:
        return len(self.ids)

    @property
    def fingerprint(self) -> str:
        return corpus_fingerprint(self.ids, self.texts)

    def search(self, queries: str | Sequence[str], top_k: int = 10, *, batch_size: int = 64) -> list[list[SearchHit]]:
        """Each query's ``min(top_k, N)`` best documents by cosine, best first (equal scores in
        corpus order on the exact backend). One query string gives a list with one list of hits."""
        check_top_k(top_k)
        texts = [queries] if isinstance(queries, str) else list(queries)
        if not texts or not all(isinstance(text, str) for text in texts):
            raise ValueError("queries: expected a string or a non-empty list of strings")
        encoded = encode_normalized(self.model, texts, kind="query", batch_size=batch_size)
        scores, indices = self.search_embeddings(encoded, top_k)
        return [[SearchHit(self.ids[i], float(s), rank) for rank, (s, i) in enumerate(zip(row_s, row_i), start=1) if i >= 0]
                for row_s, row_i in zip(scores.tolist(), indices.tolist())]

    def search_embeddings(self, query_embeddings: torch.Tensor, top_k: int) -> tuple[torch.Tensor, torch.Tensor]:
        """``(scores, rows)``, both (Q, min(top_k, N)), for (Q, d) query embeddings: cosines,
        descending, and row positions into :attr:`ids` (``-1`` where HNSW found fewer)."""
        check_top_k(top_k)
        if self.backend == "exact":
            return exact_search(query_embeddings, self.embeddings, top_k=top_k)
        queries = np.ascontiguousarray(torch.nn.functional.normalize(query_embeddings.float(), dim=1).numpy())
        scores, rows = self._faiss().search(queries, min(top_k, len(self)))
        return torch.from_numpy(scores), torch.from_numpy(rows).long()

    def describe_search(self) -> str:
        """What answers the queries, in words: the backend and, for FAISS, the index class and
        whether it is exact (``"FAISS IndexFlatIP (exact inner product) over 8 documents"``)."""
        if self.backend == "exact":
            return f"exact cosine search (torch) over {len(self)} documents"
        kind = "exact inner product" if self.index_type == "flat" else "approximate"
        return f"FAISS {type(self._faiss()).__name__} ({kind}) over {len(self)} documents"

    def _faiss(self):
        """The FAISS index over :attr:`embeddings`, built on first search and kept."""
        if self._faiss_index is None:
            self._faiss_index = build_faiss_index(np.ascontiguousarray(self.embeddings.numpy()), self.index_type)
        return self._faiss_index

    def save(self, path: str | Path, overwrite: bool = False, model_name: str | None = None) -> Path:
        """Write the index to folder ``path`` (embeddings, documents, model probe; ``model_name``
        recorded for people); an existing folder is refused unless ``overwrite``."""
        folder = Path(path).expanduser()
        if folder.exists() and not overwrite:
            raise ValueError(f"path: {folder} already exists; pass overwrite=True (--overwrite) to replace it")
        folder.mkdir(parents=True, exist_ok=True)
        np.save(folder / EMBEDDINGS_FILE, self.embeddings.numpy())
        with open(folder / DOCUMENTS_FILE, "w", encoding="utf-8") as handle:
            for doc_id, text in zip(self.ids, self.texts):
                handle.write(json.dumps({"id": doc_id, "text": text}, ensure_ascii=False) + "\n")
        meta = {"format_version": FORMAT_VERSION, "documents": len(self), "dimension": int(self.embeddings.shape[1]),
                "model": model_name, "model_weights": weights_fingerprint(self.model),
                "probe": [round(float(x), 7) for x in self.probe.tolist()], "fingerprint": self.fingerprint,
                "backend": self.backend, "index_type": self.index_type}
        (folder / META_FILE).write_text(json.dumps(meta, indent=1) + "\n", encoding="utf-8")
        return folder

    @staticmethod
    def read_meta(path: str | Path) -> dict[str, Any]:
        """The ``index.json`` of a saved index, with a clear error for a folder that holds none."""
        folder = Path(path).expanduser()
        missing = [name for name in (META_FILE, EMBEDDINGS_FILE, DOCUMENTS_FILE) if not (folder / name).is_file()]
        if missing:
            raise ValueError(f"path: {folder} is not a saved CorpusIndex (missing {', '.join(missing)})")
        meta = json.loads((folder / META_FILE).read_text(encoding="utf-8"))
        if meta.get("format_version") != FORMAT_VERSION:
            raise ValueError(f"path: {folder} has index format {meta.get('format_version')!r}; this version reads {FORMAT_VERSION}")
        return meta

    @classmethod
    def load(cls, path: str | Path, model, *, backend: Backend | None = None, index_type: IndexType | None = None) -> CorpusIndex:
        """A saved index, for ``model``: a ``ValueError`` if ``model`` is not the one that built it
        (its weights differ by as much as one bit, or its probe embedding differs), or if the index
        records no fingerprint of its model's weights (saved by an earlier version: cannot be checked)."""
        folder = Path(path).expanduser()
        meta = cls.read_meta(folder)
        rebuild = "Rebuild it with this model: pass --overwrite (in Python: CorpusIndex.build(...).save(path, overwrite=True))"
        weights = weights_fingerprint(model)
        if weights is not None and "model_weights" not in meta:
            raise ValueError(f"model: the index at {folder} records no fingerprint of the weights of the model that "
                             f"built it (saved by an earlier version), so this model cannot be checked against it. {rebuild}")
        probe = cls._encode_probe(model)
        stored = torch.tensor(meta["probe"], dtype=torch.float32)
        if meta.get("model_weights") != weights or stored.shape != probe.shape or float(stored @ probe) < SAME_MODEL_COSINE:
            raise ValueError(f"model: the index at {folder} was built by another model "
                             f"({meta.get('model') or 'unnamed'}, dimension {meta['dimension']}; its weights or its embeddings "
                             f"differ from this model's), so its document embeddings do not match this model's queries. {rebuild}")
        documents = [json.loads(line) for line in open(folder / DOCUMENTS_FILE, encoding="utf-8") if line.strip()]
        embeddings = torch.from_numpy(np.load(folder / EMBEDDINGS_FILE))
        index = cls(model, [d["id"] for d in documents], [d["text"] for d in documents], embeddings,
                    backend or meta["backend"], index_type or meta["index_type"], probe=probe)
        if index.fingerprint != meta["fingerprint"]:
            raise ValueError(f"path: {folder} is damaged: its documents do not match its fingerprint")
        return index
