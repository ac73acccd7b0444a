"""What every retrieval benchmark run shares: the base model, the training rows (mined once, kept on
disk), the scoring on dev and test with the general-ability block, and the peak memory of training.

``eval/bench_retrieval.py`` (which loss and negatives adapt the model best) and
``eval/bench_memory_budget.py`` (which way of training is best at a fixed micro-batch) both train
on these rows and score with :func:`score`, so their figures compare.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import resource
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch

from contrastive_bert.benchmarking.arguments import DRY_RUN_STEPS
from contrastive_bert.benchmarking.rows_cache import RowsCache

logger = logging.getLogger(__name__)

__all__ = [
    "CORPUS_MINER", "MAX_SEQ_LENGTH", "ROWS_CACHE", "PeakMemory", "RetrievalProtocol", "TrainingRows",
    "add_run_arguments", "base_model", "base_model_files", "chosen_settings", "peak_rss_mb", "relevance_by_text_id",
    "rows_cache_folder", "score",
]

MAX_SEQ_LENGTH = 256
ROWS_CACHE = Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache")) / "contrastive_bert" / "bench_retrieval_rows"
#: our corpus miner's settings for the benchmark rows (the recipes' ``corpus_negatives`` settings)
CORPUS_MINER = {"range_max": 100, "perc_pos": 0.95, "sampling": "top", "batch_size": 64}
METRICS = ("ndcg_at_10", "map_at_100", "mrr_at_10", "recall_at_100")


@dataclass(frozen=True)
class RetrievalProtocol:
    """How a setting trains: its data set, epochs and positives per query. A setting that
    ``follows`` another runs no grid of its own: it trains the other's dev choices."""

    data: str
    epochs: int = 3
    max_positives: int = 4
    follows: str | None = None
    note: str = ""
    dev_queries: int = 0  # queries judged in the dev split (a test checks it against the data)


def add_run_arguments(parser: argparse.ArgumentParser, settings: Sequence[str], default: str = "scifact,nfcorpus_cpu") -> None:
    """The flags a retrieval benchmark's loop adds to the shared ones: ``--max-runs``, ``--rows-cache``, ``--settings``."""
    parser.add_argument("--max-runs", type=int, default=None,
                        help="stop after this many trained runs (a shell loop of --max-runs 1 picks up code changes between runs)")
    parser.add_argument("--rows-cache", default=str(ROWS_CACHE), type=lambda text: None if text == "none" else text, metavar="DIR",
                        help=f"keep mined training rows here between runs ('none': mine in every run) (default: {ROWS_CACHE})")
    parser.add_argument("--settings", default=default,
                        help=f"comma-separated settings among {', '.join(settings)} (default: {default})")


def chosen_settings(args: argparse.Namespace, settings: Sequence[str]) -> list[str]:
    """``--settings`` as a list, each one of ``settings`` (``ValueError`` naming the unknown ones)."""
    chosen = [s for s in args.settings.split(",") if s]
    unknown = [s for s in chosen if s not in settings]
    if unknown:
        raise ValueError(f"--settings: unknown {unknown}; expected some of {list(settings)}")
    return chosen


def base_model(device: str, name: str = "default"):
    """The model to train (default: the bundled all-MiniLM-L6-v2; a hub name or folder otherwise)
    at :data:`MAX_SEQ_LENGTH` tokens (fewer where a small test model has fewer positions). The
    mined rows always come from the bundled model, whatever is trained on them."""
    from contrastive_bert.models import load_model

    model = load_model(name, device=device)
    positions = getattr(getattr(model[0], "auto_model", None), "config", None)
    limit = getattr(positions, "max_position_embeddings", MAX_SEQ_LENGTH)
    model.max_seq_length = min(MAX_SEQ_LENGTH, limit)
    return model


def base_model_files() -> dict[str, Any]:
    """The base model's folder and its files' sizes: what tells one base model from another."""
    from contrastive_bert.models import resolve_model_name

    folder = Path(resolve_model_name("default"))
    return {"folder": str(folder), "files": sorted((str(p.relative_to(folder)), p.stat().st_size)
                                                    for p in folder.rglob("*") if p.is_file())}


