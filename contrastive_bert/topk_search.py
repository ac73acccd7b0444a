"""Top-k search by inner product (FAISS or exact), and the false-negative control of the queue
losses' hard negatives.

The one exact search of the package is :func:`exact_topk`: the queue losses' hard negatives
(:func:`search_topk`'s torch path), offline mining over a retrieval corpus
(:mod:`contrastive_bert.corpus_mining`), the retrieval scorer
(:func:`contrastive_bert.evaluation.dense_retrieval.exact_search`) and
:class:`~contrastive_bert.inference.corpus_index.CorpusIndex` all rank through it, so they rank
alike, ties included.

* :func:`exact_topk`: the exact top-k, scored ``chunk_size`` keys at a time so that memory stays
  ``(q, chunk_size)``. **Tie rule**: higher score first, then the lower key index, also at the
  k-th place (:func:`stable_topk`); NaN ranks above every number, as in ``torch.topk``.
* :func:`check_top_k`: the one check of a top-k count (``k``, ``top_k``).
* :func:`search_topk`: the k most similar keys per query by inner product, through FAISS (exact
  ``IndexFlatIP`` by default, ``ivf`` or ``hnsw`` for large queues, the GPU index when faiss-gpu and
  CUDA are present, capped at FAISS-GPU's 2048 neighbours) or :func:`exact_topk`.
* :class:`ScoreMargins`: the score filters relative to the anchor's positive, checked once when made.
* :func:`false_negative_mask`: which candidates may serve as negatives for each anchor: not the
  anchor's or positive's own text/id, not too close to the positive (:class:`ScoreMargins`), and
  optionally not sharing the anchor's label.
* :class:`HardnessSchedule`: curriculum from easy to hard, as a rank offset into the filtered list.
* :func:`search_hard_negatives`: the three combined, returning ``(batch, k)`` queue indices.

A corpus's search (exact up to a size, an approximate index built once above it, with its recall
measured) is :class:`contrastive_bert.vector_index.VectorIndex`, built on :func:`build_faiss_index`
and :func:`exact_topk`.
"""

from __future__ import annotations

import logging
import math
from dataclasses import dataclass
from typing import Literal

import numpy as np
import torch
from torch import Tensor

from contrastive_bert.queue import NO_ID, NO_LABEL

logger = logging.getLogger(__name__)

__all__ = [
    "EXACT_CHUNK_SIZE",
    "FAISS_GPU_MAX_K",
    "HardnessSchedule",
    "build_faiss_index",
    "ScoreMargins",
    "check_top_k",
    "exact_topk",
    "faiss_available",
    "faiss_gpu_available",
    "false_negative_mask",
    "search_hard_negatives",
    "search_topk",
    "select_top_ranked",
    "stable_topk",
]

#: FAISS GPU indexes return at most this many neighbours per query.
FAISS_GPU_MAX_K = 2048
#: Keys scored at once by :func:`exact_topk` (memory: queries x this many scores).
EXACT_CHUNK_SIZE = 50_000

Backend = Literal["auto", "faiss", "torch"]
IndexType = Literal["flat", "ivf", "hnsw"]


def faiss_available() -> bool:
    try:
        import faiss  # noqa: F401
    except ImportError:
        return False
    return True


def faiss_gpu_available() -> bool:
    """faiss was built with GPU support and sees at least one GPU."""
    if not faiss_available():
        return False
    import faiss

    return hasattr(faiss, "StandardGpuResources") and getattr(faiss, "get_num_gpus", lambda: 0)() > 0


def check_top_k(top_k: int, name: str = "top_k") -> int:
    """``top_k`` if it is a positive int (not a bool), else a ``ValueError`` naming ``name``."""
    if isinstance(top_k, bool) or not isinstance(top_k, int) or top_k < 1:
        raise ValueError(f"{name}: expected a positive int, got {top_k!r}")
    return top_k


def check_chunk_size(chunk_size: int) -> int:
    """``chunk_size`` (rows read at once) if a positive int, else a ValueError naming it."""
    if isinstance(chunk_size, bool) or not isinstance(chunk_size, int) or chunk_size < 1:
        raise ValueError(f"chunk_size: expected a positive int, got {chunk_size!r}")
    return chunk_size


