"""Cost of the queue: step time vs MNRL, FAISS vs torch top-k, peak memory with/without GradCache.

Measured on this machine's CPU (no GPU here), bundled all-MiniLM-L6-v2, real STS-B/MRPC pairs:

1. ``step_time``: one training step (loss forward + backward + AdamW step, model in train mode) at
   batch ``--batch-size`` and ``max_seq_length`` ``--seq-len``, median of ``--steps`` timed steps
   after 2 warm-up steps, for MNRL and QueueInfoNCE with a *full* queue of K = 4096 / 16384 / 65536
   random unit rows (queue only, and + 8 hard negatives), overhead relative to MNRL.
2. ``topk``: :func:`contrastive_bert.mining.search_topk` on a K x 384 queue for 32 and 256 queries,
   k = 64: torch matmul+topk vs FAISS exact (``IndexFlatIP``, index build included since the
   queue changes every step) vs FAISS IVF/HNSW (build included), median of 5.
3. ``memory``: peak resident memory (``ru_maxrss`` of a fresh subprocess, minus its RSS just
   before the step, after a 4-row warm-up step that allocates optimizer state and gradients) of one training step at batch 64..1024, MNRL vs CachedQueueInfoNCE
   (mini-batch 32) vs QueueInfoNCE (K = 4096). This is CPU RSS, not GPU memory: it counts
   activations, gradients and the allocator's retained blocks.

    flock /tmp/cbert_bench.lock .venv/bin/python eval/bench_queue_speed.py

Writes eval/results/queue_speed.json (+ queue_speed.png).
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import time
from pathlib import Path

import torch

from contrastive_bert.data import resolve_data_dir

RESULTS = Path(__file__).parent / "results" / "queue_speed.json"
DEFAULT_DATA = resolve_data_dir()  # $CONTRASTIVE_BERT_DATA, else the hub


def _pairs(data_dir: str, n: int, seed: int = 0) -> tuple[list[str], list[str]]:
    from contrastive_bert.training.train_data import build_train_dataset

    pairs = build_train_dataset(["stsb", "mrpc"], "pairs", data_dir=data_dir, seed=seed)
    rows = [pairs[i % len(pairs)] for i in range(n)]
    return [r["anchor"] for r in rows], [r["positive"] for r in rows]


def _make_loss(name: str, model, queue_size: int | None = None, hard: int = 0, mini_batch: int = 32):
    from sentence_transformers.sentence_transformer.losses import MultipleNegativesRankingLoss

    from contrastive_bert.losses import CachedQueueInfoNCELoss, QueueInfoNCELoss

    if name == "mnrl":
        return MultipleNegativesRankingLoss(model, scale=20.0)
    options = dict(queue_size=queue_size, num_hard_negatives=hard, hard_negative_share=0.15 if hard else None)
    if name == "queue":
        return QueueInfoNCELoss(model, **options)
    if name == "cached_queue":
        return CachedQueueInfoNCELoss(model, mini_batch_size=mini_batch, **options)
    raise ValueError(f"name: unknown loss {name!r}")


def _fill(loss, k: int) -> None:
    """A full queue of random unit rows with random ids (what the queue holds after K/batch steps)."""
    g = torch.Generator().manual_seed(0)
    loss.queue.enqueue(torch.randn(k, loss.dim, generator=g), ids=torch.randint(0, 2**62, (k,), generator=g))


def _step(model, loss, optimizer, features) -> None:
    out = loss(features, None)
    total = sum(out.values()) if isinstance(out, dict) else out
    total.backward()
    optimizer.step()
    optimizer.zero_grad(set_to_none=True)


def bench_step_time(args) -> dict:
    from contrastive_bert.models import load_model

    anchors, positives = _pairs(args.data_dir, args.batch_size * (args.steps + 2))
    results = {}
    configs = [("mnrl", None, 0)] + [(f"queue_K{k}", k, 0) for k in args.queue_sizes] + [
        (f"queue_hard_K{k}", k, 8) for k in args.queue_sizes
    ]
    for label, k, hard in configs:
        model = load_model("default")
        model.max_seq_length = args.seq_len
        model.train()
        loss = _make_loss("mnrl" if k is None else "queue", model, queue_size=k, hard=hard)
        if k is not None:
            _fill(loss, k)
        optimizer = torch.optim.AdamW(model.parameters(), lr=2e-5)
        times = []
        for step in range(args.steps + 2):
            batch = slice(step * args.batch_size, (step + 1) * args.batch_size)
            features = [model.preprocess(anchors[batch]), model.preprocess(positives[batch])]
            start = time.perf_counter()
            _step(model, loss, optimizer, features)
            if step >= 2:
                times.append(time.perf_counter() - start)
        results[label] = {"median_s": statistics.median(times), "times_s": times, "queue_size": k, "hard": hard}
        print(label, f"{results[label]['median_s']:.3f} s/step", flush=True)
    base = results["mnrl"]["median_s"]
    for label, entry in results.items():
        entry["overhead_vs_mnrl"] = entry["median_s"] / base - 1.0
    return results


def bench_topk(args) -> dict:
    from contrastive_bert.mining import faiss_available, search_topk

    results = {}
    g = torch.Generator().manual_seed(0)
    for n in args.queue_sizes:
        keys = torch.nn.functional.normalize(torch.randn(n, 384, generator=g), dim=1)
        for q in (32, 256):
            queries = torch.nn.functional.normalize(torch.randn(q, 384, generator=g), dim=1)
            row = {}
            variants = [("torch", "flat")] + ([("faiss", "flat"), ("faiss", "ivf")] if faiss_available() else [])
            if faiss_available() and q == 32:  # HNSW build time dominates and does not depend on q
                variants.append(("faiss", "hnsw"))
            for backend, index in variants:
                times = []
                for _ in range(5 if index != "hnsw" else 1):
                    start = time.perf_counter()
                    search_topk(queries, keys, 64, backend=backend, index_type=index)
                    times.append(time.perf_counter() - start)
                row[f"{backend}_{index}_ms"] = 1000 * statistics.median(times)
            results[f"K{n}_q{q}"] = row
            print(f"top-64 K={n} q={q}:", {k: round(v, 2) for k, v in row.items()}, flush=True)
    return results


def _memory_worker(spec: dict) -> None:
    """Child process: one training step, prints JSON with the peak-RSS increase in MiB."""
    torch.set_num_threads(spec["threads"])
    from contrastive_bert.models import load_model

    model = load_model("default")
    model.max_seq_length = spec["seq_len"]
    model.train()
    loss = _make_loss(spec["loss"], model, queue_size=spec.get("queue_size"), mini_batch=spec["mini_batch"])
    if spec.get("queue_size"):
        _fill(loss, spec["queue_size"])
    anchors, positives = _pairs(spec["data_dir"], spec["batch"] + 4)
    optimizer = torch.optim.AdamW(model.parameters(), lr=2e-5)
    # warm-up step on 4 rows: optimizer state, gradients and lazy initialisation are not counted
    _step(model, loss, optimizer, [model.preprocess(anchors[-4:]), model.preprocess(positives[-4:])])
    anchors, positives = anchors[: spec["batch"]], positives[: spec["batch"]]
    features = [model.preprocess(anchors), model.preprocess(positives)]
    with open("/proc/self/statm") as f:
        rss_before = int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 2**20
    peak_before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    start = time.perf_counter()
    _step(model, loss, optimizer, features)
    seconds = time.perf_counter() - start
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    print(json.dumps({"peak_mib": peak, "rss_before_mib": rss_before, "peak_before_mib": peak_before,
                      "step_increase_mib": peak - rss_before, "step_s": seconds}))


def bench_memory(args) -> dict:
    results = {}
    for loss_name, queue_size in (("mnrl", None), ("queue", 4096), ("cached_queue", 4096)):
        for batch in args.memory_batches:
            spec = {"loss": loss_name, "queue_size": queue_size, "batch": batch, "seq_len": args.seq_len,
                    "mini_batch": 32, "data_dir": args.data_dir, "threads": torch.get_num_threads()}
            out = subprocess.run([sys.executable, __file__, "--memory-worker", json.dumps(spec)],
                                 capture_output=True, text=True, timeout=900)
            if out.returncode != 0:
                raise RuntimeError(f"memory worker failed for {spec}: {out.stderr[-2000:]}")
            row = json.loads(out.stdout.strip().splitlines()[-1])
            results.setdefault(loss_name, {})[str(batch)] = row
            print(f"memory {loss_name} batch {batch}: +{row['step_increase_mib']:.0f} MiB ({row['step_s']:.1f} s)", flush=True)
    for loss_name, rows in results.items():
        first, last = str(args.memory_batches[0]), str(args.memory_batches[-1])
        rows["ratio_last_to_first"] = rows[last]["step_increase_mib"] / max(rows[first]["step_increase_mib"], 1e-9)
    return results


def plot(payload: dict, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 2, figsize=(11, 3.8))
    st = payload.get("step_time", {})
    if st:
        labels = list(st)
        axes[0].bar(labels, [st[k]["median_s"] for k in labels], color="#4C72B0")
        axes[0].set_ylabel("s / training step")
        axes[0].set_title("step time (CPU)")
        axes[0].tick_params(axis="x", rotation=40)
    mem = payload.get("memory", {})
    for loss_name, rows in mem.items():
        batches = [int(b) for b in rows if b.isdigit()]
        axes[1].plot(batches, [rows[str(b)]["step_increase_mib"] for b in batches], marker="o", label=loss_name)
    axes[1].set_xscale("log", base=2)
    axes[1].set_xlabel("batch size")
    axes[1].set_ylabel("peak RSS increase (MiB)")
    axes[1].set_title("memory of one step (CPU RSS)")
    axes[1].legend()
    fig.tight_layout()
    fig.savefig(path, dpi=120)


def main() -> None:
    if len(sys.argv) == 3 and sys.argv[1] == "--memory-worker":
        _memory_worker(json.loads(sys.argv[2]))
        return
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--seq-len", type=int, default=32)
    parser.add_argument("--steps", type=int, default=8)
    parser.add_argument("--queue-sizes", type=int, nargs="+", default=[4096, 16384, 65536])
    parser.add_argument("--memory-batches", type=int, nargs="+", default=[64, 128, 256, 512, 1024])
    parser.add_argument("--parts", nargs="+", default=["step_time", "topk", "memory"], choices=["step_time", "topk", "memory"])
    parser.add_argument("--data-dir", default=DEFAULT_DATA)
    parser.add_argument("--output", default=str(RESULTS))
    args = parser.parse_args()

    from contrastive_bert.benchmarking import write_results

    payload: dict = {"setup": {"model": "default (all-MiniLM-L6-v2)", "batch_size": args.batch_size,
                               "max_seq_length": args.seq_len, "timed_steps": args.steps,
                               "queue_sizes": args.queue_sizes, "memory_batches": args.memory_batches,
                               "device": "cpu", "threads": torch.get_num_threads()}}
    if "step_time" in args.parts:
        payload["step_time"] = bench_step_time(args)
    if "topk" in args.parts:
        payload["topk"] = bench_topk(args)
    if "memory" in args.parts:
        payload["memory"] = bench_memory(args)
    output = Path(args.output)
    write_results(output, payload)
    plot(payload, output.with_suffix(".png"))
    print(f"wrote {output}")


if __name__ == "__main__":
    main()
