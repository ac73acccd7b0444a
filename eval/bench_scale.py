"""Cost as the corpus grows: corpus encoding (per backend), index build, search and hard-negative
mining at 10,000 to 1,000,000 documents, with each stage's growth exponent and a log-log figure.

Stages (``--stages``, each cell in a fresh process, ``--threads`` threads):

* ``encode``: documents per second and peak memory of encoding real text into a store on disk
  (:func:`contrastive_bert.embedding_store.encode_corpus`, 64 per batch, the model's 256 tokens) at
  1,000, 10,000 and 50,000 documents (``--encode-sizes``): the 8,816 documents of SciFact and
  NFCorpus, repeated in order as needed. Per backend (``--backends``): ``torch`` fp32,
  ``torch-bf16`` (bf16 autocast), ``onnx`` fp32, ``onnx-int8`` (dynamic int8), through
  ``contrastive_bert.models.load_model(backend=...)``;
  a backend that this install cannot load is left out with its reason in the JSON
  (``backends_unavailable``). The 1,000,000-document time is *extrapolated* from the largest cell
  (documents per second) and from the fitted power law, and the JSON says so.
* ``quality``: SciFact test nDCG@10 of the bundled model per backend (same documents, same model;
  :func:`contrastive_bert.evaluation.beir_evaluation.evaluate_retrieval_splits`, exact search) and
  its difference from ``torch``: the cost of a faster backend.
* ``index``: build seconds (``flat`` has none: FAISS's exact search runs over the rows where they
  lie), the seconds of a top-100 search for 1,000 queries, recall@10 / recall@100 against exact
  search on all of them (IVF at ``nprobe`` 32, HNSW at ``efSearch`` 128: the defaults of ``mine`` and
  ``search``), at 10,000, 100,000 and 1,000,000 documents (``--sizes``), per ``--index-types``.
* ``mine``: :func:`contrastive_bert.corpus_mining.mine_corpus_negatives` (the library's function as
  ``mine`` calls it: 4 negatives from the top 100, the positive-aware filter) for 1,000 (query,
  relevant document) pairs of SciFact against the corpus through the given index: seconds (query
  encoding included; ``query_encode_seconds`` says how much of it that is) and peak memory.

* ``cli``: the CLI as a user runs it (``python -m contrastive_bert.cli``, ``--model-backend
  torch-bf16``), on a BEIR folder of 1,000,000 real documents (SciFact's corpus, queries and
  judgements, then sentences of SciFact's and NFCorpus's documents, repeated beyond the distinct
  ones): ``search --corpus corpus.jsonl --index DIR`` for SciFact's test queries, interrupted
  (Ctrl-C) once half the corpus is encoded, run again (it resumes), and once more (the index read
  back; the same hits); then ``mine --dataset FOLDER --embeddings-dir DIR`` on the search's store.
  Seconds and peak memory per process (``cli`` in the JSON: the largest corpus, per command).

Documents of ``index`` and ``mine``: the real document embeddings of SciFact and NFCorpus (8,816,
encoded once by the bundled all-MiniLM-L6-v2 into stores under ``--cache-dir``, resumable) first;
beyond them copies of those rows, copy ``c`` moved by Gaussian noise of norm ``--noise`` (0.5:
cosine about 0.89 to its original, drawn with seed ``[0, c]``, so a smaller size's rows are a
prefix of a larger one's) and normalised again: tiled with small noise, not real documents, so a
large size has near-duplicate clusters a real corpus would not. The rows are written once per size
to a store on disk (``tiled-*`` under ``--cache-dir``; 1.5 GB at 1M) and each cell memory-maps it,
as ``mine`` and ``search`` read a corpus's store. A tiled document's text (for mining's rows) is its
original's. Queries: the first 1,000 SciFact queries (sorted ids, every split).

Memory, per cell: ``peak_rss_mib`` (the process's peak resident set, ``VmHWM``: the mapped rows it
read count here, though the OS may drop them), ``peak_anon_mib`` (the largest anonymous resident
memory, sampled every 20 ms: what the process itself holds) and ``stage_mib`` (that peak minus the
anonymous memory before the stage: an approximate index's own copy of the rows and its links or
lists, the search's buffers, mining's maps; the model and the texts are loaded before).

HNSW at a size above the ones measured is first estimated from the HNSW index cells done (power
law of build seconds): above ``--hnsw-cap-minutes`` (30) it is not run, and the JSON's ``capped``
says so with the estimate.

Growth: for each stage (and backend or index type) the least-squares slope of log(seconds) and of
log(memory) against log(size) (``growth``; ``mine_search`` is mining less its query encoding); ``scale.png`` plots seconds, peak RSS and the stage's
own memory against size, one line per stage.

Resumable: each finished cell is appended to ``scale_runs.jsonl``; ``scale.json`` and ``scale.png``
are rebuilt after every cell. ``--dry-run``: every size / 100 (at least 100 rows; encoding at least
10 documents), 50 queries and pairs, quality on 16 test queries and a 300-document corpus: numbers
meaningless; its results and run log go under the system temp folder (unless ``--output`` /
``--run-log`` name others), its keys say ``dry_run``, and a real run's JSON never holds them. Records
of the first version of this benchmark (10k index cells with the rows in memory, keys without
``stage``) stay in the log but are superseded: the cells now map the rows from disk.

The real cells (run by hand on a quiet machine: pause the background benchmark; two threads;
rough times here, from 10k-40k cells at one thread on a loaded machine, HNSW build growing as
size ** 1.4-1.7):

    export OMP_NUM_THREADS=2 CONTRASTIVE_BERT_DATA=/work/shared/data
    B="nice .venv/bin/python eval/bench_scale.py --threads 2"
    $B --stages index mine --sizes 10000 100000        # ~10 min: 6 index + 6 mining cells (~20 s of model and data loading each)
    $B --stages index mine --sizes 1000000             # ~45-75 min: a 1.5 GB store written once, HNSW built twice
                                                       #   (~10-25 min each; skipped with a note if the 100k cell puts it over 30 min)
    $B --stages encode --backends torch                # ~45 min: 61,000 documents at ~23 a second
    $B --stages encode --backends torch-bf16 onnx onnx-int8
    $B --stages quality                                # ~4 min per backend (SciFact's 5,183 documents)
    $B --stages cli                                    # ~1 h: a million sentences encoded once, in bf16
    $B --summary-only                                  # rebuild scale.json and scale.png from the log

A smoke run (about 4 minutes, most of it loading the model in each mining cell; writes under the
system temp folder, never under eval/results):

    OMP_NUM_THREADS=1 .venv/bin/python eval/bench_scale.py --dry-run --threads 1 --stages index mine
    OMP_NUM_THREADS=1 .venv/bin/python eval/bench_scale.py --dry-run --threads 1 --stages encode quality --encode-sizes 1000 3000
"""

from __future__ import annotations

import argparse
import hashlib
import json
import logging
import math
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np

from contrastive_bert.benchmarking import RunLog, add_common_arguments, setup_from_args, write_results
from contrastive_bert.training.retrieval_runs import PeakMemory

logger = logging.getLogger("bench_scale")