def stable_topk(scores: Tensor, k: int) -> tuple[Tensor, Tensor]:
    """The ``k`` largest entries of each row of ``scores`` (m, n), as ``(values (m, k), positions
    (m, k))`` sorted by value, descending; among equal values the lower position comes first, and
    a tie at the k-th value keeps the lowest positions (``torch.topk`` alone fixes neither). NaN
    counts as larger than every number (as in ``torch.topk``)."""
    kth = torch.topk(scores, k, dim=1).values[:, -1:]
    above = scores > kth
    equal = scores == kth
    nan = scores.isnan()
    if bool(nan.any()):
        kth_nan = kth.isnan()
        above |= nan & ~kth_nan
        equal |= nan & kth_nan
    needed = k - above.sum(dim=1, keepdim=True)
    take = above | (equal & (equal.cumsum(dim=1) <= needed))
    positions = take.nonzero()[:, 1].view(scores.shape[0], k)  # row-major: ascending per row
    values = scores.gather(1, positions)
    order = torch.sort(values, dim=1, descending=True, stable=True).indices
    return values.gather(1, order), positions.gather(1, order)


def exact_topk(
    queries: Tensor,
    keys: Tensor,
    k: int,
    *,
    chunk_size: int = EXACT_CHUNK_SIZE,
    normalize: bool = False,
) -> tuple[Tensor, Tensor]:
    """The exact ``min(k, n)`` best keys per query by inner product, ``chunk_size`` keys at a time.

    queries: ``(q, dim)``; keys: ``(n, dim)``, scored on the queries' device in their dtype.
    ``normalize``: cosine instead (queries and each chunk of keys divided by their L2 norms).
    Returns ``(scores, indices)``, both ``(q, min(k, n))``: scores in the queries' dtype,
    descending, and int64 row indices into ``keys``. Tie rule: higher score first, then the lower
    key index (:func:`stable_topk`), so the result does not depend on ``chunk_size``. Memory:
    ``q x chunk_size`` scores plus ``q x 2k`` kept ones.
    """
    check_top_k(k, "k")
    check_chunk_size(chunk_size)
    if queries.ndim != 2 or keys.ndim != 2 or queries.shape[1] != keys.shape[1]:
        raise ValueError(
            f"queries/keys: expected (q, dim) and (n, dim) with the same dim, got {tuple(queries.shape)} and {tuple(keys.shape)}"
        )
    queries = queries.detach()
    if normalize:
        queries = torch.nn.functional.normalize(queries, p=2, dim=1)
    n = keys.shape[0]
    k = min(k, n)
    if k == 0:
        empty = torch.empty((queries.shape[0], 0), dtype=queries.dtype, device=queries.device)
        return empty, empty.long()
    best_scores = best_indices = None
    for start in range(0, n, chunk_size):
        chunk = keys[start : start + chunk_size].detach().to(device=queries.device, dtype=queries.dtype)
        if normalize:
            chunk = torch.nn.functional.normalize(chunk, p=2, dim=1)
        scores, positions = stable_topk(queries @ chunk.T, min(k, chunk.shape[0]))
        indices = positions + start
        if best_scores is not None:
            # earlier chunks first: in the concatenation, equal scores stay in key-index order
            scores, positions = stable_topk(torch.cat([best_scores, scores], dim=1), min(k, best_scores.shape[1] + scores.shape[1]))
            indices = torch.cat([best_indices, indices], dim=1).gather(1, positions)
        best_scores, best_indices = scores, indices
    return best_scores, best_indices


def build_faiss_index(keys: np.ndarray, index_type: IndexType = "flat", use_gpu: bool = False, nlist: int | None = None,
                      nprobe: int = 16, hnsw_m: int = 32):
    """A FAISS inner-product index over ``keys`` (n, d) float32: ``flat`` (exact), ``ivf`` or ``hnsw``."""
    import faiss

    dim = keys.shape[1]
    if index_type == "flat":
        index = faiss.IndexFlatIP(dim)
    elif index_type == "ivf":
        nlist = nlist or max(1, int(math.sqrt(keys.shape[0])))
        nlist = min(nlist, keys.shape[0])
        quantizer = faiss.IndexFlatIP(dim)
        index = faiss.IndexIVFFlat(quantizer, dim, nlist, faiss.METRIC_INNER_PRODUCT)
        index.train(keys)
        index.nprobe = min(nprobe, nlist)
    elif index_type == "hnsw":
        index = faiss.IndexHNSWFlat(dim, hnsw_m, faiss.METRIC_INNER_PRODUCT)
    else:  # validated by the caller
        raise ValueError(f"index_type: expected 'flat', 'ivf' or 'hnsw', got {index_type!r}")
    if use_gpu and index_type != "hnsw":  # FAISS has no GPU HNSW
        resources = faiss.StandardGpuResources()
        index = faiss.index_cpu_to_gpu(resources, 0, index)
    index.add(keys)
    return index