def rows_cache_folder(root: str | None, setting: str, protocol: RetrievalProtocol, kind: str,
                      miner: Mapping[str, Any] | None, dry_run: bool) -> Path | None:
    """Where mined training rows are kept between runs (None: pair rows, which cost nothing, or no
    cache). The rows depend only on the data, the frozen base model and the miner settings, so
    every run (and every ``--max-runs 1`` process of a loop) mines once; the folder name hashes
    everything they depend on: the base model's files ($CONTRASTIVE_BERT_DEFAULT_MODEL may swap it) and the
    versions of both miners included."""
    if kind == "pairs":
        return None
    from importlib.metadata import version

    identity = {"setting": setting, "data": protocol.data, "max_positives": protocol.max_positives,
                "kind": kind, "miner": dict(miner or {}), "corpus_miner": CORPUS_MINER if kind == "corpus_mined" else None,
                "max_seq_length": MAX_SEQ_LENGTH, "dry_run": bool(dry_run),
                "model": base_model_files(), "versions": {name: version(name) for name in ("sentence-transformers", "contrastive-bert")}}
    return RowsCache(root).folder(f"{setting}-{kind}", identity)


def st_mined(data, device: str, miner: Mapping[str, Any], max_positives: int):
    """sentence-transformers' ``mine_hard_negatives`` with ``miner``'s settings (candidate range,
    margins, sampling), one negative per pair, over the whole corpus."""
    from sentence_transformers.util import mine_hard_negatives

    from contrastive_bert.data.training_pairs import retrieval_pairs
    from contrastive_bert.topk_search import faiss_available

    pairs = retrieval_pairs(data, "train", max_positives)
    return mine_hard_negatives(pairs, base_model(device), anchor_column_name="anchor", positive_column_name="positive",
                               corpus=list(data.corpus.values()), num_negatives=1, batch_size=64, use_faiss=faiss_available(),
                               output_format="triplet", verbose=False, **miner)


@dataclass
class TrainingRows:
    """What every run of a setting shares: the data and the training rows, mined once per
    process and kept on disk between processes (``args.rows_cache``; None: no cache)."""

    args: argparse.Namespace
    protocols: Mapping[str, RetrievalProtocol]
    data: dict[str, Any] = field(default_factory=dict)
    rows: dict[tuple[str, str, str], Any] = field(default_factory=dict)

    def retrieval(self, setting: str):
        from contrastive_bert.data import load_dataset
        from contrastive_bert.data.beir import RetrievalData

        name = self.protocols[setting].data
        if name not in self.data:
            self.data[name] = RetrievalData.from_splits(load_dataset(name, data_dir=self.args.data_dir))
        return self.data[name]

    def train_rows(self, setting: str, kind: str, miner: Mapping[str, Any] | None = None):
        """``(rows, seconds, cached)``: the training rows (the same for every seed; the trainer
        shuffles them by its seed), the seconds it took to make them (mining included; 0 when made
        earlier in this process) and whether they came from the rows cache (then the seconds are
        the first mining's). ``kind``: ``pairs``, ``st_mined`` or ``corpus_mined``."""
        key = (setting, kind, json.dumps(miner or {}, sort_keys=True))
        if key not in self.rows:
            protocol = self.protocols[setting]
            cache = rows_cache_folder(self.args.rows_cache, setting, protocol, kind, miner, self.args.dry_run)
            hit = RowsCache.load(cache)
            if hit is not None:
                self.rows[key] = (*hit, True)
                logger.info("%s rows of %s from the rows cache %s (mined once in %.0f s)", kind, setting, cache, hit[1])
                return self.rows[key]
            start = time.perf_counter()
            data = self.retrieval(setting)
            if kind == "pairs":
                from contrastive_bert.data.training_pairs import retrieval_pairs

                rows = retrieval_pairs(data, "train", protocol.max_positives)
            elif kind == "st_mined":
                rows = st_mined(data, self.args.device, miner or {}, protocol.max_positives)
            elif kind == "corpus_mined":
                from contrastive_bert.corpus_mining import mine_corpus_negatives

                rows = mine_corpus_negatives(base_model(self.args.device), data, "train", num_negatives=1,
                                             max_positives_per_query=protocol.max_positives, **CORPUS_MINER)
            else:
                raise ValueError(f"rows: unknown training rows {kind!r}")
            seconds = time.perf_counter() - start
            RowsCache.save(cache, rows, seconds, threads=torch.get_num_threads())
            self.rows[key] = (rows, seconds, False)
        return self.rows[key]