RESULTS = Path(__file__).parent / "results"
CACHE = Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache")) / "contrastive_bert" / "bench_scale_embeddings"
STAGES = ("index", "mine", "encode", "quality", "cli")
SIZES = (10_000, 100_000, 1_000_000)
ENCODE_SIZES = (1_000, 10_000, 50_000)
INDEX_TYPES = ("flat", "ivf", "hnsw")
BACKENDS = ("torch", "torch-bf16", "onnx", "onnx-int8")
CORPORA = ("scifact", "nfcorpus")
QUERY_SET = "scifact"
QUERIES = 1_000
PAIRS = 1_000
NOISE = 0.5
NOISE_SEED = 0
TOP_K = 100
BATCH_SIZE = 64
HNSW_CAP_MINUTES = 30.0
EXTRAPOLATE_TO = 1_000_000
DRY_RUN_DIVISOR = 100
DRY_RUN_QUERIES = 50
DRY_RUN_QUALITY_QUERIES = 16
DRY_RUN_QUALITY_DOCUMENTS = 300
DRY_RUN_CLI_DOCUMENTS = 6_000  # SciFact's 5,183 documents and some sentences
SAMPLE_SECONDS = 0.02
CLI_DOCUMENTS = 1_000_000
CLI_COMMANDS = ("search", "mine")
CLI_BACKEND = "torch-bf16"
CLI_INTERRUPT_AT = 0.5  # the first search is interrupted once this share of the corpus is encoded
CLI_SAMPLE_SECONDS = 0.2
#: 2: Ctrl-C reaches the child (version 1's search ignored it and ran to the end) and a corpus.jsonl
#: is read line by line (version 1 held every parsed row at once: 0.6 GB more at a million)
#: 3: the search's finiteness check reads the mapped rows a chunk at a time, and a loaded index takes the
#: texts the CLI already holds (version 2's search peaked at 3.9 GB anonymous, 2.6 GB of it one isfinite call)
CLI_VERSION = 3
#: the ONNX Runtime session of the onnx backends' encode cells; 2: no per-shape memory pattern (with it,
#: version 1, onnx-int8's memory grew with the corpus). A version-1 cell stays in the table, marked,
#: until this version's cell of the same backend and size replaces it.
ONNX_SESSION = 2
ONNX_BACKENDS = ("onnx", "onnx-int8")
MIN_SENTENCE_WORDS = 6
#: the lines of the CLI's output a cli cell keeps (the hits it prints are left out)
CLI_REPORT_LINES = ("encoded ", "loaded ", "search: ")


# --- memory -------------------------------------------------------------------------------------


def _status_mib(field: str) -> float:
    """A field of /proc/self/status in MiB: ``VmRSS`` (resident now), ``VmHWM`` (peak resident) or
    ``RssAnon`` (anonymous resident now). The peak is read here, not from ``ru_maxrss``, which a
    process started by ``fork`` + ``exec`` inherits from its parent."""
    with open("/proc/self/status", encoding="utf-8") as handle:
        for line in handle:
            if line.startswith(f"{field}:"):
                return int(line.split()[1]) / 1024
    raise ValueError(f"field: /proc/self/status has no {field}")


def anon_peak(interval: float = SAMPLE_SECONDS) -> PeakMemory:
    """The largest anonymous resident memory (``RssAnon``, MiB) of this process while in the block
    (``before_mb``, ``peak_mb``), sampled every ``interval`` seconds by a thread (FAISS and torch
    release the GIL while they work); mapped rows the OS may drop are left out."""
    return PeakMemory(interval=interval, sample=lambda: _status_mib("RssAnon"))


def _memory(peak: PeakMemory) -> dict:
    return {"peak_rss_mib": _status_mib("VmHWM"), "peak_anon_mib": peak.peak_mb, "before_anon_mib": peak.before_mb,
            "stage_mib": peak.peak_mb - peak.before_mb}


def _threads(count: int) -> None:
    import faiss
    import torch

    torch.set_num_threads(count)
    faiss.omp_set_num_threads(count)


# --- documents ----------------------------------------------------------------------------------


def real_documents(data_dir: str | None) -> tuple[list[str], list[str]]:
    """The ids (``corpus/id``) and texts of every document of ``CORPORA``, in order: the rows of the
    base stores."""
    from contrastive_bert.data import load_dataset
    from contrastive_bert.data.beir import RetrievalData

    ids, texts = [], []
    for name in CORPORA:
        corpus = RetrievalData.from_splits(load_dataset(name, data_dir=data_dir, dev_split=False)).corpus
        ids.extend(f"{name}/{doc}" for doc in corpus)
        texts.extend(corpus.values())
    return ids, texts


def encode_base(args) -> dict:
    """The real document rows (every corpus of ``CORPORA``, in order) and the query rows, as stores
    under ``args.cache_dir``; returns their folders and sizes (encoding only what is not there yet)."""
    from contrastive_bert.data import load_dataset
    from contrastive_bert.data.beir import RetrievalData
    from contrastive_bert.embedding_store import corpus_fingerprint, encode_corpus, store_folder
    from contrastive_bert.models import load_model

    model = load_model("default", device=args.device)
    stores, queries = [], None
    for name in CORPORA:
        data = RetrievalData.from_splits(load_dataset(name, data_dir=args.data_dir, dev_split=False))
        ids = list(data.corpus)
        texts = [data.corpus[d] for d in ids]
        start = time.perf_counter()
        folder = store_folder(args.cache_dir, corpus_fingerprint(ids, texts))
        encoded = encode_corpus(model, ids, texts, folder=folder, batch_size=BATCH_SIZE, if_other="replace", show_progress_bar=True)
        stores.append({"corpus": name, "folder": str(folder), "rows": len(encoded), "encoded_rows": encoded.encoded_rows,
                       "seconds": time.perf_counter() - start})
        if name == QUERY_SET:
            query_ids = sorted({q for split in data.qrels.values() for q in split if q in data.queries})[:QUERIES]
            query_texts = [data.queries[q] for q in query_ids]
            folder = Path(args.cache_dir) / f"queries-{corpus_fingerprint(query_ids, query_texts)[:16]}"
            encoded_queries = encode_corpus(model, query_ids, query_texts, folder=folder, kind="query", if_other="replace")
            queries = {"corpus": name, "folder": str(folder), "rows": len(encoded_queries)}
    return {"documents": stores, "queries": queries}


def _noise_copy(base: np.ndarray, copy: int, noise: float, seed: int) -> np.ndarray:
    """Copy ``copy`` (>= 1) of the unit rows ``base``: each row moved by Gaussian noise of norm
    ``noise`` (drawn with seed ``[seed, copy]``) and normalised again."""
    moved = np.random.default_rng([seed, copy]).standard_normal(base.shape).astype(np.float32)
    moved *= noise / np.linalg.norm(moved, axis=1, keepdims=True)
    moved += base
    return moved / np.linalg.norm(moved, axis=1, keepdims=True)


def tiled_chunks(base: np.ndarray, size: int, noise: float, seed: int = NOISE_SEED):
    """``(start, rows)`` blocks that make the (size, d) tiled rows in order: ``base`` first, then
    its noisy copies (:func:`_noise_copy`); at most one copy of ``base`` in memory at a time. The rows
    of a smaller ``size`` are a prefix of a larger one's."""
    if size < 1:
        raise ValueError(f"size: expected a positive number of rows, got {size}")
    for start in range(0, size, len(base)):
        copy = start // len(base)
        rows = base if copy == 0 else _noise_copy(base, copy, noise, seed)
        yield start, rows[: min(len(base), size - start)]


def tiled_rows(base: np.ndarray, size: int, noise: float, seed: int = NOISE_SEED) -> np.ndarray:
    """(size, d) unit rows in memory (tests, small sizes): see :func:`tiled_chunks`."""
    rows = np.empty((size, base.shape[1]), dtype=np.float32)
    for start, block in tiled_chunks(base, size, noise, seed):
        rows[start : start + len(block)] = block
    return rows


def load_base(folders: list[str]) -> np.ndarray:
    """The real rows of the base stores, concatenated in order."""
    return np.concatenate([np.load(Path(folder) / "embeddings.npy") for folder in folders])


def tiled_store(folders: list[str], size: int, noise: float, cache_dir: str | Path, seed: int = NOISE_SEED) -> Path:
    """The folder of a store holding the (size, d) tiled rows of the base stores ``folders`` as
    ``embeddings.npy`` (written once, in blocks, renamed into place when complete; read back after)."""
    identity = {"base": [json.loads((Path(f) / "manifest.json").read_text(encoding="utf-8")).get("corpus", str(f)) if
                         (Path(f) / "manifest.json").is_file() else str(Path(f).resolve()) for f in folders],
                "noise": noise, "seed": seed}
    digest = hashlib.sha1(json.dumps(identity, sort_keys=True).encode("utf-8")).hexdigest()[:12]
    folder = Path(cache_dir) / f"tiled-{digest}-{size}"
    array = folder / "embeddings.npy"
    if array.is_file():
        rows = np.load(array, mmap_mode="r")
        if rows.shape[0] == size and rows.dtype == np.float32:
            return folder
    folder.mkdir(parents=True, exist_ok=True)
    base = load_base(folders)
    partial = folder / "embeddings.partial.npy"
    rows = np.lib.format.open_memmap(partial, mode="w+", dtype=np.float32, shape=(size, base.shape[1]))
    for start, block in tiled_chunks(base, size, noise, seed):
        rows[start : start + len(block)] = block
    rows.flush()
    del rows
    os.replace(partial, array)
    return folder