def search_topk(
    queries: Tensor,
    keys: Tensor,
    k: int,
    backend: Backend = "auto",
    index_type: IndexType = "flat",
    use_gpu: bool | None = None,
    nlist: int | None = None,
    nprobe: int = 16,
    hnsw_m: int = 32,
    chunk_size: int = EXACT_CHUNK_SIZE,
) -> tuple[Tensor, Tensor]:
    """Top-k keys per query by inner product (cosine for normalised inputs).

    queries: ``(q, dim)``; keys: ``(n, dim)``. Returns ``(scores, indices)``, both ``(q, min(k, n))``,
    sorted by descending score, on the queries' device. ``k`` above ``n`` is clamped to ``n``;
    approximate indexes (``ivf``/``hnsw``) may return fewer hits, padded with index ``-1`` / score
    ``-inf``. ``backend="auto"`` uses FAISS when installed, else torch (:func:`exact_topk`, its tie
    rule, ``chunk_size`` keys at a time); ``use_gpu=None`` uses the FAISS GPU index when available,
    falling back to the CPU index for ``k > 2048``.
    """
    if queries.ndim != 2 or keys.ndim != 2 or queries.shape[1] != keys.shape[1]:
        raise ValueError(
            f"queries/keys: expected (q, dim) and (n, dim) with the same dim, got {tuple(queries.shape)} and {tuple(keys.shape)}"
        )
    check_top_k(k, "k")
    if backend not in ("auto", "faiss", "torch"):
        raise ValueError(f"backend: expected 'auto', 'faiss' or 'torch', got {backend!r}")
    if index_type not in ("flat", "ivf", "hnsw"):
        raise ValueError(f"index_type: expected 'flat', 'ivf' or 'hnsw', got {index_type!r}")
    n = keys.shape[0]
    k = min(k, n)
    device = queries.device
    if k == 0:
        empty = torch.empty((queries.shape[0], 0), device=device)
        return empty, empty.long()
    if backend == "faiss" and not faiss_available():
        raise ValueError("backend: 'faiss' requested but faiss is not installed (pip install faiss-cpu)")
    use_faiss = backend == "faiss" or (backend == "auto" and faiss_available())
    if not use_faiss:
        if index_type != "flat":
            logger.warning("index_type=%r needs FAISS; using exact torch search", index_type)
        return exact_topk(queries, keys, k, chunk_size=chunk_size)

    gpu = faiss_gpu_available() if use_gpu is None else bool(use_gpu)
    if gpu and not faiss_gpu_available():
        raise ValueError("use_gpu: True but faiss has no GPU support or sees no GPU")
    if gpu and k > FAISS_GPU_MAX_K:
        logger.info("k=%d exceeds FAISS GPU's %d-neighbour cap; searching on the CPU index", k, FAISS_GPU_MAX_K)
        gpu = False
    keys_np = np.ascontiguousarray(keys.detach().float().cpu().numpy())
    queries_np = np.ascontiguousarray(queries.detach().float().cpu().numpy())
    index = build_faiss_index(keys_np, index_type, gpu, nlist, nprobe, hnsw_m)
    scores_np, indices_np = index.search(queries_np, k)
    scores_t = torch.from_numpy(scores_np).to(device)
    indices_t = torch.from_numpy(indices_np).to(device=device, dtype=torch.int64)
    scores_t = torch.where(indices_t < 0, torch.full_like(scores_t, -math.inf), scores_t)
    return scores_t, indices_t


