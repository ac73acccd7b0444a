"""Search a corpus with a trained model: what a user does after adapting a model to their documents.

:class:`CorpusIndex` encodes a corpus once (documents through ``model.encode_document``, as the
retrieval scorer does, in chunks: :func:`~contrastive_bert.embedding_store.encode_corpus`) and
answers text queries with each query's top-k documents by cosine. The exact search is the scorer's
own (:func:`~contrastive_bert.evaluation.dense_retrieval.exact_search`, through the package's one
exact search :func:`~contrastive_bert.topk_search.exact_topk`: equal scores in corpus order), so a
model's search results rank the documents exactly as its nDCG@10 was measured. The index follows
the corpus's size (``index_type="auto"``, :class:`~contrastive_bert.vector_index.VectorIndex`):
exact up to 1,000,000 documents, FAISS IVF above; ``backend="faiss"`` with ``index_type`` ``flat``
(exact), ``ivf`` or ``hnsw`` chooses. An approximate index's recall@100 against exact search is
measured on sample queries (:meth:`CorpusIndex.measure_recall`).

A folder holds an index as a store of its embeddings (``embeddings.npy``, memory-mapped, beside
``manifest.json``: :mod:`contrastive_bert.embedding_store`), ``documents.jsonl`` and ``index.json``
(written last: the index is complete). ``CorpusIndex.build(..., folder=...)`` encodes straight into
it, and resumes an interrupted build at its first missing chunk. An approximate FAISS index is
kept there too (``faiss-hnsw.index``) once built. An index loads back only with the model that
built it: the folder keeps a SHA-256 of the model's weights, which must match exactly (a model
trained one more step differs), and the embedding of a probe sentence, re-encoded at load (the
modules without weights: pooling, normalisation); searching one model's document embeddings with
another model's queries returns wrong hits without any error. A corpus fingerprint (ids and
texts) tells whether a saved index still matches a corpus.

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

import dataclasses
import json
import logging
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

import numpy as np
import torch

from contrastive_bert.embedding_store import (
    MANIFEST_FILE,
    corpus_fingerprint,
    encode_corpus,
    read_manifest,
    weights_fingerprint,
    write_store,
)
from contrastive_bert.embeddings import encode_normalized
from contrastive_bert.evaluation.dense_retrieval import exact_search
from contrastive_bert.topk_search import check_top_k, faiss_available
from contrastive_bert.vector_index import (
    DEFAULT_EF_SEARCH,
    DEFAULT_NPROBE,
    INDEX_TYPES,
    RECALL_QUERIES,
    RecallReport,
    VectorIndex,
    resolve_index_type,
)

logger = logging.getLogger(__name__)

__all__ = ["CorpusIndex", "SearchHit", "corpus_fingerprint", "weights_fingerprint"]

#: Encoded at build time and again at load time: a different model gives a different embedding.
PROBE_TEXT = "contrastive_bert corpus index probe: which model built these embeddings?"
#: Cosine between the stored and the re-encoded probe above which the model counts as the same
#: (a model saved and reloaded, or moved to another device, stays above 0.9999); the weights must
#: match exactly besides (:func:`weights_fingerprint`), which a trained model never passes.
SAME_MODEL_COSINE = 0.999
FORMAT_VERSION = 2  # 2: the embeddings are a store (manifest.json); 1 (no manifest) still loads
META_FILE, EMBEDDINGS_FILE, DOCUMENTS_FILE = "index.json", "embeddings.npy", "documents.jsonl"
FAISS_FILE = "faiss-{}.index"

Backend = Literal["exact", "faiss"]
IndexType = Literal["auto", "flat", "ivf", "hnsw"]


@dataclass(frozen=True)
class SearchHit:
    """One retrieved document: its id, its cosine to the query, and its rank (1 = best)."""

    id: str
    score: float
    rank: int


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


def resolve_search(backend: str | None, index_type: str, documents: int) -> tuple[str, str]:
    """``(backend, index_type)`` that search ``documents`` documents: ``index_type`` ``auto`` is
    exact up to :data:`~contrastive_bert.vector_index.AUTO_EXACT_MAX_DOCUMENTS` documents and FAISS
    IVF above (unless ``backend="exact"`` asks for exact search, or FAISS is missing: then exact,
    with a warning); ``ivf`` and ``hnsw`` need ``backend="faiss"``; ``backend`` None: exact
    for a flat index, FAISS for an approximate one."""
    if backend not in (None, "exact", "faiss"):
        raise ValueError(f"backend: expected 'exact' or 'faiss', got {backend!r}")
    if index_type not in INDEX_TYPES:
        raise ValueError(f"index_type: expected one of {', '.join(INDEX_TYPES)}, got {index_type!r}")
    if index_type in ("ivf", "hnsw") and backend != "faiss":
        raise ValueError(f"index_type: {index_type!r} needs backend='faiss'")
    if backend == "faiss" and not faiss_available():
        raise ValueError("backend: 'faiss' requested but faiss is not installed (pip install faiss-cpu)")
    resolved = resolve_index_type(index_type, documents)
    if resolved != "flat" and backend is None:
        if faiss_available():
            return "faiss", resolved
        logger.warning("index_type auto: %d documents call for an approximate index, but faiss is not installed "
                       "(pip install faiss-cpu); searching exactly", documents)
    if resolved != "flat" and backend == "exact":
        resolved = "flat"
    return backend or "exact", resolved


def _read_documents(path: Path) -> tuple[list[str], list[str]]:
    """An index's ``documents.jsonl`` as its ids and texts, line by line (a list of a million parsed
    rows would keep their memory in the process after it is freed)."""
    from contrastive_bert.data.beir import iter_jsonl  # here: that module imports datasets

    ids, texts = [], []
    for row in iter_jsonl(path):
        ids.append(row["id"])
        texts.append(row["text"])
    return ids, texts


class CorpusIndex:
    """A corpus's unit-norm document embeddings, searchable by text queries.

    Attributes:
        model: the SentenceTransformer that encoded the documents (and encodes the queries).
        ids: (N,) document ids, in corpus order.
        texts: (N,) the document texts as encoded.
        embeddings: (N, d) float32 unit-norm document embeddings on the CPU (a memory map of
            ``folder``'s store, copy-on-write, when the index lives in a folder).
        backend: ``"exact"`` (torch, the retrieval scorer's search) or ``"faiss"``.
        index_type: the index searched, ``"flat"`` (exact), ``"ivf"`` or ``"hnsw"`` (approximate),
            as :func:`resolve_search` chose it from the ``index_type`` asked for (``"auto"``: by size).
        nprobe / ef_search: the search-time knobs of an IVF / HNSW index.
        folder: where the index is kept (None: in memory).
    """

    def __init__(self, model, ids: Sequence[str], texts: Sequence[str], embeddings: torch.Tensor,
                 backend: Backend | None = None, index_type: IndexType = "auto", probe: torch.Tensor | None = None, *,
                 nprobe: int = DEFAULT_NPROBE, ef_search: int = DEFAULT_EF_SEARCH, folder: str | Path | None = None) -> None:
        if embeddings.ndim != 2 or embeddings.shape[0] != len(ids) or len(ids) != len(texts):
            raise ValueError(f"embeddings: expected ({len(ids)}, d) rows for {len(ids)} ids and {len(texts)} texts, "
                             f"got {tuple(embeddings.shape)}")
        self.backend, self.index_type = resolve_search(backend, index_type, len(ids))
        self.model = model
        self.ids, self.texts = list(ids), list(texts)
        self.embeddings = embeddings.float().cpu()
        self.nprobe, self.ef_search = nprobe, ef_search
        self.folder = None if folder is None else Path(folder)
        self.probe = probe if probe is not None else self._encode_probe(model)
        self._vector_index: VectorIndex | None = None
        self.encoded_rows = 0  # rows the last build encoded (fewer than N when it resumed an interrupted one)
        if self.backend == "faiss":
            self._vectors()  # checks nprobe and ef_search now

    @staticmethod
    def _encode_probe(model) -> torch.Tensor:
        return encode_normalized(model, [PROBE_TEXT], kind="document")[0]

    @classmethod
    def build(cls, model, corpus: Any, *, batch_size: int = 64, show_progress_bar: bool = False,
              backend: Backend | None = None, index_type: IndexType = "auto", folder: str | Path | None = None,
              model_name: str | None = None, nprobe: int = DEFAULT_NPROBE, ef_search: int = DEFAULT_EF_SEARCH,
              devices: Sequence[str] | None = None) -> CorpusIndex:
        """Encode ``corpus`` (``{id: text}``, a list of texts, or a RetrievalData) with ``model``.

        ``folder``: encode straight into it, chunk by chunk (an interrupted build of this model and
        corpus resumes at its first missing chunk; another model's or corpus's store there is a
        ``ValueError`` naming ``overwrite``), then write its documents and ``index.json``
        (``model_name`` recorded for people). ``devices``: encode on these, one process each
        (:func:`~contrastive_bert.embedding_store.encode_corpus`)."""
        ids, texts = _as_documents(corpus)
        if isinstance(batch_size, bool) or not isinstance(batch_size, int) or batch_size < 1:
            raise ValueError(f"batch_size: expected a positive int, got {batch_size!r}")
        resolve_search(backend, index_type, len(ids))  # before the expensive encoding
        encoded = encode_corpus(model, ids, texts, folder=folder, batch_size=batch_size, show_progress_bar=show_progress_bar,
                                devices=devices)
        index = cls(model, ids, texts, encoded.tensor(), backend, index_type, nprobe=nprobe, ef_search=ef_search, folder=folder)
        index.encoded_rows = encoded.encoded_rows
        if folder is not None:
            for stale in Path(folder).glob(FAISS_FILE.format("*")):  # built over other rows
                stale.unlink()
            index._write_documents(Path(folder), model_name)
        return index

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
        descending, and row positions into :attr:`ids` (``-1`` where an approximate index found fewer)."""
        check_top_k(top_k)
        if self.backend == "exact":
            return exact_search(query_embeddings, self.embeddings, top_k=top_k)
        found = self._vectors().search(torch.nn.functional.normalize(query_embeddings.float(), dim=1), top_k)
        self._keep_faiss_index()
        return found

    @property
    def approximate(self) -> bool:
        return self.index_type != "flat"

    def describe_search(self) -> str:
        """What answers the queries, in words: the backend and, for FAISS, the index class and
        whether it is exact (``"FAISS IndexFlatIP (exact inner product) over 8 documents"``)."""
        if self.backend == "exact":
            return f"exact cosine search (torch) over {len(self)} documents"
        return self._vectors().describe()

    def measure_recall(self, queries: Sequence[str] = (), sample: int = RECALL_QUERIES, seed: int = 0,
                       batch_size: int = 64) -> RecallReport | None:
        """Recall@100 of the approximate index against exact search on ``sample`` queries: the first
        ``sample`` of ``queries``, topped up with documents drawn with ``seed`` as queries; None for
        an exact search."""
        if not self.approximate:
            return None
        given = list(queries)[:sample]
        parts = [encode_normalized(self.model, given, kind="query", batch_size=batch_size)] if given else []
        extra = min(sample - len(given), len(self))
        if extra > 0:
            rows = np.sort(np.random.default_rng(seed).choice(len(self), extra, replace=False))
            parts.append(self.embeddings[torch.from_numpy(rows)])
        report = self._vectors().measure_recall(torch.cat(parts), sample=sample)
        self._keep_faiss_index()
        return dataclasses.replace(report, source=f"{len(given)} given, {max(extra, 0)} documents as queries")

    def _kept_faiss_file(self) -> Path | None:
        """Where a complete index folder keeps its approximate FAISS index (None: in memory, or exact)."""
        if self.folder is None or not self.approximate or not (self.folder / META_FILE).is_file():
            return None
        return self.folder / FAISS_FILE.format(self.index_type)

    def _vectors(self) -> VectorIndex:
        """The FAISS search over :attr:`embeddings`, made once; its approximate index read from
        :attr:`folder` when kept there, else built on first search."""
        if self._vector_index is None:
            kept, loaded = self._kept_faiss_file(), None
            if kept is not None and kept.is_file():
                import faiss

                loaded = faiss.read_index(str(kept))
            self._vector_index = VectorIndex(self.embeddings, self.index_type, backend="faiss", nprobe=self.nprobe,
                                             ef_search=self.ef_search, faiss_index=loaded)
        return self._vector_index

    def _keep_faiss_index(self) -> None:
        """Write the approximate index just built into the index's folder, for the next load."""
        kept = self._kept_faiss_file()
        if kept is not None and not kept.is_file():
            self._vectors().save(kept)
            logger.info("kept the %s index in %s", self.index_type, kept)

    def _write_documents(self, folder: Path, model_name: str | None) -> None:
        """``documents.jsonl``, then ``index.json`` (last: its presence marks the index complete)."""
        with open(folder / DOCUMENTS_FILE, "w", encoding="utf-8") as handle:
            for doc_id, text in zip(self.ids, self.texts):
                handle.write(json.dumps({"id": doc_id, "text": text}, ensure_ascii=False) + "\n")
        meta = {"format_version": FORMAT_VERSION, "documents": len(self), "dimension": int(self.embeddings.shape[1]),
                "model": model_name, "model_weights": weights_fingerprint(self.model),
                "probe": [round(float(x), 7) for x in self.probe.tolist()], "fingerprint": self.fingerprint,
                "backend": self.backend, "index_type": self.index_type}
        (folder / META_FILE).write_text(json.dumps(meta, indent=1) + "\n", encoding="utf-8")

    def save(self, path: str | Path, overwrite: bool = False, model_name: str | None = None) -> Path:
        """Write the index to folder ``path`` (its embeddings as a store, documents, model probe;
        ``model_name`` recorded for people); an existing folder is refused unless ``overwrite``."""
        folder = Path(path).expanduser()
        if folder.exists() and not overwrite:
            raise ValueError(f"path: {folder} already exists; pass overwrite=True (--overwrite) to replace it")
        if self.folder is not None and folder.resolve() == self.folder.resolve():
            return folder  # kept there already (built into it)
        (folder / META_FILE).unlink(missing_ok=True)
        for stale in folder.glob(FAISS_FILE.format("*")):
            stale.unlink()
        write_store(folder, self.embeddings.numpy(), self.model, self.ids, self.texts)
        self._write_documents(folder, model_name)
        return folder

    @staticmethod
    def read_meta(path: str | Path) -> dict[str, Any]:
        """The ``index.json`` of a saved index, with a clear error for a folder that holds none."""
        folder = Path(path).expanduser()
        missing = [name for name in (META_FILE, EMBEDDINGS_FILE, DOCUMENTS_FILE) if not (folder / name).is_file()]
        if missing:
            unfinished = read_manifest(folder) is not None and META_FILE in missing
            raise ValueError(f"path: {folder} is not a saved CorpusIndex (missing {', '.join(missing)}"
                             + ("; its encoding is unfinished: build it again to resume" if unfinished else "") + ")")
        meta = json.loads((folder / META_FILE).read_text(encoding="utf-8"))
        if meta.get("format_version") not in (1, FORMAT_VERSION):
            raise ValueError(f"path: {folder} has index format {meta.get('format_version')!r}; this version reads 1 and {FORMAT_VERSION}")
        if meta["format_version"] >= 2 and (read_manifest(folder) or {}).get("rows_done") != meta["documents"]:
            raise ValueError(f"path: {folder} is damaged: its {MANIFEST_FILE} does not record {meta['documents']} encoded documents")
        return meta

    @classmethod
    def load(cls, path: str | Path, model, *, backend: Backend | None = None, index_type: IndexType | None = None,
             nprobe: int = DEFAULT_NPROBE, ef_search: int = DEFAULT_EF_SEARCH,
             documents: Mapping[str, str] | None = None) -> CorpusIndex:
        """A saved index, for ``model``: a ``ValueError`` if ``model`` is not the one that built it
        (its weights differ by as much as one bit, or its probe embedding differs), or if the index
        records no fingerprint of its model's weights (saved by an earlier version: cannot be checked).
        ``backend`` and ``index_type`` both None: searched as saved; else as :meth:`build` chooses.
        ``documents``: the corpus as the caller already holds it (``{id: text}``, in order), taken
        instead of a second copy read from the folder (a ``ValueError`` unless it is the indexed
        corpus). The embeddings are memory-mapped, not read into memory."""
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
        if documents is not None:
            ids, texts = list(documents), list(documents.values())
        else:
            ids, texts = _read_documents(folder / DOCUMENTS_FILE)
        if corpus_fingerprint(ids, texts) != meta["fingerprint"]:  # before the rows are read against them
            if documents is not None:
                raise ValueError(f"documents: not the corpus indexed at {folder} ({meta['documents']} documents)")
            raise ValueError(f"path: {folder} is damaged: its documents do not match its fingerprint")
        embeddings = torch.from_numpy(np.load(folder / EMBEDDINGS_FILE, mmap_mode="c"))
        if backend is None and index_type is None:
            backend, index_type = meta["backend"], meta["index_type"]
        index = cls(model, ids, texts, embeddings, backend, index_type or "auto", probe=probe, nprobe=nprobe,
                    ef_search=ef_search, folder=folder)
        return index