def open_rows(folder: str | Path) -> np.ndarray:
    """A store's rows, memory-mapped copy-on-write (as the embedding store reads them back)."""
    return np.load(Path(folder) / "embeddings.npy", mmap_mode="c")


def _recall(found: np.ndarray, exact: np.ndarray) -> dict[str, float]:
    out = {}
    for k in (10, 100):
        hits = [len(set(a[:k].tolist()) & set(e[:k].tolist())) for a, e in zip(found, exact)]
        out[f"recall_at_{k}"] = float(np.mean(hits)) / min(k, exact.shape[1])
    return out


# --- cells (each in a fresh process) ------------------------------------------------------------


def run_index_cell(spec: dict) -> dict:
    """Build, search (top-100 for the queries), memory and recall against exact search of one
    (size, index type) over the memory-mapped rows of ``spec["rows"]``."""
    from contrastive_bert.vector_index import VectorIndex

    _threads(spec["threads"])
    rows = open_rows(spec["rows"])
    queries = np.ascontiguousarray(np.load(Path(spec["queries"]) / "embeddings.npy")[: spec["queries_used"]])
    index = VectorIndex(rows, spec["index_type"], backend="faiss")
    with anon_peak() as peak:
        start = time.perf_counter()
        index.build()
        build_seconds = time.perf_counter() - start
        start = time.perf_counter()
        _, found = index.search(queries, TOP_K)
        query_seconds = time.perf_counter() - start
    memory = _memory(peak)
    _, exact = index.exact_search(queries, TOP_K)
    setting = {}
    if index.index_type == "ivf":
        setting = {"nprobe": index.nprobe, "nlist": int(index.build()._faiss_index.nlist)}
    elif index.index_type == "hnsw":
        setting = {"ef_search": index.ef_search, "hnsw_m": index.hnsw_m}
    rows_mib = rows.nbytes / 2**20
    return {"stage": "index", "size": spec["size"], "index_type": spec["index_type"], "index": index.describe(), **setting,
            "build_seconds": build_seconds, "query_seconds": query_seconds, "queries": len(queries),
            "queries_per_second": len(queries) / query_seconds, **memory, "rows_mib": rows_mib,
            "index_copy_mib": rows_mib if index.approximate else 0.0, **_recall(found.numpy(), exact.numpy()),
            "threads": spec["threads"], "load_average": os.getloadavg()[0]}


def load_query_set(data_dir: str | None):
    """The :class:`~contrastive_bert.data.beir.RetrievalData` of ``QUERY_SET`` (SciFact): the
    queries and judgements of mining and the corpus of the quality stage."""
    from contrastive_bert.data import load_dataset
    from contrastive_bert.data.beir import RetrievalData

    return RetrievalData.from_splits(load_dataset(QUERY_SET, data_dir=data_dir, dev_split=False))


def mining_data(ids: list[str], texts: list[str], query_set, size: int, pairs: int):
    """The tiled corpus of ``size`` rows as :class:`~contrastive_bert.data.beir.RetrievalData`: row
    ``i`` is copy ``i // B`` of real document ``i % B`` (``B = len(ids)``; id ``ids[i % B]``, then
    ``ids[i % B]#copy``; the original's text). Its ``train`` qrels are the first ``pairs`` (query,
    relevant document) pairs of ``query_set`` (every split, sorted query ids, most relevant first,
    documents in the corpus only); every judgement of ``query_set`` stays in as split ``judged``, so
    that no judged document is mined as a negative. ``query_set``'s document ids are named
    ``QUERY_SET/id`` as in ``ids``."""
    from contrastive_bert.data.beir import RetrievalData

    count = len(ids)
    corpus = {(ids[i % count] if i < count else f"{ids[i % count]}#{i // count}"): texts[i % count] for i in range(size)}
    judged: dict[str, dict[str, int]] = {}
    for split in query_set.qrels.values():
        for query, docs in split.items():
            judged.setdefault(query, {}).update({f"{QUERY_SET}/{doc}": grade for doc, grade in docs.items()})
    everything = RetrievalData(corpus, query_set.queries, {"train": judged})
    chosen: dict[str, dict[str, int]] = {}
    for query, doc, grade in everything.positive_pairs("train", None)[:pairs]:
        chosen.setdefault(query, {})[doc] = grade
    if not chosen:
        raise ValueError(f"size: none of the first {size} documents is judged relevant to a {QUERY_SET} query; nothing to mine")
    return RetrievalData(corpus, query_set.queries, {"train": chosen, "judged": judged})


def run_mine_cell(spec: dict) -> dict:
    """:func:`~contrastive_bert.corpus_mining.mine_corpus_negatives` of ``spec["pairs"]`` pairs
    against the memory-mapped tiled rows through ``spec["index_type"]``: seconds and memory."""
    from contrastive_bert.corpus_mining import mine_corpus_negatives
    from contrastive_bert.embeddings import encode_normalized
    from contrastive_bert.models import load_model

    _threads(spec["threads"])
    model = load_model("default", device="cpu")
    ids, texts = real_documents(spec["data_dir"])
    data = mining_data(ids, texts, load_query_set(spec["data_dir"]), spec["size"], spec["pairs"])
    del ids, texts
    rows = open_rows(spec["rows"])
    if rows.shape[0] != len(data.corpus):
        raise ValueError(f"rows: {spec['rows']} holds {rows.shape[0]} rows, the corpus {len(data.corpus)} documents")
    with anon_peak() as peak:
        start = time.perf_counter()
        mined, report = mine_corpus_negatives(model, data, "train", corpus_embeddings=rows, index_type=spec["index_type"],
                                              max_positives_per_query=None, batch_size=BATCH_SIZE, return_report=True)
        seconds = time.perf_counter() - start
    memory = _memory(peak)
    query_texts = [data.queries[q] for q in sorted(data.split("train"))]
    start = time.perf_counter()
    encode_normalized(model, query_texts, kind="query", batch_size=BATCH_SIZE)
    query_encode_seconds = time.perf_counter() - start
    return {"stage": "mine", "size": spec["size"], "index_type": spec["index_type"], **_mining_version(), "seconds": seconds,
            "query_encode_seconds": query_encode_seconds, "seconds_without_query_encoding": max(seconds - query_encode_seconds, 0.0), "pairs": report.pairs, "queries": len(query_texts),
            "kept": report.kept, "dropped_near_positive": report.dropped_near_positive,
            "dropped_small_corpus": report.dropped_small_corpus, "negatives_per_row": len(mined.column_names) - 2,
            "recall_at_100": None if report.recall is None else report.recall.recall, **memory,
            "rows_mib": rows.nbytes / 2**20, "threads": spec["threads"], "load_average": os.getloadavg()[0]}


def load_backend_model(backend: str, device: str = "cpu"):
    """The bundled model on ``backend`` (``torch`` is :func:`~contrastive_bert.models.load_model`'s default)."""
    from contrastive_bert.models import load_model

    return load_model("default", device=device) if backend == "torch" else load_model("default", device=device, backend=backend)


def backend_problem(backend: str) -> str | None:
    """Why ``backend`` cannot run in this install (None: it can), found without loading a model."""
    import inspect

    from contrastive_bert import models

    if backend not in BACKENDS:
        return f"unknown backend {backend!r}; expected one of {', '.join(BACKENDS)}"
    if backend == "torch":
        return None
    if "backend" not in inspect.signature(models.load_model).parameters:
        return "contrastive_bert.models.load_model has no backend argument in this version"
    check = getattr(models, "check_backend", None)
    if check is not None:
        try:
            check(backend)
        except ValueError as error:
            return str(error)
    return None