@dataclass(frozen=True)
class ScoreMargins:
    """Score filters relative to the anchor-positive score ``p``; each value checked on creation
    (``ValueError`` naming it), so the filters applied every step never check again.

    A candidate scoring ``s`` is dropped when ``s > p - absolute_margin``,
    ``s > p - |p| * relative_margin`` (both as ``sentence_transformers.util.mine_hard_negatives``),
    ``s > max_score`` or ``s > perc_pos * p`` (NV-Retriever's TopK-PercPos; for ``p > 0`` the same
    as ``relative_margin = 1 - perc_pos``). None turns a filter off.
    """

    absolute_margin: float | None = None
    relative_margin: float | None = None
    max_score: float | None = None
    perc_pos: float | None = None

    def __post_init__(self) -> None:
        for name, expected, valid in (
            ("absolute_margin", "a finite number", lambda v: True),
            ("relative_margin", "a number in [0, 1]", lambda v: 0 <= v <= 1),
            ("max_score", "a finite number", lambda v: True),
            ("perc_pos", "a number in (0, 1]", lambda v: 0 < v <= 1),
        ):
            value = getattr(self, name)
            if value is None:
                continue
            if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) or not valid(value):
                raise ValueError(f"{name}: expected {expected} or null, got {value!r}")

    def keep(self, scores: Tensor, positive_scores: Tensor) -> Tensor:
        """``(b, n)`` True where a candidate passes every filter; scores ``(b, n)``, positive_scores ``(b,)``."""
        positive = positive_scores.detach().unsqueeze(1).to(scores.dtype)
        keep = torch.ones_like(scores, dtype=torch.bool)
        if self.absolute_margin is not None:
            keep &= scores <= positive - self.absolute_margin
        if self.relative_margin is not None:
            keep &= scores <= positive - positive.abs() * self.relative_margin
        if self.max_score is not None:
            keep &= scores <= self.max_score
        if self.perc_pos is not None:
            keep &= scores <= positive * self.perc_pos
        return keep


def false_negative_mask(
    scores: Tensor,
    positive_scores: Tensor,
    candidate_ids: Tensor | None = None,
    anchor_ids: Tensor | None = None,
    positive_ids: Tensor | None = None,
    candidate_labels: Tensor | None = None,
    anchor_labels: Tensor | None = None,
    margins: ScoreMargins | None = None,
) -> Tensor:
    """Which candidates may be used as negatives (``True`` = keep).

    scores: ``(batch, n)`` anchor-candidate similarities; positive_scores: ``(batch,)``.
    candidate_ids / candidate_labels: ``(n,)``, or ``(batch, n)`` when each anchor has its own
    candidates (e.g. after a top-k search); anchor_ids, positive_ids, anchor_labels: ``(batch,)``.
    Unknown ids/labels (``NO_ID``/``NO_LABEL``) never match. A candidate is dropped when its score
    is not finite, it shares the anchor's or positive's id, shares the anchor's label, or fails
    ``margins`` (None: no score filter).
    """
    if scores.ndim != 2 or positive_scores.shape != scores.shape[:1]:
        raise ValueError(
            f"scores/positive_scores: expected (batch, n) and (batch,), got {tuple(scores.shape)} and {tuple(positive_scores.shape)}"
        )
    keep = torch.isfinite(scores)
    if margins is not None:
        keep &= margins.keep(scores, positive_scores)

    def _expand(values: Tensor) -> Tensor:
        return values.unsqueeze(0) if values.ndim == 1 else values

    if candidate_ids is not None:
        cand = _expand(candidate_ids)
        for own in (anchor_ids, positive_ids):
            if own is not None:
                own = own.to(cand.device).unsqueeze(1)
                keep &= ~((cand == own) & (own != NO_ID))
    if candidate_labels is not None and anchor_labels is not None:
        cand = _expand(candidate_labels)
        own = anchor_labels.to(cand.device).unsqueeze(1)
        keep &= ~((cand == own) & (own != NO_LABEL))
    return keep


@dataclass
class HardnessSchedule:
    """Curriculum from easy to hard negatives (seed: "课程学习").

    ``hardness(step)`` goes linearly from ``start`` to ``end`` over ``warmup_steps`` loss calls
    (then stays at ``end``). Hardness ``h`` picks the negatives at ranks
    ``[offset, offset + k)`` of the filtered, score-sorted candidate list with
    ``offset = round((1 - h) * (pool_factor - 1) * k)``: ``h = 1`` takes the top-k (hardest),
    ``h = 0`` the ranks ``[(pool_factor - 1) k, pool_factor k)`` (easier). The default is
    always-hardest, i.e. no curriculum.
    """

    start: float = 1.0
    end: float = 1.0
    warmup_steps: int = 0
    pool_factor: int = 4

    def __post_init__(self) -> None:
        for name in ("start", "end"):
            value = getattr(self, name)
            if not (0.0 <= value <= 1.0):
                raise ValueError(f"{name}: expected a hardness in [0, 1], got {value!r}")
        if not isinstance(self.warmup_steps, int) or self.warmup_steps < 0:
            raise ValueError(f"warmup_steps: expected an int >= 0, got {self.warmup_steps!r}")
        if not isinstance(self.pool_factor, int) or self.pool_factor < 1:
            raise ValueError(f"pool_factor: expected an int >= 1, got {self.pool_factor!r}")

    def hardness(self, step: int) -> float:
        if self.warmup_steps == 0 or step >= self.warmup_steps:
            return self.end
        return self.start + (self.end - self.start) * step / self.warmup_steps

    def offset(self, step: int, k: int) -> int:
        """Rank of the first hard negative taken at ``step`` for ``k`` negatives per anchor."""
        return int(round((1.0 - self.hardness(step)) * (self.pool_factor - 1) * k))