def relevance_by_text_id(model, data) -> dict[int, set[int]]:
    """Query text id -> text ids of the documents judged relevant to it in any split, as the queue
    losses id their rows: what lets the queue probe count the queue's false negatives."""
    from contrastive_bert.training.queue_probe import text_ids

    judged = [(q, d) for split in data.qrels.values() for q, docs in split.items() for d, grade in docs.items() if grade > 0]
    queries = sorted({q for q, _ in judged})
    documents = sorted({d for _, d in judged})
    query_ids = dict(zip(queries, text_ids(model, [data.queries[q] for q in queries]).tolist()))
    document_ids = dict(zip(documents, text_ids(model, [data.corpus[d] for d in documents]).tolist()))
    relevant: dict[int, set[int]] = {}
    for q, d in judged:
        relevant.setdefault(query_ids[q], set()).add(document_ids[d])
    return relevant


def score(model, data, args: argparse.Namespace) -> dict[str, Any]:
    """Dev and test retrieval metrics (MTEB protocol, exact search; one corpus encoding) and the
    general-ability block (STS-B, zero-shot Banking77 / emotion / SST-2)."""
    from contrastive_bert.evaluation.beir_evaluation import evaluate_retrieval_splits
    from contrastive_bert.inference.general_ability import general_ability

    eval_rows = DRY_RUN_STEPS * 8 if args.dry_run else None
    metrics = evaluate_retrieval_splits(model, data, ("validation", "test"), max_queries=eval_rows, batch_size=64)
    return {
        "dev": {m: metrics["validation"][m] for m in METRICS},
        "test": {m: metrics["test"][m] for m in METRICS},
        "general": general_ability(model, args.data_dir, max_rows=eval_rows),
    }


def peak_rss_mb() -> float:
    """The process's peak resident memory so far, in MiB (Linux reports KiB)."""
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def _rss_mb() -> float:
    """The process's resident memory now, in MiB."""
    import psutil

    return psutil.Process().memory_info().rss / 2**20


class PeakMemory:
    """The peak memory of a block of code alone (``with PeakMemory() as peak: ...``): on CUDA the
    allocator's peak (reset on entry), else the largest resident set sampled every ``interval``
    seconds (the process's lifetime peak would include mining and evaluation done before it).

    Attributes after the block: ``before_mb`` (resident at entry), ``peak_mb``, ``kind``
    (``"rss"`` or ``"cuda"``). ``sample``: what is sampled on the CPU, in MiB (default: the resident
    set; ``eval/bench_scale.py`` samples the anonymous resident memory, leaving out mapped files)."""

    def __init__(self, device: str = "cpu", interval: float = 0.05, sample: Callable[[], float] | None = None) -> None:
        self.cuda = str(device).startswith("cuda") and torch.cuda.is_available()
        self.kind = "cuda" if self.cuda else "rss"
        self.interval = interval
        self._read = sample or _rss_mb
        self.before_mb = self.peak_mb = 0.0
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def _sample(self) -> None:
        while not self._stop.wait(self.interval):
            self.peak_mb = max(self.peak_mb, self._read())

    def __enter__(self) -> PeakMemory:
        if self.cuda:
            torch.cuda.reset_peak_memory_stats()
            self.before_mb = torch.cuda.memory_allocated() / 2**20
        else:
            self.before_mb = self.peak_mb = self._read()
            self._thread = threading.Thread(target=self._sample, daemon=True)
            self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        if self.cuda:
            self.peak_mb = torch.cuda.max_memory_allocated() / 2**20
        else:
            self._stop.set()
            self._thread.join()
            self.peak_mb = max(self.peak_mb, self._read())