def run_encode_cell(spec: dict) -> dict:
    """Encode ``spec["documents"]`` real documents (repeated in order) into a store in a scratch
    folder with ``spec["backend"]``: documents per second and memory."""
    from contrastive_bert.embedding_store import encode_corpus

    _threads(spec["threads"])
    _, texts = real_documents(spec["data_dir"])
    documents = [texts[i % len(texts)] for i in range(spec["documents"])]
    ids = [str(i) for i in range(len(documents))]
    start = time.perf_counter()
    model = load_backend_model(spec["backend"])
    load_seconds = time.perf_counter() - start
    scratch = Path(spec["scratch"])
    scratch.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=scratch) as folder, anon_peak() as peak:
        start = time.perf_counter()
        encoded = encode_corpus(model, ids, documents, folder=Path(folder) / "store", batch_size=BATCH_SIZE)
        seconds = time.perf_counter() - start
        dim = int(encoded.embeddings.shape[1])
        del encoded
    memory = _memory(peak)
    return {"stage": "encode", "backend": spec["backend"], "documents": len(documents), "seconds": seconds,
            "documents_per_second": len(documents) / seconds, "load_seconds": load_seconds,
            "max_seq_length": getattr(model, "max_seq_length", None), "dim": dim, "batch_size": BATCH_SIZE,
            "distinct_documents": min(len(texts), len(documents)), **memory, "threads": spec["threads"],
            "load_average": os.getloadavg()[0]}


def run_quality_cell(spec: dict) -> dict:
    """SciFact test nDCG@10 of the bundled model on ``spec["backend"]`` (the package's retrieval scorer)."""
    from contrastive_bert.data.beir import RetrievalData
    from contrastive_bert.evaluation.beir_evaluation import evaluate_retrieval_splits

    _threads(spec["threads"])
    data = load_query_set(spec["data_dir"])
    max_queries = spec.get("max_queries")
    if spec.get("max_documents"):  # dry run: the judged documents of the first queries and a few others
        test = data.split("test")
        queries = sorted(q for q in test if q in data.queries)[:max_queries]
        keep = {d for q in queries for d in test[q]} | set(list(data.corpus)[: spec["max_documents"]])
        data = RetrievalData({d: t for d, t in data.corpus.items() if d in keep}, data.queries, {"test": test})
    model = load_backend_model(spec["backend"])
    start = time.perf_counter()
    metrics = evaluate_retrieval_splits(model, data, ("test",), max_queries=max_queries, batch_size=BATCH_SIZE)["test"]
    return {"stage": "quality", "backend": spec["backend"], "data": QUERY_SET, "split": "test",
            "ndcg_at_10": metrics["ndcg_at_10"], "recall_at_100": metrics.get("recall_at_100"),
            "num_queries": metrics["num_queries"], "num_documents": metrics["num_documents"],
            "seconds": time.perf_counter() - start, "threads": spec["threads"]}


# --- the CLI at scale ---------------------------------------------------------------------------


def cli_corpus(data_dir: str | None, documents: int, folder: Path) -> dict:
    """A BEIR folder of ``documents`` real documents for the ``cli`` stage, written once into
    ``folder``: SciFact's corpus first (with its queries and train / test judgements, so ``mine``
    has pairs and judged documents and ``search`` real queries), then the sentences of SciFact's and
    NFCorpus's documents (``MIN_SENTENCE_WORDS`` words or more), repeated in order as needed: real
    text, shorter than a whole document, and, beyond the distinct sentences, repeated."""
    done = folder / "corpus.json"
    if done.is_file():
        return json.loads(done.read_text(encoding="utf-8"))
    query_set = load_query_set(data_dir)
    if documents < len(query_set.corpus):
        raise ValueError(f"documents: at least SciFact's {len(query_set.corpus)} documents, got {documents}")
    _, texts = real_documents(data_dir)
    sentences = [s for text in texts for s in re.split(r"(?<=[.!?])\s+", text) if len(s.split()) >= MIN_SENTENCE_WORDS]
    folder.mkdir(parents=True, exist_ok=True)
    with open(folder / "corpus.jsonl.partial", "w", encoding="utf-8") as handle:
        handle.writelines(json.dumps({"_id": doc_id, "title": "", "text": text}) + "\n"
                          for doc_id, text in query_set.corpus.items())
        handle.writelines(json.dumps({"_id": f"s{i}", "title": "", "text": sentences[i % len(sentences)]}) + "\n"
                          for i in range(documents - len(query_set.corpus)))
    os.replace(folder / "corpus.jsonl.partial", folder / "corpus.jsonl")
    with open(folder / "queries.jsonl", "w", encoding="utf-8") as handle:
        handle.writelines(json.dumps({"_id": q, "text": t}) + "\n" for q, t in query_set.queries.items())
    test = query_set.split("test")
    with open(folder / "test_queries.jsonl", "w", encoding="utf-8") as handle:
        handle.writelines(json.dumps({"_id": q, "text": query_set.queries[q]}) + "\n" for q in sorted(test) if q in query_set.queries)
    (folder / "qrels").mkdir(exist_ok=True)
    for split in ("train", "test"):
        rows = [f"{q}\t{d}\t{score}\n" for q, judged in sorted(query_set.split(split).items()) for d, score in judged.items()]
        (folder / "qrels" / f"{split}.tsv").write_text("query-id\tcorpus-id\tscore\n" + "".join(rows), encoding="utf-8")
    lengths = [len(s.split()) for s in sentences]
    info = {"documents": documents, "scifact_documents": len(query_set.corpus), "sentences": documents - len(query_set.corpus),
            "distinct_sentences": min(len(sentences), documents - len(query_set.corpus)),
            "mean_sentence_words": float(np.mean(lengths)), "test_queries": len(test)}
    done.write_text(json.dumps(info, indent=1) + "\n", encoding="utf-8")
    return info


def _proc_mib(pid: int) -> dict[str, float]:
    """``VmHWM`` (peak resident) and ``RssAnon`` (anonymous resident now) of process ``pid`` in MiB;
    empty once it has exited."""
    try:
        with open(f"/proc/{pid}/status", encoding="utf-8") as handle:
            return {line.split(":")[0]: int(line.split()[1]) / 1024 for line in handle
                    if line.startswith(("VmHWM:", "RssAnon:"))}
    except (OSError, ValueError):
        return {}