def select_top_ranked(scores: Tensor, keep: Tensor, k: int, offset: int = 0) -> Tensor:
    """Indices of the kept entries ranked ``[offset, offset + k)`` by score, per row.

    scores, keep: ``(batch, n)``. Returns ``(batch, k)`` int64, ``-1`` where too few are kept.
    """
    batch, n = scores.shape
    need = offset + k
    masked = scores.masked_fill(~keep, -math.inf)
    top_scores, top_idx = torch.topk(masked, min(need, n), dim=1)
    top_idx = torch.where(torch.isfinite(top_scores), top_idx, torch.full_like(top_idx, -1))
    selected = top_idx[:, offset:need]
    if selected.shape[1] < k:
        pad = torch.full((batch, k - selected.shape[1]), -1, dtype=torch.int64, device=scores.device)
        selected = torch.cat([selected, pad], dim=1)
    return selected


def search_hard_negatives(
    anchors: Tensor,
    positive_scores: Tensor,
    keys: Tensor,
    k: int,
    *,
    key_ids: Tensor | None = None,
    anchor_ids: Tensor | None = None,
    positive_ids: Tensor | None = None,
    key_labels: Tensor | None = None,
    anchor_labels: Tensor | None = None,
    margins: ScoreMargins | None = None,
    offset: int = 0,
    scores: Tensor | None = None,
    backend: Backend = "torch",
    index_type: IndexType = "flat",
    use_gpu: bool | None = None,
) -> Tensor:
    """Indices of up to ``k`` hard negatives per anchor among ``keys``, after false-negative filtering.

    anchors: ``(batch, dim)`` normalised; positive_scores: ``(batch,)``; keys: ``(n, dim)`` normalised.
    ``margins``: the score filters (:class:`ScoreMargins`, checked when made). ``scores``
    ``(batch, n)``: precomputed anchor-key similarities (then no search is run). The
    hardest ``offset`` surviving candidates are skipped (curriculum). Returns ``(batch, k)`` int64
    key indices, ``-1`` where fewer than ``offset + k`` candidates survive (documented clamping:
    ``k`` larger than the filled queue yields padding, never an error).
    """
    if not isinstance(k, int) or k < 0:
        raise ValueError(f"k: expected an int >= 0, got {k!r}")
    if not isinstance(offset, int) or offset < 0:
        raise ValueError(f"offset: expected an int >= 0, got {offset!r}")
    batch, n = anchors.shape[0], keys.shape[0]
    device = anchors.device
    if k == 0 or n == 0:
        return torch.full((batch, k), -1, dtype=torch.int64, device=device)
    need = offset + k
    if scores is not None or (backend == "torch" and index_type == "flat"):
        # Exact path: mask the full score matrix, then one topk.
        full = scores.detach() if scores is not None else anchors.detach() @ keys.detach().T.to(anchors.dtype)
        keep = false_negative_mask(
            full, positive_scores, key_ids, anchor_ids, positive_ids, key_labels, anchor_labels, margins
        )
        return select_top_ranked(full, keep, k, offset)
    # Search path: retrieve a pool, filter it, widen the pool while too few candidates survive.
    pool = min(n, max(2 * need, need + 16))
    while True:
        cand_scores, cand_idx = search_topk(anchors, keys, pool, backend, index_type, use_gpu)
        safe_idx = cand_idx.clamp(min=0)
        keep = false_negative_mask(
            cand_scores,
            positive_scores,
            None if key_ids is None else key_ids.to(device)[safe_idx],
            anchor_ids,
            positive_ids,
            None if key_labels is None else key_labels.to(device)[safe_idx],
            anchor_labels,
            margins,
        ) & (cand_idx >= 0)
        if bool((keep.sum(dim=1) >= need).all()) or pool >= n:
            break
        pool = min(n, pool * 4)
    # the kept candidates ranked [offset, offset + k), as positions in the pool, then as key indices
    ranked = select_top_ranked(cand_scores, keep, k, offset)
    return torch.where(ranked >= 0, cand_idx.gather(1, ranked.clamp(min=0)), ranked)
