"""Cost of the queue: step time vs MNRL, FAISS vs torch top-k, peak memory with/without GradCache.

Measured on ``--device`` (default: this machine's CPU), bundled all-MiniLM-L6-v2, real STS-B/MRPC pairs;
every loss built through the loss registry:

1. ``step_time``: one training step (loss forward + backward + AdamW step, model in train mode) at
   batch ``--batch-size`` and ``max_seq_length`` ``--seq-len``, median of ``--steps`` timed steps
   after 2 warm-up steps, for MNRL and QueueInfoNCE with a *full* queue of K = 4096 / 16384 / 65536
   random unit rows (queue only, and + 8 hard negatives), overhead relative to MNRL.
2. ``topk``: :func:`contrastive_bert.topk_search.search_topk` on a K x 384 queue for 32 and 256 queries,
   k = 64: torch matmul+topk vs FAISS exact (``IndexFlatIP``, index build included since the
   queue changes every step) vs FAISS IVF/HNSW (build included), median of 5.
3. ``memory``: peak resident memory (``ru_maxrss`` of a fresh subprocess, minus its RSS just
   before the step, after a 4-row warm-up step that allocates optimizer state and gradients) of one training step at batch 64..1024, MNRL vs CachedQueueInfoNCE
   (mini-batch 32) vs QueueInfoNCE (K = 4096). On the CPU this is RSS, not GPU memory: it counts
   activations, gradients and the allocator's retained blocks; on a GPU it is the peak of
   ``torch.cuda.max_memory_allocated`` during the step minus the allocation before it.

    flock /tmp/cbert_bench.lock .venv/bin/python eval/bench_queue_speed.py
    python eval/bench_queue_speed.py --device cuda --parts step_time --queue-sizes 65536 --output eval/results/queue_speed_gpu.json

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

from contrastive_bert.benchmarking import DRY_RUN_STEPS, add_common_arguments, setup_from_args, write_results
from contrastive_bert.data import resolve_data_dir

RESULTS = Path(__file__).parent / "results" / "queue_speed.json"


def _pairs(data_dir: str, n: int, seed: int = 0) -> tuple[list[str], list[str]]:
    from contrastive_bert.training.train_data import build_train_dataset

    pairs = build_train_dataset(["stsb", "mrpc"], "pairs", data_dir=data_dir, seed=seed)
    rows = [pairs[i % len(pairs)] for i in range(n)]
    return [r["anchor"] for r in rows], [r["positive"] for r in rows]


def _make_loss(name: str, model, rows: list, queue_size: int | None = None, hard: int = 0, mini_batch: int = 32):
    """``mnrl`` (scale 20), ``queue`` or ``cached_queue`` (registry names mnrl, queue_infonce,
    cached_queue_infonce) with a queue of ``queue_size`` rows and ``hard`` mined negatives;
    ``rows``: the training rows (their number is what a recipe would give the loss)."""
    from contrastive_bert.training.losses_registry import build_loss

    if name == "mnrl":
        return build_loss("mnrl", model, rows, {"scale": 20.0})
    options = {"queue_size": queue_size, "num_hard_negatives": hard, **({"hard_negative_share": 0.15} if hard else {})}
    if name == "queue":
        return build_loss("queue_infonce", model, rows, options)
    if name == "cached_queue":
        return build_loss("cached_queue_infonce", model, rows, {"mini_batch_size": mini_batch, **options})
    raise ValueError(f"name: unknown loss {name!r}")


def _fill(loss, k: int, device) -> None:
    """A full queue of random unit rows with random ids (what the queue holds after K/batch steps)."""
    g = torch.Generator().manual_seed(0)
    loss.queue.enqueue(torch.randn(k, loss.queue.dim, generator=g).to(device), ids=torch.randint(0, 2**62, (k,), generator=g).to(device))


def _synchronize(device) -> None:
    if str(device).startswith("cuda"):
        torch.cuda.synchronize()


def _step(model, loss, optimizer, features) -> None:
    out = loss(features, None)
    total = sum(out.values()) if isinstance(out, dict) else out
    total.backward()
    optimizer.step()
    optimizer.zero_grad(set_to_none=True)


def bench_step_time(args) -> dict:
    from sentence_transformers.util import batch_to_device

    from contrastive_bert.models import load_model

    anchors, positives = _pairs(args.data_dir, args.batch_size * (args.steps + 2))
    results = {}
    configs = [("mnrl", None, 0)] + [(f"queue_K{k}", k, 0) for k in args.queue_sizes] + [
        (f"queue_hard_K{k}", k, 8) for k in args.queue_sizes
    ]
    for label, k, hard in configs:
        model = load_model("default", device=args.device)
        model.max_seq_length = args.seq_len
        model.train()
        loss = _make_loss("mnrl" if k is None else "queue", model, anchors, queue_size=k, hard=hard)
        if k is not None:
            _fill(loss, k, model.device)
        optimizer = torch.optim.AdamW(model.parameters(), lr=2e-5)
        times = []
        for step in range(args.steps + 2):
            batch = slice(step * args.batch_size, (step + 1) * args.batch_size)
            features = [batch_to_device(model.preprocess(anchors[batch]), model.device),
                        batch_to_device(model.preprocess(positives[batch]), model.device)]
            _synchronize(args.device)
            start = time.perf_counter()
            _step(model, loss, optimizer, features)
            _synchronize(args.device)
            if step >= 2:
                times.append(time.perf_counter() - start)
        results[label] = {"median_s": statistics.median(times), "times_s": times, "queue_size": k, "hard": hard}
        print(label, f"{results[label]['median_s']:.3f} s/step", flush=True)
    base = results["mnrl"]["median_s"]
    for label, entry in results.items():
        entry["overhead_vs_mnrl"] = entry["median_s"] / base - 1.0
    return results


def bench_topk(args) -> dict:
    from contrastive_bert.topk_search import faiss_available, search_topk

    results = {}
    g = torch.Generator().manual_seed(0)
    for n in args.queue_sizes:
        keys = torch.nn.functional.normalize(torch.randn(n, 384, generator=g), dim=1).to(args.device)
        for q in (32, 256):
            queries = torch.nn.functional.normalize(torch.randn(q, 384, generator=g), dim=1).to(args.device)
            row = {}
            variants = [("torch", "flat")] + ([("faiss", "flat"), ("faiss", "ivf")] if faiss_available() else [])
            if faiss_available() and q == 32:  # HNSW build time dominates and does not depend on q
                variants.append(("faiss", "hnsw"))
            for backend, index in variants:
                times = []
                for _ in range(5 if index != "hnsw" else 1):
                    _synchronize(args.device)
                    start = time.perf_counter()
                    search_topk(queries, keys, 64, backend=backend, index_type=index)
                    _synchronize(args.device)
                    times.append(time.perf_counter() - start)
                row[f"{backend}_{index}_ms"] = 1000 * statistics.median(times)
            results[f"K{n}_q{q}"] = row
            print(f"top-64 K={n} q={q}:", {k: round(v, 2) for k, v in row.items()}, flush=True)
    return results


def _memory_worker(spec: dict) -> None:
    """Child process: one training step, prints JSON with the peak-RSS increase in MiB."""
    torch.set_num_threads(spec["threads"])
    from contrastive_bert.models import load_model

    from sentence_transformers.util import batch_to_device

    device = spec.get("device", "cpu")
    model = load_model("default", device=device)
    model.max_seq_length = spec["seq_len"]
    model.train()
    anchors, positives = _pairs(spec["data_dir"], spec["batch"] + 4)
    loss = _make_loss(spec["loss"], model, anchors, queue_size=spec.get("queue_size"), mini_batch=spec["mini_batch"])
    if spec.get("queue_size"):
        _fill(loss, spec["queue_size"], model.device)
    optimizer = torch.optim.AdamW(model.parameters(), lr=2e-5)
    # warm-up step on 4 rows: optimizer state, gradients and lazy initialisation are not counted
    def features_of(a, p):
        return [batch_to_device(model.preprocess(a), model.device), batch_to_device(model.preprocess(p), model.device)]

    _step(model, loss, optimizer, features_of(anchors[-4:], positives[-4:]))
    features = features_of(anchors[: spec["batch"]], positives[: spec["batch"]])
    if device.startswith("cuda"):  # GPU memory: the allocator's peak during the step over what it held before
        torch.cuda.synchronize()
        before = torch.cuda.memory_allocated() / 2**20
        torch.cuda.reset_peak_memory_stats()
        start = time.perf_counter()
        _step(model, loss, optimizer, features)
        torch.cuda.synchronize()
        seconds = time.perf_counter() - start
        peak = torch.cuda.max_memory_allocated() / 2**20
        print(json.dumps({"peak_mib": peak, "rss_before_mib": before, "peak_before_mib": before,
                          "step_increase_mib": peak - before, "step_s": seconds}))
        return
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
                    "mini_batch": 32, "data_dir": args.data_dir, "threads": torch.get_num_threads(), "device": args.device}
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


def main(argv: list[str] | None = None) -> None:
    argv = sys.argv[1:] if argv is None else argv
    if len(argv) == 2 and argv[0] == "--memory-worker":
        _memory_worker(json.loads(argv[1]))
        return
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    add_common_arguments(parser, output=RESULTS)
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--seq-len", type=int, default=32)
    parser.add_argument("--steps", type=int, default=8)
    parser.add_argument("--queue-sizes", type=int, nargs="+", default=[4096, 16384, 65536])
    parser.add_argument("--memory-batches", type=int, nargs="+", default=[64, 128, 256, 512, 1024])
    parser.add_argument("--parts", nargs="+", default=["step_time", "topk", "memory"], choices=["step_time", "topk", "memory"])
    args = parser.parse_args(argv)
    setup_from_args(args)
    resolved = resolve_data_dir(args.data_dir)  # $CONTRASTIVE_BERT_DATA, else the hub
    args.data_dir = str(resolved) if resolved else None
    if args.dry_run:  # smoke test: two timed steps, the smallest sizes
        args.steps, args.queue_sizes, args.memory_batches = DRY_RUN_STEPS, args.queue_sizes[:1], args.memory_batches[:1]

    payload: dict = {"setup": {"model": "default (all-MiniLM-L6-v2)", "batch_size": args.batch_size,
                               "max_seq_length": args.seq_len, "timed_steps": args.steps,
                               "queue_sizes": args.queue_sizes, "memory_batches": args.memory_batches,
                               "device": args.device, "threads": torch.get_num_threads(), "dry_run": args.dry_run}}
    if "step_time" in args.parts:
        payload["step_time"] = bench_step_time(args)
    if "topk" in args.parts:
        payload["topk"] = bench_topk(args)
    if "memory" in args.parts:
        payload["memory"] = bench_memory(args)
    output = Path(args.output)
    write_results(output, payload, device=args.device)
    plot(payload, output.with_suffix(".png"))
    print(f"wrote {output}")


if __name__ == "__main__":
    main()