def _default_sigint() -> None:
    """In the child before it runs: Ctrl-C's default action back. A benchmark started in the
    background (``nohup ... &``) ignores SIGINT, children inherit that, and Python then installs no
    KeyboardInterrupt handler: the interruption would be silently ignored (it was, once)."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def run_cli(argv: list[str], threads: int, interrupt: Callable[[], bool] | None = None) -> dict:
    """Run ``contrastive-bert ARGV`` in a fresh process, sampling its memory every
    ``CLI_SAMPLE_SECONDS``; ``interrupt``: send it SIGINT (Ctrl-C) once this returns True. Its
    seconds, exit status, peak resident and peak anonymous memory, its report lines (what it
    encoded, read back or searched with: ``CLI_REPORT_LINES``) and the end of its output."""
    command = [sys.executable, "-m", "contrastive_bert.cli", *argv]
    start = time.perf_counter()
    process = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                               env={**os.environ, "OMP_NUM_THREADS": str(threads)}, preexec_fn=_default_sigint)
    peak = {"VmHWM": 0.0, "RssAnon": 0.0}
    interrupted = False
    with tempfile.TemporaryFile("w+") as out, tempfile.TemporaryFile("w+") as err:
        pumps = [threading.Thread(target=lambda src=src, dst=dst: dst.writelines(src), daemon=True)
                 for src, dst in ((process.stdout, out), (process.stderr, err))]
        for pump in pumps:
            pump.start()
        while process.poll() is None:
            for field, value in _proc_mib(process.pid).items():
                peak[field] = max(peak[field], value)
            if interrupt is not None and not interrupted and interrupt():
                process.send_signal(signal.SIGINT)
                interrupted = True
            time.sleep(CLI_SAMPLE_SECONDS)
        for pump in pumps:
            pump.join()
        out.seek(0)
        err.seek(0)
        stdout, stderr = out.read(), err.read()
    return {"argv": argv, "seconds": time.perf_counter() - start, "returncode": process.returncode,
            "interrupted": interrupted, "peak_rss_mib": peak["VmHWM"], "peak_anon_mib": peak["RssAnon"],
            "lines": [line for line in stdout.splitlines() if line.startswith(CLI_REPORT_LINES)],
            "stdout_tail": stdout[-2000:], "stderr_tail": stderr[-2000:]}


def _rows_done(folder: Path) -> int:
    from contrastive_bert.embedding_store import read_manifest

    manifest = read_manifest(folder)
    return 0 if manifest is None else int(manifest["rows_done"])


def run_cli_cell(spec: dict) -> dict:
    """``spec["command"]`` run as a user would, on the ``cli_corpus`` of ``spec["documents"]``:

    * ``search``: ``search --corpus corpus.jsonl --index DIR`` for SciFact's test queries,
      interrupted (SIGINT) once ``CLI_INTERRUPT_AT`` of the corpus is encoded, run again (it resumes
      at the first missing chunk), and a third time (the index read back, nothing encoded); the
      resumed and read-back runs must give the same hits. A corpus of one chunk (a dry run) has no
      half-way: it is encoded, then read back;
    * ``mine``: ``mine --dataset FOLDER --embeddings-dir DIR`` for SciFact's train pairs. Where the
      ``search`` cell has run, DIR holds its store (the same corpus, model and backend: the store a
      second ``mine`` would read back), so this cell measures mining alone, not encoding again
      (``store_from_search_cell``).

    Each run's seconds and peak memory (resident, and anonymous: what the process holds beside the
    embeddings mapped from disk)."""
    from contrastive_bert.embedding_store import CHUNK_ROWS

    folder = Path(spec["folder"])
    corpus = cli_corpus(spec["data_dir"], spec["documents"], folder)
    common = ["--model", spec.get("model", "default"), "--model-backend", spec["backend"], "--device", "cpu",
              "--batch-size", str(BATCH_SIZE)]
    work = folder / spec["command"]
    shutil.rmtree(work, ignore_errors=True)  # a cell starts from nothing: an earlier attempt's store would be read back
    work.mkdir(parents=True)
    search_index = folder / "search" / "index"
    runs = {}
    if spec["command"] == "search":
        index = work / "index"
        argv = ["search", "--corpus", str(folder / "corpus.jsonl"), "--index", str(index), "--input",
                str(folder / "test_queries.jsonl"), "--top-k", "10", *common]
        if spec["documents"] > CHUNK_ROWS:  # one chunk has no half-way to stop at (a dry run, a test)
            threshold = int(spec["documents"] * CLI_INTERRUPT_AT)
            runs["interrupted"] = run_cli([*argv, "--output", str(work / "hits_interrupted.jsonl")], spec["threads"],
                                          interrupt=lambda: _rows_done(index) >= threshold)
            runs["interrupted"]["rows_done"] = done = _rows_done(index)
            if runs["interrupted"]["returncode"] == 0 or not 0 < done < spec["documents"]:
                raise RuntimeError(f"search was not interrupted half-way (exit {runs['interrupted']['returncode']}, "
                                   f"{done} of {spec['documents']} documents encoded)")
        first = "resumed" if runs else "encoded"
        runs[first] = run_cli([*argv, "--output", str(work / "hits_first.jsonl")], spec["threads"])
        runs["read_back"] = run_cli([*argv, "--output", str(work / "hits_read_back.jsonl")], spec["threads"])
        for name in (first, "read_back"):
            if runs[name]["returncode"] != 0:
                raise RuntimeError(f"search {name} failed:\n{runs[name]['stderr_tail']}")
        same = (work / "hits_first.jsonl").read_bytes() == (work / "hits_read_back.jsonl").read_bytes()
        rows_mib = (index / "embeddings.npy").stat().st_size / 2**20
        result = {"same_hits_encoded_and_read_back": same,
                  "encoded_line": next((line for line in runs[first]["lines"] if line.startswith("encoded ")), None)}
        for hits in work.glob("hits_*.jsonl"):
            hits.unlink()  # the index stays: the mine cell reads its rows
    else:
        from contrastive_bert.embedding_store import read_manifest, store_folder

        output, stores = work / "mined.jsonl", work / "embeddings"
        manifest = read_manifest(search_index)
        reused = manifest is not None and manifest["rows_done"] == manifest["documents"] == spec["documents"]
        if reused:  # where mine looks for this corpus's store (named by the corpus fingerprint the manifest records)
            stores.mkdir()
            store_folder(stores, manifest["corpus"]).symlink_to(search_index.resolve())
        written = (search_index / "embeddings.npy").stat().st_mtime_ns if reused else None
        runs["mine"] = run_cli(["mine", "--dataset", str(folder), "--output", str(output), "--embeddings-dir", str(stores),
                                "--num-negatives", "1", *common], spec["threads"])
        if runs["mine"]["returncode"] != 0:
            raise RuntimeError(f"mine failed:\n{runs['mine']['stderr_tail']}")
        rows_mib = sum(p.stat().st_size for p in stores.glob("*/embeddings.npy")) / 2**20
        with open(output, encoding="utf-8") as handle:
            result = {"rows_mined": sum(1 for _ in handle), "store_from_search_cell": reused,
                      "store_untouched": reused and (search_index / "embeddings.npy").stat().st_mtime_ns == written}
        shutil.rmtree(work, ignore_errors=True)  # the mined rows and the link: measured, not kept
    return {"stage": "cli", "command": spec["command"], "documents": spec["documents"], "backend": spec["backend"],
            "version": CLI_VERSION, "corpus": corpus, "runs": runs, "rows_mib": rows_mib, **result,
            "peak_rss_mib": max(r["peak_rss_mib"] for r in runs.values()),
            "peak_anon_mib": max(r["peak_anon_mib"] for r in runs.values()),
            "seconds": sum(r["seconds"] for r in runs.values()), "threads": spec["threads"], "load_average": os.getloadavg()[0]}


CELLS = {"index": run_index_cell, "mine": run_mine_cell, "encode": run_encode_cell, "quality": run_quality_cell,
         "cli": run_cli_cell}


def run_cell(spec: dict) -> dict:
    """One cell of ``spec["stage"]`` in this (fresh) process."""
    return CELLS[spec["stage"]](spec)


# --- growth, summary, figure --------------------------------------------------------------------


def growth_exponent(sizes: list[float], values: list[float]) -> float | None:
    """The least-squares slope of log(value) against log(size) over the positive points (None with
    fewer than two distinct sizes): value ~ size ** slope."""
    points = [(s, v) for s, v in zip(sizes, values) if s and v is not None and s > 0 and v > 0]
    if len({s for s, _ in points}) < 2:
        return None
    x = np.log([s for s, _ in points])
    y = np.log([v for _, v in points])
    return float(np.polyfit(x, y, 1)[0])


def power_fit(sizes: list[float], values: list[float], at: float) -> float | None:
    """The fitted power law value ~ a * size ** b evaluated at ``at`` (None without a fit)."""
    points = [(s, v) for s, v in zip(sizes, values) if s > 0 and v is not None and v > 0]
    if len({s for s, _ in points}) < 2:
        return None
    slope, intercept = np.polyfit(np.log([s for s, _ in points]), np.log([v for _, v in points]), 1)
    return float(math.exp(intercept + slope * math.log(at)))


#: (stage, series name, size field, seconds field, variant field) of every line in the growth table.
SERIES = (
    ("encode", "encode", "documents", "seconds", "backend"),
    ("index", "build", "size", "build_seconds", "index_type"),
    ("index", "search", "size", "query_seconds", "index_type"),
    ("mine", "mine", "size", "seconds", "index_type"),
    ("mine", "mine_search", "size", "seconds_without_query_encoding", "index_type"),
)


def growth(cells: dict[str, list[dict]]) -> list[dict]:
    """One entry per (series, variant) with two or more sizes: sizes, seconds, memory and the
    fitted exponents of seconds, peak RSS and the stage's own memory."""
    out = []
    for stage, name, size_field, seconds_field, variant_field in SERIES:
        variants = sorted({c[variant_field] for c in cells.get(stage, [])})
        for variant in variants:
            if name == "build" and variant == "flat":
                continue  # exact search builds nothing
            mine = sorted((c for c in cells[stage] if c[variant_field] == variant and c.get(seconds_field) is not None),
                          key=lambda c: c[size_field])  # a record of an older version may lack a field
            if not mine:
                continue
            sizes = [c[size_field] for c in mine]
            seconds = [c[seconds_field] for c in mine]
            entry = {"series": name, "stage": stage, "variant": variant, "sizes": sizes, "seconds": seconds,
                     "peak_rss_mib": [c["peak_rss_mib"] for c in mine], "stage_mib": [c["stage_mib"] for c in mine],
                     "seconds_exponent": growth_exponent(sizes, seconds),
                     "peak_rss_exponent": growth_exponent(sizes, [c["peak_rss_mib"] for c in mine]),
                     "stage_memory_exponent": growth_exponent(sizes, [max(c["stage_mib"], 0.0) for c in mine])}
            out.append(entry)
    return out


