"""Top-k search over a corpus's embeddings with the index its size calls for, and the recall of an
approximate index against exact search.

``index_type``:

* ``"flat"``: exact. With FAISS, ``faiss.knn`` (the search of ``IndexFlatIP``, bit for bit, run
  over the rows where they lie, a memory map included, without copying them into an index);
  without it (``backend="torch"``), :func:`~contrastive_bert.topk_search.exact_topk` (the
  package's tie rule), in chunks of documents either way;
* ``"ivf"``: FAISS ``IndexIVFFlat`` over ``sqrt(N)`` lists, searching ``nprobe`` of them;
* ``"hnsw"``: FAISS ``IndexHNSWFlat`` (``M`` 32), searching with ``efSearch`` candidates;
* ``"auto"``: flat up to :data:`AUTO_EXACT_MAX_DOCUMENTS` documents, ``ivf`` above.

An approximate index copies the rows into itself once, when a :class:`VectorIndex` first searches
(never per batch of queries). :meth:`VectorIndex.measure_recall` measures recall@100 of the
approximate search against exact search on a sample of queries, and names the knob to raise
(``nprobe``, ``efSearch``) when it is below :data:`MIN_RECALL`.
"""

from __future__ import annotations

import logging
import math
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

import numpy as np
import torch

from contrastive_bert.topk_search import build_faiss_index, check_top_k, exact_topk, faiss_available

logger = logging.getLogger(__name__)

__all__ = ["AUTO_EXACT_MAX_DOCUMENTS", "DEFAULT_EF_SEARCH", "DEFAULT_NPROBE", "INDEX_TYPES", "MIN_RECALL", "RecallReport",
           "VectorIndex", "check_index_options", "resolve_index_type"]

#: ``index_type="auto"`` searches exactly up to this many documents, approximately above. Measured
#: (``eval/bench_scale.py``, ``eval/results/scale.json``, 384-d rows, 2 CPU threads): at a million
#: documents exact search of 1,000 queries takes seconds with no memory beyond the rows, while
#: neither approximate index is worth it there: IVF barely searches faster, HNSW's build takes over a
#: minute and its recall@100 falls far below :data:`MIN_RECALL` on near-duplicate rows.
AUTO_EXACT_MAX_DOCUMENTS = 1_000_000
#: What ``auto`` picks above :data:`AUTO_EXACT_MAX_DOCUMENTS`: the approximate index whose recall
#: held at a million documents (``scale.json``), built in one training pass over the rows.
AUTO_APPROXIMATE = "ivf"
INDEX_TYPES = ("auto", "flat", "ivf", "hnsw")
RECALL_K = 100  # recall@100: the depth the retrieval scorer and the miners look at
RECALL_QUERIES = 100  # queries sampled to measure it
MIN_RECALL = 0.95  # below this, one warning naming the knob to raise
DEFAULT_NPROBE = 32
DEFAULT_EF_SEARCH = 128
HNSW_M = 32
#: The search-time knob of each approximate index: (its FAISS name, the command-line flag).
KNOBS = {"ivf": ("nprobe", "--nprobe"), "hnsw": ("efSearch", "--ef-search")}

Backend = Literal["auto", "faiss", "torch"]


