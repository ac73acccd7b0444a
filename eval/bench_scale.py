"""The index at scale: build time, query time, peak memory and recall of approximate search
(FAISS IVF, HNSW) against exact search (``flat``), at 10,000 and 100,000 documents.

Documents: the real documents of SciFact and NFCorpus (8,816), encoded once by the bundled
all-MiniLM-L6-v2 (256 tokens) into stores under ``--cache-dir``
(:func:`contrastive_bert.embedding_store.encode_corpus`: resumable, read back by later runs);
beyond 8,816 rows the real rows are tiled, each copy moved by Gaussian noise of norm ``--noise``
(0.5: cosine about 0.89 to its original) and normalised again, so a size above the real corpus has
near-duplicate clusters that a real corpus of that size would not: the JSON says which rows are
real. Queries: the first 1,000 SciFact queries (sorted ids, every split), encoded the same way.

Each (size, index type) cell runs in a fresh process (:class:`contrastive_bert.vector_index.VectorIndex`,
``--threads`` threads): the index build in seconds (``flat`` has none: FAISS's exact search runs
over the rows where they lie), the seconds of a top-100 search for the 1,000 queries, the peak
resident memory of the process and its increase over the rows alone (the index's own memory and
the search's), and recall@10 / recall@100 against exact search on all 1,000 queries (IVF at
``nprobe`` 32, HNSW at ``efSearch`` 128: the defaults of ``mine`` and ``search``).

Resumable: each finished cell is appended to ``scale_runs.jsonl``; ``scale.json`` is rebuilt after
every cell.

    OMP_NUM_THREADS=1 .venv/bin/python eval/bench_scale.py --sizes 10000 --threads 1
    OMP_NUM_THREADS=2 nohup .venv/bin/python eval/bench_scale.py --threads 2 > scale.log 2>&1 &   # 10k and 100k
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

from contrastive_bert.benchmarking import RunLog, add_common_arguments, setup_from_args, write_results

logger = logging.getLogger("bench_scale")

RESULTS = Path(__file__).parent / "results"
CACHE = Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache")) / "contrastive_bert" / "bench_scale_embeddings"
SIZES = (10_000, 100_000)
INDEX_TYPES = ("flat", "ivf", "hnsw")
CORPORA = ("scifact", "nfcorpus")
QUERY_SET = "scifact"
QUERIES = 1_000
NOISE = 0.5


def _status_mib(field: str) -> float:
    """``VmRSS`` (resident now) or ``VmHWM`` (peak resident) of this process in MiB. The peak is read
    here, not from ``ru_maxrss``, which a process started by ``fork`` + ``exec`` inherits from its parent."""
    with open("/proc/self/status", encoding="utf-8") as handle:
        for line in handle:
            if line.startswith(f"{field}:"):
                return int(line.split()[1]) / 1024
    raise ValueError(f"field: /proc/self/status has no {field}")


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
        encoded = encode_corpus(model, ids, texts, folder=folder, batch_size=64, if_other="replace", show_progress_bar=True)
        stores.append({"corpus": name, "folder": str(folder), "rows": len(encoded), "encoded_rows": encoded.encoded_rows,
                       "seconds": time.perf_counter() - start})
        if name == QUERY_SET:
            query_ids = sorted({q for split in data.qrels.values() for q in split if q in data.queries})[: args.queries]
            query_texts = [data.queries[q] for q in query_ids]
            folder = Path(args.cache_dir) / f"queries-{corpus_fingerprint(query_ids, query_texts)[:16]}"
            encoded_queries = encode_corpus(model, query_ids, query_texts, folder=folder, kind="query", if_other="replace")
            queries = {"corpus": name, "folder": str(folder), "rows": len(encoded_queries)}
    return {"documents": stores, "queries": queries}


def tiled_rows(base: np.ndarray, size: int, noise: float, seed: int = 0) -> np.ndarray:
    """(size, d) unit rows: ``base`` first, then copies of it (in order, cycling) each moved by
    Gaussian noise of norm ``noise`` and normalised again."""
    if size <= len(base):
        return np.ascontiguousarray(base[:size])
    rows = np.empty((size, base.shape[1]), dtype=np.float32)
    rows[: len(base)] = base
    rng = np.random.default_rng(seed)
    for start in range(len(base), size, len(base)):
        end = min(start + len(base), size)
        moved = rng.standard_normal((end - start, base.shape[1])).astype(np.float32)
        moved *= noise / np.linalg.norm(moved, axis=1, keepdims=True)
        moved += base[: end - start]
        rows[start:end] = moved / np.linalg.norm(moved, axis=1, keepdims=True)
    return rows


def run_cell(spec: dict) -> dict:
    """One (size, index type) cell, in this (fresh) process: build, search, memory, recall."""
    import faiss
    import torch

    from contrastive_bert.vector_index import VectorIndex

    torch.set_num_threads(spec["threads"])
    faiss.omp_set_num_threads(spec["threads"])
    base = np.concatenate([np.load(Path(folder) / "embeddings.npy") for folder in spec["documents"]])
    queries = np.ascontiguousarray(np.load(Path(spec["queries"]) / "embeddings.npy"))
    rows = tiled_rows(base, spec["size"], spec["noise"])
    del base
    rows_mib = _status_mib("VmRSS")
    index = VectorIndex(rows, spec["index_type"], backend="faiss")
    start = time.perf_counter()
    index.build()
    build_seconds = time.perf_counter() - start
    start = time.perf_counter()
    _, found = index.search(queries, 100)
    query_seconds = time.perf_counter() - start
    peak_mib = _status_mib("VmHWM")
    _, exact = index.exact_search(queries, 100)
    recall = {}
    for k in (10, 100):
        hits = [len(set(a[:k].tolist()) & set(e[:k].tolist())) for a, e in zip(found, exact)]
        recall[f"recall_at_{k}"] = float(np.mean(hits)) / k
    setting = {}
    if index.index_type == "ivf":
        setting = {"nprobe": index.nprobe, "nlist": int(index.build()._faiss_index.nlist)}
    elif index.index_type == "hnsw":
        setting = {"ef_search": index.ef_search, "hnsw_m": index.hnsw_m}
    return {"size": spec["size"], "index_type": spec["index_type"], "index": index.describe(), **setting,
            "build_seconds": build_seconds, "query_seconds": query_seconds, "queries": len(queries),
            "queries_per_second": len(queries) / query_seconds, "peak_rss_mib": peak_mib, "rows_rss_mib": rows_mib,
            "index_and_search_mib": peak_mib - rows_mib, "rows_mib": rows.nbytes / 2**20, **recall,
            "threads": spec["threads"]}


def assemble(log: RunLog, base: dict | None, args) -> dict:
    records = sorted(log.of_mode(False).values(), key=lambda r: (r["size"], INDEX_TYPES.index(r["index_type"])))
    real = sum(store["rows"] for store in base["documents"]) if base else None
    return {
        "benchmark": "bench_scale",
        "protocol": {
            "documents": f"the real document embeddings of {' and '.join(CORPORA)} ({real} rows, bundled all-MiniLM-L6-v2, "
                         f"256 tokens) first; beyond them the real rows tiled, each copy moved by Gaussian noise of norm "
                         f"{args.noise} and normalised again (tiled with small noise, not real documents)",
            "real_rows": real,
            "queries": f"the first {args.queries} {QUERY_SET} queries (sorted ids, every split), encoded by the same model",
            "search": "top-100 inner product of unit rows; recall@k against exact search (faiss.knn) on every query",
            "index_settings": "ivf: sqrt(N) lists, nprobe 32; hnsw: M 32, efConstruction 40, efSearch 128 "
                              "(contrastive_bert.vector_index defaults, those of mine and search)",
            "memory": "peak_rss_mib: the cell process's peak RSS; index_and_search_mib: that peak minus the RSS with the "
                      "rows loaded (the index's copy of the rows, its links or lists, and the search)",
            "one_process_per_cell": True,
        },
        "base": base,
        "cells": records,
    }


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    add_common_arguments(parser, output=RESULTS / "scale.json", run_log=RESULTS / "scale_runs.jsonl")
    parser.add_argument("--sizes", type=int, nargs="+", default=list(SIZES), help=f"corpus sizes (default: {SIZES})")
    parser.add_argument("--index-types", nargs="+", choices=INDEX_TYPES, default=list(INDEX_TYPES))
    parser.add_argument("--cache-dir", default=str(CACHE), help=f"where the encoded documents and queries are kept (default: {CACHE})")
    parser.add_argument("--noise", type=float, default=NOISE, help=f"norm of the noise moving each tiled copy (default: {NOISE})")
    parser.add_argument("--queries", type=int, default=QUERIES, help=f"queries searched (default: {QUERIES})")
    parser.add_argument("--cell", default=None, help=argparse.SUPPRESS)  # internal: one cell, in a fresh process
    args = parser.parse_args(argv)
    if args.cell is not None:
        print(json.dumps(run_cell(json.loads(args.cell))))
        return
    setup_from_args(args)
    if args.dry_run:
        raise ValueError("--dry-run: this benchmark has no training to shorten; use --sizes 10000 --index-types flat for a quick run")
    log = RunLog(args.run_log)
    base_file = Path(args.cache_dir) / "base.json"
    base = json.loads(base_file.read_text()) if base_file.is_file() else None
    if args.summary_only:
        write_results(args.output, assemble(log, base, args), device=args.device)
        return
    base = encode_base(args)
    Path(args.cache_dir).mkdir(parents=True, exist_ok=True)
    base_file.write_text(json.dumps(base, indent=1) + "\n")
    for size in args.sizes:
        for index_type in args.index_types:
            key = {"size": size, "index_type": index_type, "threads": args.threads, "noise": args.noise, "queries": args.queries}
            if log.done(key):
                logger.info("done before: %s", key)
                continue
            if not args.budget.allows(f"{size}-{index_type}"):
                break
            spec = {"size": size, "index_type": index_type, "threads": args.threads, "noise": args.noise,
                    "documents": [store["folder"] for store in base["documents"]], "queries": base["queries"]["folder"]}
            start = time.perf_counter()
            done = subprocess.run([sys.executable, __file__, "--cell", json.dumps(spec)], capture_output=True, text=True,
                                  env={**os.environ, "OMP_NUM_THREADS": str(args.threads)})
            if done.returncode != 0:
                raise RuntimeError(f"cell {key} failed:\n{done.stderr[-3000:]}")
            record = json.loads(done.stdout.strip().splitlines()[-1])
            seconds = time.perf_counter() - start
            args.budget.record(f"{size}-{index_type}", seconds)
            log.append(key, {**record, "seconds": seconds, "dry_run": False})
            logger.info("%s: build %.1f s, 1,000 queries %.2f s, recall@10 %.3f, recall@100 %.3f, peak %.0f MiB",
                        record["index"], record["build_seconds"], record["query_seconds"], record["recall_at_10"],
                        record["recall_at_100"], record["peak_rss_mib"])
            write_results(args.output, assemble(log, base, args), device=args.device)
    write_results(args.output, assemble(log, base, args), device=args.device)


if __name__ == "__main__":
    main()