def hnsw_estimate(index_cells: list[dict], size: int) -> float | None:
    """Build seconds of HNSW at ``size``: the HNSW index cell of that size when there is one, else a
    power law through the HNSW index cells at other sizes (linear in size through one); None
    without any."""
    done = sorted((c for c in index_cells if c["index_type"] == "hnsw"), key=lambda c: c["size"])
    same = [c for c in done if c["size"] == size]
    if same:
        return same[-1]["build_seconds"]
    if not done:
        return None
    fitted = power_fit([c["size"] for c in done], [c["build_seconds"] for c in done], size)
    return fitted if fitted is not None else done[-1]["build_seconds"] * size / done[-1]["size"]


def hnsw_cap(index_cells: list[dict], stage: str, size: int, cap_minutes: float) -> dict | None:
    """The note that an HNSW cell of ``stage`` at ``size`` is not run, when its build is estimated
    (:func:`hnsw_estimate`) above ``cap_minutes``; None when it may run."""
    estimate = hnsw_estimate(index_cells, size)
    if estimate is None or estimate <= cap_minutes * 60:
        return None
    return {"stage": stage, "size": size, "index_type": "hnsw", "estimated_build_seconds": estimate,
            "reason": f"HNSW build estimated at {estimate / 60:.0f} min (from the HNSW index cells), above "
                      f"--hnsw-cap-minutes {cap_minutes:g}: not run"}


def _settings(record: dict) -> dict:
    """The settings a run-log record was run with: its key (the JSON the runner keyed it by: a cli
    cell's ``version`` lives only there), then the record's own fields."""
    try:
        key = json.loads(record.get("key", ""))
    except ValueError:  # a hand-named key, not the runner's JSON
        key = {}
    return {**(key if isinstance(key, dict) else {}), **record}


def current_onnx_sessions(encode_cells: list[dict]) -> tuple[list[dict], int]:
    """The encode cells with each onnx cell of an older session (:data:`ONNX_SESSION`) dropped where
    the current session measured the same backend and size, and marked ``onnx_memory_pattern`` where
    it has not yet; and how many were dropped."""
    def current(cell: dict) -> bool:
        return cell["backend"] not in ONNX_BACKENDS or _settings(cell).get("onnx_session") == ONNX_SESSION

    measured = {(c["backend"], c["documents"]) for c in encode_cells if current(c)}
    kept = [c if current(c) else {**c, "onnx_memory_pattern": True} for c in encode_cells
            if current(c) or (c["backend"], c["documents"]) not in measured]
    return kept, len(encode_cells) - len(kept)


def summarize(records: list[dict], dry_run: bool = False) -> dict:
    """The run log's cells of one mode (real or dry), grouped by stage, with growth, the 1M
    extrapolation of encoding and the quality per backend."""
    cells: dict[str, list[dict]] = {stage: [] for stage in STAGES}
    superseded = 0
    for record in records:
        if bool(record.get("dry_run")) != dry_run:
            continue
        if record.get("stage") not in cells:
            superseded += 1  # the first version's cells (rows in memory, no stage in the key)
            continue
        if record["stage"] == "cli" and _settings(record).get("version") != CLI_VERSION:
            superseded += 1  # measured before the fixes CLI_VERSION names
            continue
        if record["stage"] == "mine" and record.get("search_chunk") != _mining_version()["search_chunk"]:
            superseded += 1  # mined with another query block of the miner's search (256 was FAISS's slow path)
            continue
        cells[record["stage"]].append(record)
    cells["encode"], replaced = current_onnx_sessions(cells["encode"])
    superseded += replaced
    order = {"index": lambda c: (c["size"], INDEX_TYPES.index(c["index_type"])),
             "mine": lambda c: (c["size"], INDEX_TYPES.index(c["index_type"])),
             "encode": lambda c: (BACKENDS.index(c["backend"]), c["documents"]),
             "quality": lambda c: BACKENDS.index(c["backend"]),
             "cli": lambda c: (c["documents"], CLI_COMMANDS.index(c["command"]))}
    for stage, key in order.items():
        cells[stage].sort(key=key)
    extrapolated = {}
    for backend in BACKENDS:
        mine = [c for c in cells["encode"] if c["backend"] == backend]
        if not mine:
            continue
        largest = max(mine, key=lambda c: c["documents"])
        fitted = power_fit([c["documents"] for c in mine], [c["seconds"] for c in mine], EXTRAPOLATE_TO)
        extrapolated[backend] = {
            "documents": EXTRAPOLATE_TO, "extrapolated": True,
            "seconds_from_largest_cell": EXTRAPOLATE_TO / largest["documents_per_second"],
            "hours_from_largest_cell": EXTRAPOLATE_TO / largest["documents_per_second"] / 3600,
            "seconds_from_power_fit": fitted, "largest_cell_documents": largest["documents"],
            "how": "extrapolated, not measured: 1,000,000 / the documents per second of the largest cell; and the power law "
                   "fitted to every cell of this backend, evaluated at 1,000,000"}
    quality = {c["backend"]: {"ndcg_at_10": c["ndcg_at_10"]} for c in cells["quality"]}
    if "torch" in quality:
        for backend, entry in quality.items():
            entry["minus_torch"] = entry["ndcg_at_10"] - quality["torch"]["ndcg_at_10"]
            entry["loss_under_half_a_point"] = entry["minus_torch"] > -0.5
    largest_cli = max((c["documents"] for c in cells["cli"]), default=None)
    cli = {c["command"]: c for c in cells["cli"] if c["documents"] == largest_cli}
    if cli:
        cli["totals"] = cli_totals(cli)
    return {"cells": cells, "growth": growth(cells), "encoding_extrapolated": extrapolated, "quality": quality,
            "largest": largest_cells(cells), "cli": cli, "superseded_records": superseded}


def cli_totals(cli: dict[str, dict]) -> dict:
    """What the README says of the cli stage (its cells at the largest corpus, by command): the
    seconds ``search`` spent encoding (every run before the read-back: interrupted and resumed, or
    one), the read-back's and ``mine``'s seconds, where the interruption stopped, and the largest peak
    memory of any process, anonymous and resident."""
    search, mine = cli.get("search"), cli.get("mine")
    cells = [c for c in (search, mine) if c is not None]
    totals = {"documents": cells[0]["documents"], "peak_anon_mib": max(c["peak_anon_mib"] for c in cells),
              "peak_rss_mib": max(c["peak_rss_mib"] for c in cells), "rows_mib": cells[0]["rows_mib"]}
    if search is not None:
        runs = search["runs"]
        totals.update(search_encode_seconds=sum(r["seconds"] for name, r in runs.items() if name != "read_back"),
                      read_back_seconds=runs["read_back"]["seconds"], interrupted_at=runs.get("interrupted", {}).get("rows_done"),
                      same_hits=search["same_hits_encoded_and_read_back"])
    if mine is not None:
        totals["mine_seconds"] = mine["runs"]["mine"]["seconds"]
    return totals


def largest_cells(cells: dict[str, list[dict]]) -> dict:
    """What the README quotes: for ``index`` and ``mine``, each index type's cell at the largest size
    measured (``size``: that size); for ``encode``, each backend's documents per second at the largest
    size every backend reached, and its speed relative to torch there."""
    largest: dict = {}
    for stage in ("index", "mine"):
        if cells[stage]:
            size = max(c["size"] for c in cells[stage])
            largest[stage] = {"size": size, **{c["index_type"]: c for c in cells[stage] if c["size"] == size}}
    backends = {c["backend"] for c in cells["encode"]}
    shared = [n for n in {c["documents"] for c in cells["encode"]}
              if all(any(c["backend"] == b and c["documents"] == n for c in cells["encode"]) for b in backends)]
    if shared:
        size = max(shared)
        rate = {c["backend"]: c["documents_per_second"] for c in cells["encode"] if c["documents"] == size}
        largest["encode"] = {"documents": size, **{b: {"documents_per_second": r, "vs_torch": r / rate["torch"] if "torch" in rate else None}
                                                   for b, r in rate.items()}}
    return largest