def _positive_int(value: object, name: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ValueError(f"{name}: expected a positive int, got {value!r}")
    return value


def resolve_index_type(index_type: str, documents: int) -> str:
    """``"flat"``, ``"ivf"`` or ``"hnsw"``: ``index_type`` itself, or for ``"auto"`` flat up to
    :data:`AUTO_EXACT_MAX_DOCUMENTS` documents and :data:`AUTO_APPROXIMATE` above."""
    if index_type not in INDEX_TYPES:
        raise ValueError(f"index_type: expected one of {', '.join(INDEX_TYPES)}, got {index_type!r}")
    if index_type != "auto":
        return index_type
    return "flat" if documents <= AUTO_EXACT_MAX_DOCUMENTS else AUTO_APPROXIMATE


def check_index_options(index_type: str, backend: str = "auto", nprobe: int = DEFAULT_NPROBE,
                        ef_search: int = DEFAULT_EF_SEARCH) -> None:
    """The checks of :class:`VectorIndex`'s options that need no embeddings: before an encoding."""
    resolve_index_type(index_type, 0)
    if backend not in ("auto", "faiss", "torch"):
        raise ValueError(f"backend: expected 'auto', 'faiss' or 'torch', got {backend!r}")
    if backend == "faiss" and not faiss_available():
        raise ValueError("backend: 'faiss' requested but faiss is not installed (pip install faiss-cpu)")
    if index_type in ("ivf", "hnsw") and (backend == "torch" or not faiss_available()):
        raise ValueError(f"index_type: {index_type!r} is a FAISS index; "
                         + ("backend 'torch' searches exactly only" if backend == "torch" else "faiss is not installed (pip install faiss-cpu)"))
    _positive_int(nprobe, "nprobe")
    _positive_int(ef_search, "ef_search")


@dataclass(frozen=True)
class RecallReport:
    """Recall@``k`` of an approximate index against exact search, averaged over ``queries`` queries.

    Attributes:
        recall: mean over the queries of |approximate top-k ∩ exact top-k| / k.
        k / queries: the depth and the number of sample queries.
        index: the index in words (:meth:`VectorIndex.describe`).
        knob / flag / value: the search-time setting that trades speed for recall, its flag, its value.
        source: where the sample queries came from, in words (None: the queries searched).
    """

    recall: float
    k: int
    queries: int
    index: str
    knob: str
    flag: str
    value: int
    source: str | None = None

    @property
    def low(self) -> bool:
        return self.recall < MIN_RECALL

    def line(self) -> str:
        source = f" ({self.source})" if self.source else ""
        return (f"recall@{self.k} of the approximate index against exact search, on {self.queries} sample queries{source}: "
                f"{self.recall:.3f} ({self.index}, {self.knob} {self.value})")

    def warning(self) -> str:
        return (f"recall@{self.k} {self.recall:.3f} is below {MIN_RECALL:g}: the approximate index misses exact neighbours; "
                f"raise {self.knob} ({self.flag}, now {self.value}) or use --index-type flat")


def _as_rows(embeddings: np.ndarray | torch.Tensor) -> np.ndarray:
    """(N, d) float32 C-contiguous rows, the same memory when they already are (a memory map stays one)."""
    if isinstance(embeddings, torch.Tensor):
        embeddings = embeddings.detach().cpu().float().numpy()
    rows = np.asarray(embeddings)
    if rows.ndim != 2 or rows.shape[0] == 0 or rows.shape[1] == 0:
        raise ValueError(f"embeddings: expected a non-empty (N, d) matrix, got shape {tuple(rows.shape)}")
    if rows.dtype != np.float32 or not rows.flags.c_contiguous:
        rows = np.ascontiguousarray(rows, dtype=np.float32)
    return rows


def _as_queries(queries: np.ndarray | torch.Tensor, dim: int) -> np.ndarray:
    rows = np.ascontiguousarray(queries.detach().cpu().float().numpy() if isinstance(queries, torch.Tensor) else queries,
                                dtype=np.float32)
    if rows.ndim != 2 or rows.shape[1] != dim:
        raise ValueError(f"queries: expected (Q, {dim}) embeddings, got shape {tuple(rows.shape)}")
    return rows


class VectorIndex:
    """Top-k inner-product search over (N, d) unit-norm rows by the index ``index_type`` names.

    Args:
        embeddings: (N, d) float32 rows (a memory map, an array or a tensor; not copied for flat).
        index_type: ``auto``, ``flat``, ``ivf`` or ``hnsw`` (module docstring).
        backend: ``auto`` (FAISS when installed), ``faiss``, or ``torch`` (exact search only).
        nprobe: lists an IVF index searches; ef_search: HNSW's candidate list at search time.
        nlist: IVF lists (None: ``sqrt(N)``); hnsw_m: HNSW's neighbours per node.
        faiss_index: an approximate FAISS index over these rows, built before (loaded from disk).
    """

    def __init__(self, embeddings: np.ndarray | torch.Tensor, index_type: str = "auto", *, backend: Backend = "auto",
                 nprobe: int = DEFAULT_NPROBE, ef_search: int = DEFAULT_EF_SEARCH, nlist: int | None = None,
                 hnsw_m: int = HNSW_M, faiss_index=None) -> None:
        check_index_options(index_type, backend, nprobe, ef_search)
        self.embeddings = _as_rows(embeddings)
        self.nprobe, self.ef_search = nprobe, ef_search
        self.hnsw_m = _positive_int(hnsw_m, "hnsw_m")
        self.nlist = None if nlist is None else _positive_int(nlist, "nlist")
        self.use_faiss = backend == "faiss" or (backend == "auto" and faiss_available())
        self.index_type = resolve_index_type(index_type, len(self))
        if self.index_type != "flat" and not self.use_faiss:
            logger.warning("index_type auto: %d documents call for an approximate index, but FAISS is %s; searching exactly",
                           len(self), "not installed" if backend == "auto" else "off")
            self.index_type = "flat"
        self._faiss_index = faiss_index
        self.build_seconds = 0.0

    def __len__(self) -> int:
        return int(self.embeddings.shape[0])

    @property
    def approximate(self) -> bool:
        return self.index_type != "flat"

    def describe(self) -> str:
        """The search in words: ``"FAISS IndexHNSWFlat (approximate) over 250000 documents"``."""
        if not self.approximate:
            kind = "FAISS IndexFlatIP (exact inner product)" if self.use_faiss else "exact search (torch)"
        else:
            kind = f"FAISS {'IndexIVFFlat' if self.index_type == 'ivf' else 'IndexHNSWFlat'} (approximate)"
        return f"{kind} over {len(self)} documents"

    def build(self) -> VectorIndex:
        """Build the approximate FAISS index now (the first search would); a flat one has none. Returns self."""
        if self.approximate and self._faiss_index is None:
            start = time.perf_counter()
            self._faiss_index = build_faiss_index(self.embeddings, self.index_type, nlist=self.nlist, nprobe=self.nprobe,
                                                  hnsw_m=self.hnsw_m)
            self.build_seconds = time.perf_counter() - start
            logger.info("built %s in %.1f s", self.describe(), self.build_seconds)
        if self._faiss_index is not None:  # the search-time knobs, also on an index read from disk
            if self.index_type == "ivf":
                self._faiss_index.nprobe = min(self.nprobe, self._faiss_index.nlist)
            else:
                self._faiss_index.hnsw.efSearch = self.ef_search
        return self

    def knob(self) -> tuple[str, str, int]:
        """``(name, flag, value)`` of the search-time setting of an approximate index."""
        name, flag = KNOBS[self.index_type]
        return name, flag, self.nprobe if self.index_type == "ivf" else self.ef_search

    def save(self, path: str | Path) -> None:
        """Write the approximate FAISS index to ``path`` (``faiss.write_index``, then renamed into
        place: never half a file), for ``faiss_index=`` later."""
        import faiss

        path = Path(path)
        partial = path.with_name(path.name + ".partial")
        faiss.write_index(self.build()._faiss_index, str(partial))
        partial.replace(path)

    def search(self, queries: np.ndarray | torch.Tensor, k: int) -> tuple[torch.Tensor, torch.Tensor]:
        """``(scores, rows)``, both (Q, min(k, N)): inner products, descending, and int64 row
        indices (``-1``, score ``-inf``, where an approximate index found fewer)."""
        check_top_k(k, "k")
        if not self.approximate:
            return self.exact_search(queries, k)
        found_scores, found_rows = self.build()._faiss_index.search(_as_queries(queries, self.embeddings.shape[1]), min(k, len(self)))
        scores, rows = torch.from_numpy(found_scores), torch.from_numpy(found_rows).long()
        return torch.where(rows < 0, torch.full_like(scores, -math.inf), scores), rows

    def exact_search(self, queries: np.ndarray | torch.Tensor, k: int) -> tuple[torch.Tensor, torch.Tensor]:
        """The exact top ``min(k, N)`` (the flat search), whatever the index type."""
        check_top_k(k, "k")
        k = min(k, len(self))
        if self.use_faiss:
            import faiss

            scores, rows = faiss.knn(_as_queries(queries, self.embeddings.shape[1]), self.embeddings, k,
                                     metric=faiss.METRIC_INNER_PRODUCT)
            return torch.from_numpy(scores), torch.from_numpy(rows).long()
        query_rows = queries.detach().float().cpu() if isinstance(queries, torch.Tensor) else torch.from_numpy(_as_queries(queries, self.embeddings.shape[1]))
        return exact_topk(query_rows, torch.from_numpy(self.embeddings), k)

    def measure_recall(self, queries: np.ndarray | torch.Tensor, k: int = RECALL_K, sample: int = RECALL_QUERIES,
                       seed: int = 0) -> RecallReport | None:
        """Recall@``k`` of this index against exact search on up to ``sample`` of ``queries``
        (drawn with ``seed``); None for a flat (exact) index."""
        if not self.approximate:
            return None
        check_top_k(k, "k")
        _positive_int(sample, "sample")
        rows = _as_queries(queries, self.embeddings.shape[1])
        if len(rows) == 0:
            raise ValueError("queries: expected at least one query to measure recall on")
        if len(rows) > sample:
            rows = rows[np.sort(np.random.default_rng(seed).choice(len(rows), sample, replace=False))]
        k = min(k, len(self))
        _, approximate = self.search(rows, k)
        _, exact = self.exact_search(rows, k)
        hits = [len(set(a.tolist()) & set(e.tolist())) for a, e in zip(approximate, exact)]
        name, flag, value = self.knob()
        return RecallReport(float(np.mean(hits)) / k, k, len(rows), self.describe(), name, flag, value)