def plot(summary: dict, path: Path) -> None:
    """Seconds, peak RSS and the stage's own memory against corpus size (log-log), one line per
    stage and variant (encoding: documents encoded; the others: documents in the corpus); each
    label carries its fitted slope (the growth exponent)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    if not summary["growth"]:
        return
    colors = {"encode": "tab:green", "build": "tab:orange", "search": "tab:blue", "mine": "tab:red", "mine_search": "tab:purple"}
    styles = {"torch": "-", "torch-bf16": "-.", "onnx": "--", "onnx-int8": ":", "flat": "-", "ivf": "--", "hnsw": ":"}
    panels = (("seconds", "seconds_exponent", "seconds (search: 1,000 queries; mine: 1,000 pairs; encode: all)"),
              ("peak_rss_mib", "peak_rss_exponent", "peak RSS of the cell (MiB; mapped rows read included)"),
              ("stage_mib", "stage_memory_exponent", "the stage's own memory (MiB: peak anonymous - before)"))
    fig, axes = plt.subplots(1, 3, figsize=(18, 5.5))
    for ax, (field, exponent, label) in zip(axes, panels):
        for entry in summary["growth"]:
            name = entry["series"]
            if field != "seconds" and name in ("build", "mine_search"):
                continue  # these share a cell with search / mine: its memory is drawn once
            if field != "seconds" and name == "search":
                name = "index"
            slope = entry[exponent]
            ax.plot(entry["sizes"], [max(v, 1e-4) for v in entry[field]], styles.get(entry["variant"], "-"), marker="o",
                    color=colors[entry["series"]],
                    label=f"{name} {entry['variant']}" + ("" if slope is None else f" (slope {slope:.2f})"))
        ax.set_xscale("log")
        ax.set_yscale("log")
        ax.set_xlabel("corpus size (documents)")
        ax.set_ylabel(label)
        ax.grid(True, which="both", alpha=0.3)
        ax.legend(fontsize=7, loc="best")
    fig.suptitle("Cost against corpus size (log-log; slope = growth exponent; "
                 f"{'dry run, numbers meaningless' if summary.get('dry_run') else 'this machine'})")
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def capped_cells(summary: dict, sizes: list[int], cap_minutes: float) -> list[dict]:
    """The notes of the HNSW cells (index and mine) at ``sizes`` that have no record because their
    build is estimated above ``cap_minutes``."""
    notes = []
    for stage in ("index", "mine"):
        for size in sorted(set(sizes)):
            if any(c["index_type"] == "hnsw" and c["size"] == size for c in summary["cells"][stage]):
                continue
            note = hnsw_cap(summary["cells"]["index"], stage, size, cap_minutes)
            if note is not None:
                notes.append(note)
    return notes


def assemble(log: RunLog, base: dict | None, args, unavailable: dict[str, str]) -> dict:
    from contrastive_bert.vector_index import resolve_index_type

    real = sum(store["rows"] for store in base["documents"]) if base else None
    summary = summarize(log.records(), dry_run=bool(args.dry_run))
    capped = capped_cells(summary, [*SIZES, *(args.sizes if not args.dry_run else [])], args.hnsw_cap_minutes)
    return {
        "benchmark": "bench_scale",
        "protocol": {
            "documents": f"index and mine: the real document embeddings of {' and '.join(CORPORA)} ({real} rows, bundled "
                         f"all-MiniLM-L6-v2, 256 tokens) first; beyond them copies of the real rows, each moved by Gaussian "
                         f"noise of norm {args.noise} and normalised again (tiled with small noise, not real documents), "
                         "written once to a store on disk and memory-mapped by every cell",
            "real_rows": real,
            "encode_documents": f"the real texts of {' and '.join(CORPORA)}, repeated in order as needed; encoded into a "
                                f"store on disk (encode_corpus, batch {BATCH_SIZE})",
            "queries": f"the first {args.queries} {QUERY_SET} queries (sorted ids, every split), encoded by the same model",
            "mining": f"contrastive_bert.corpus_mining.mine_corpus_negatives on the first {args.pairs} (query, relevant "
                      f"document) pairs of {QUERY_SET} (every split), 4 negatives of the top 100, perc_pos 0.95; seconds "
                      "include encoding the queries (query_encode_seconds)",
            "quality": f"{QUERY_SET} test nDCG@10 (x100), evaluate_retrieval_splits (MTEB protocol, exact search)",
            "search": "top-100 inner product of unit rows; recall@k against exact search (faiss.knn) on every query",
            "index_settings": "ivf: sqrt(N) lists, nprobe 32; hnsw: M 32, efConstruction 40, efSearch 128 "
                              "(contrastive_bert.vector_index defaults, those of mine and search)",
            "auto_index_type": {str(size): resolve_index_type("auto", size) for size in SIZES},
            "memory": "peak_rss_mib: the cell process's peak RSS (VmHWM; the mapped rows it read count, though the OS may "
                      "drop them); peak_anon_mib: its largest anonymous resident memory (sampled every 20 ms); stage_mib: "
                      "that peak minus the anonymous memory before the stage (an approximate index's own copy of the rows "
                      "(index_copy_mib) and its links or lists, the search's buffers, mining's maps)",
            "growth": "least-squares slope of log(seconds) / log(memory) against log(size) per stage and variant",
            "hnsw_cap_minutes": args.hnsw_cap_minutes,
            "one_process_per_cell": True,
        },
        "dry_run": bool(args.dry_run),
        "base": base,
        **summary,
        "capped": capped,
        "backends_unavailable": unavailable,
    }


# --- the plan -----------------------------------------------------------------------------------


def _positive(values: list[int], flag: str) -> list[int]:
    bad = [v for v in values if v < 1]
    if bad:
        raise ValueError(f"{flag}: expected positive sizes, got {bad}")
    return values


def _mining_version() -> dict:
    """What the mining cells' key records of the miner: its query block (``SEARCH_CHUNK``), so cells
    measured with another block are not skipped as done nor summarised with these."""
    from contrastive_bert.corpus_mining import SEARCH_CHUNK

    return {"search_chunk": SEARCH_CHUNK}


def cell_keys(args, stage: str) -> list[tuple[dict, dict]]:
    """``(key, spec)`` of every cell of ``stage`` the flags ask for (sizes as given; a dry run's shrunk)."""
    dry = {"dry_run": True} if args.dry_run else {}
    out = []
    if stage in ("index", "mine"):
        for size in args.sizes:
            size = max(size // DRY_RUN_DIVISOR, 100) if args.dry_run else size
            for index_type in args.index_types:
                key = {"stage": stage, "size": size, "index_type": index_type, "threads": args.threads, "noise": args.noise,
                       **({"queries": args.queries} if stage == "index" else {"pairs": args.pairs, **_mining_version()}), **dry}
                out.append((key, {"stage": stage, "size": size, "index_type": index_type, "threads": args.threads,
                                  "queries_used": args.queries, "pairs": args.pairs, "data_dir": args.data_dir}))
    elif stage == "encode":
        for backend in args.backends:
            for documents in args.encode_sizes:
                documents = max(documents // DRY_RUN_DIVISOR, 10) if args.dry_run else documents
                key = {"stage": "encode", "documents": documents, "backend": backend, "threads": args.threads,
                       "batch_size": BATCH_SIZE, **({"onnx_session": ONNX_SESSION} if backend in ONNX_BACKENDS else {}), **dry}
                out.append((key, {"stage": "encode", "documents": documents, "backend": backend, "threads": args.threads,
                                  "data_dir": args.data_dir, "scratch": str(Path(args.cache_dir) / "scratch")}))
    elif stage == "cli":
        documents = DRY_RUN_CLI_DOCUMENTS if args.dry_run else CLI_DOCUMENTS
        for command in CLI_COMMANDS:
            key = {"stage": "cli", "command": command, "documents": documents, "backend": CLI_BACKEND, "threads": args.threads,
                   "batch_size": BATCH_SIZE, "version": CLI_VERSION, **dry}
            out.append((key, {"stage": "cli", "command": command, "documents": documents, "backend": CLI_BACKEND,
                              "threads": args.threads, "data_dir": args.data_dir,
                              "folder": str(Path(args.cache_dir) / f"cli-{documents}")}))
    else:
        for backend in args.backends:
            key = {"stage": "quality", "backend": backend, "data": QUERY_SET, "split": "test", **dry}
            spec = {"stage": "quality", "backend": backend, "threads": args.threads, "data_dir": args.data_dir}
            if args.dry_run:
                spec.update(max_queries=DRY_RUN_QUALITY_QUERIES, max_documents=DRY_RUN_QUALITY_DOCUMENTS)
            out.append((key, spec))
    return out


def run_subprocess(spec: dict, threads: int) -> dict:
    """Run one cell in a fresh process; its record (the last line it prints)."""
    done = subprocess.run([sys.executable, __file__, "--cell", json.dumps(spec)], capture_output=True, text=True,
                          env={**os.environ, "OMP_NUM_THREADS": str(threads)})
    if done.returncode != 0:
        raise RuntimeError(f"cell {spec['stage']} failed:\n{done.stderr[-3000:]}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def _report(record: dict) -> str:
    memory = f"peak RSS {record['peak_rss_mib']:.0f} MiB, own {record['stage_mib']:.0f} MiB" if "stage_mib" in record else ""
    if record["stage"] == "index":
        return (f"index {record['index_type']} {record['size']}: build {record['build_seconds']:.1f} s, {record['queries']} queries "
                f"{record['query_seconds']:.2f} s, recall@10 {record['recall_at_10']:.3f}, @100 {record['recall_at_100']:.3f}, {memory}")
    if record["stage"] == "mine":
        return (f"mine {record['index_type']} {record['size']}: {record['seconds']:.1f} s for {record['pairs']} pairs "
                f"({record['kept']} kept), {memory}")
    if record["stage"] == "cli":
        runs = ", ".join(f"{name} {run['seconds']:.0f} s" for name, run in record["runs"].items())
        return (f"cli {record['command']} {record['documents']}: {runs}; peak RSS {record['peak_rss_mib']:.0f} MiB, "
                f"anonymous {record['peak_anon_mib']:.0f} MiB, rows {record['rows_mib']:.0f} MiB")
    if record["stage"] == "encode":
        return (f"encode {record['backend']} {record['documents']}: {record['documents_per_second']:.1f} documents/s, {memory}")
    return f"quality {record['backend']}: SciFact test nDCG@10 {record['ndcg_at_10']:.2f}"


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter)
    add_common_arguments(parser, output=RESULTS / "scale.json", run_log=RESULTS / "scale_runs.jsonl")
    parser.add_argument("--stages", nargs="+", choices=STAGES, default=list(STAGES), help="stages to run, in this order (default: all)")
    parser.add_argument("--sizes", type=int, nargs="+", default=list(SIZES), help=f"corpus sizes of index and mine (default: {SIZES})")
    parser.add_argument("--encode-sizes", type=int, nargs="+", default=list(ENCODE_SIZES),
                        help=f"documents encoded by the encode stage (default: {ENCODE_SIZES})")
    parser.add_argument("--index-types", nargs="+", choices=INDEX_TYPES, default=list(INDEX_TYPES))
    parser.add_argument("--backends", nargs="+", choices=BACKENDS, default=None,
                        help="backends of encode and quality (default: every one this install can load; one named "
                             "here that cannot load is an error)")
    parser.add_argument("--cache-dir", default=str(CACHE), help=f"where the encoded and tiled rows are kept (default: {CACHE})")
    parser.add_argument("--noise", type=float, default=NOISE, help=f"norm of the noise moving each tiled copy (default: {NOISE})")
    parser.add_argument("--queries", type=int, default=QUERIES, help=f"queries searched by the index stage (default: {QUERIES})")
    parser.add_argument("--pairs", type=int, default=PAIRS, help=f"(query, document) pairs mined for (default: {PAIRS})")
    parser.add_argument("--hnsw-cap-minutes", type=float, default=HNSW_CAP_MINUTES,
                        help=f"skip (and note) an HNSW cell whose build is estimated above this (default: {HNSW_CAP_MINUTES:g})")
    parser.add_argument("--cell", default=None, help=argparse.SUPPRESS)  # internal: one cell, in a fresh process
    args = parser.parse_args(argv)
    if args.cell is not None:
        print(json.dumps(run_cell(json.loads(args.cell))))
        return
    setup_from_args(args)
    _positive(args.sizes, "--sizes")
    _positive(args.encode_sizes, "--encode-sizes")
    _positive([args.queries, args.pairs], "--queries/--pairs")
    if args.noise < 0:
        raise ValueError(f"--noise: expected a norm >= 0, got {args.noise}")
    if args.hnsw_cap_minutes <= 0:
        raise ValueError(f"--hnsw-cap-minutes: expected a positive number, got {args.hnsw_cap_minutes}")
    if args.dry_run:
        args.queries, args.pairs = min(args.queries, DRY_RUN_QUERIES), min(args.pairs, DRY_RUN_QUERIES)
        scratch = Path(tempfile.gettempdir()) / "bench_scale_dry_run"
        if Path(args.output) == RESULTS / "scale.json":  # a smoke run never writes under eval/results
            args.output = str(scratch / "scale.json")
        if Path(args.run_log) == RESULTS / "scale_runs.jsonl":
            args.run_log = str(scratch / "scale_runs.jsonl")
        logger.info("dry run: results in %s, run log %s", args.output, args.run_log)
    unavailable = {b: problem for b in BACKENDS if (problem := backend_problem(b)) is not None}
    if args.backends is None:
        args.backends = [b for b in BACKENDS if b not in unavailable]
        for backend, problem in unavailable.items():
            logger.warning("backend %s left out: %s", backend, problem)
    else:
        asked = [b for b in args.backends if b in unavailable]
        if asked and any(stage in args.stages for stage in ("encode", "quality")):
            raise ValueError(f"--backends: {', '.join(asked)} cannot run here: {unavailable[asked[0]]}")
    log = RunLog(args.run_log)
    output = Path(args.output)
    base_file = Path(args.cache_dir) / "base.json"
    base = json.loads(base_file.read_text(encoding="utf-8")) if base_file.is_file() else None

    def write() -> None:
        summary = assemble(log, base, args, unavailable)
        write_results(output, summary, device=args.device)
        plot(summary, output.with_suffix(".png"))

    if args.summary_only:
        write()
        return
    if any(stage in args.stages for stage in ("index", "mine")):
        base = encode_base(args)
        Path(args.cache_dir).mkdir(parents=True, exist_ok=True)
        base_file.write_text(json.dumps(base, indent=1) + "\n", encoding="utf-8")
    mode = log.of_mode(args.dry_run)
    for stage in args.stages:
        for key, spec in cell_keys(args, stage):
            if log.done(key):
                logger.info("done before: %s", key)
                continue
            kind = (f"{stage}-{spec.get('command', '')}{spec.get('size', spec.get('documents', ''))}-"
                    f"{spec.get('index_type', spec.get('backend'))}")
            if not args.budget.allows(kind):
                break
            if spec.get("index_type") == "hnsw":
                index_cells = [r for r in mode.values() if r.get("stage") == "index" and r.get("threads") == args.threads]
                note = hnsw_cap(index_cells, stage, spec["size"], args.hnsw_cap_minutes)
                if note is not None:
                    logger.warning("%s %d: %s", stage, spec["size"], note["reason"])
                    continue
            if stage in ("index", "mine"):
                spec["rows"] = str(tiled_store([s["folder"] for s in base["documents"]], spec["size"], args.noise, args.cache_dir))
                spec["queries"] = base["queries"]["folder"]
            start = time.perf_counter()
            record = run_subprocess(spec, args.threads)
            seconds = time.perf_counter() - start
            args.budget.record(kind, seconds)
            record = log.append(key, {**record, "cell_seconds": seconds, "dry_run": bool(args.dry_run)})
            mode[record["key"]] = record
            logger.info("%s", _report(record))
            write()
    write()


if __name__ == "__main__":
    main()
