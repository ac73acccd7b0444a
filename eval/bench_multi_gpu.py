"""Several GPUs: the train CLI under torchrun on N processes against one, and corpus encoding with --devices.

Run on a machine with N >= 2 GPUs (the offline GPU bundle's ``multi_gpu`` block)::

    python eval/bench_multi_gpu.py --device cuda --nproc 2 --output eval/results/multi_gpu.json

1. ``training``: ``contrastive-bert train`` (``--loss queue_infonce``, a 4,096-row queue, on STS-B pairs, ``--max-steps``
   optimizer steps of ``--batch-size`` rows per process, no evaluation) as one process (the first
   GPU only) and as ``python -m torch.distributed.run --standalone --nproc_per_node N -m
   contrastive_bert.cli train ...`` (DDP: each process trains on its own batch, the gradients are
   averaged, the queue's enqueued rows are all-gathered so every rank holds the same queue):
   wall seconds, and the trainer's seconds, optimizer steps per second and training rows per
   second from each run's ``results.json``.
2. ``encoding``: the SciFact corpus encoded by :func:`contrastive_bert.embedding_store.encode_corpus`
   on the first device, then on N (``--devices``: sentence-transformers' multi-process pool, its
   start included): documents per second, and the largest difference between the two encodings.

With fewer than N GPUs it prints why and writes nothing (exit 0: the bundle goes on).
``--dry-run --device cpu``: both parts on N CPU processes (gloo, through ``ACCELERATE_USE_CPU``),
2 steps and 64 documents: the path works, the numbers mean nothing (the JSON says ``dry_run``).
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from contrastive_bert.benchmarking import add_common_arguments, setup_from_args, write_results

RESULTS = Path(__file__).resolve().parent / "results" / "multi_gpu.json"
DRY_RUN_DOCUMENTS = 64
QUEUE_SIZE = 4096  # rows of the training runs' queue (DDP: N batches enqueued per step)
LOG_TAIL = 3000  # characters of a failed run's output kept in the JSON


def _gpus_missing(device: str, nproc: int) -> str | None:
    """Why this machine cannot run ``nproc`` GPU processes (None: it can, or the run is on the CPU)."""
    import torch

    if device == "cpu" or (device == "auto" and not torch.cuda.is_available()):
        return None
    count = torch.cuda.device_count() if torch.cuda.is_available() else 0
    if count < nproc:
        return f"needs {nproc} GPUs for {nproc} processes, this machine has {count}"
    return None


def _seconds_left(args, share: float = 1.0) -> float | None:
    """``share`` of the seconds left of ``--max-minutes`` (None: no limit), at least one."""
    left = args.budget.remaining()
    return None if left == float("inf") else max(left * share, 1.0)


def _train(args, launcher: list[str], name: str, environment: dict[str, str], timeout: float | None) -> dict:
    """One ``contrastive-bert train`` run (``launcher`` + the CLI): its seconds and what its results.json says."""
    output_dir = Path(args.work_dir) / name
    command = [*launcher, "-m", "contrastive_bert.cli", "train", "--model", args.model, "--datasets", "stsb",
               "--loss", "queue_infonce", "--loss-options", json.dumps({"queue_size": QUEUE_SIZE}), "--max-steps", str(args.steps), "--batch-size", str(args.batch_size),
               "--eval-tasks", "", "--dev-task", "", "--save-steps", str(10 * args.steps), "--output-dir", str(output_dir),
               "--overwrite", *(["--data-dir", args.data_dir] if args.data_dir else [])]
    print(f"[multi_gpu] {name}: {shlex.join(command)}", flush=True)
    began = time.perf_counter()
    try:
        run = subprocess.run(command, env=environment, capture_output=True, text=True, timeout=timeout)
        code, log = run.returncode, run.stdout + run.stderr
    except subprocess.TimeoutExpired as error:
        code, log = None, f"timed out after {timeout:.0f} s: {error.stderr or ''}"
    record = {"command": shlex.join(command), "returncode": code, "wall_seconds": round(time.perf_counter() - began, 2)}
    results = output_dir / "results.json"
    if code != 0 or not results.is_file():
        return {**record, "log_tail": str(log)[-LOG_TAIL:]}
    written = json.loads(results.read_text(encoding="utf-8"))
    processes = args.nproc if name == "ddp" else 1
    seconds = written["train_seconds"]
    return {**record, "processes": processes, "train_seconds": round(seconds, 3), "global_step": written["global_step"],
            "steps_per_second": round(written["global_step"] / seconds, 3),
            "rows_per_second": round(written["global_step"] * args.batch_size * processes / seconds, 1)}


def bench_training(args, cpu: bool) -> dict:
    environment = {**os.environ, "TOKENIZERS_PARALLELISM": "false", "OMP_NUM_THREADS": str(args.threads)}
    if cpu:
        environment["ACCELERATE_USE_CPU"] = "true"  # the trainer's DDP over gloo, as on the GPUs
    single = dict(environment) if cpu else {**environment, "CUDA_VISIBLE_DEVICES": environment.get(
        "CUDA_VISIBLE_DEVICES", "0").split(",")[0]}  # one GPU: not DataParallel over all of them
    runs = {"one": _train(args, [sys.executable], "one", single, _seconds_left(args, 0.4))}
    torchrun = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node", str(args.nproc)]
    runs["ddp"] = _train(args, torchrun, "ddp", environment, _seconds_left(args, 0.7))
    if "rows_per_second" in runs["one"] and "rows_per_second" in runs["ddp"]:
        runs["speedup_rows_per_second"] = round(runs["ddp"]["rows_per_second"] / runs["one"]["rows_per_second"], 3)
    return runs


def bench_encoding(args, cpu: bool) -> dict:
    import numpy as np

    from contrastive_bert.data import load_dataset
    from contrastive_bert.data.beir import RetrievalData
    from contrastive_bert.embedding_store import encode_corpus
    from contrastive_bert.models import load_model

    devices = ["cpu"] * args.nproc if cpu else [f"cuda:{i}" for i in range(args.nproc)]
    corpus = RetrievalData.from_splits(load_dataset("scifact", data_dir=args.data_dir, dev_split=False)).corpus
    ids = list(corpus)[: DRY_RUN_DOCUMENTS if args.dry_run else None]
    texts = [corpus[d] for d in ids]
    model = load_model(args.model, device=devices[0])
    encode_corpus(model, ids[:32], texts[:32], batch_size=args.encode_batch_size, devices=devices[:1])  # warm-up
    result = {"documents": len(ids), "batch_size": args.encode_batch_size, "devices": devices}
    encodings = {}
    for name, chosen in (("one", devices[:1]), ("several", devices)):
        began = time.perf_counter()
        encodings[name] = encode_corpus(model, ids, texts, batch_size=args.encode_batch_size, devices=chosen).embeddings
        seconds = time.perf_counter() - began
        result[name] = {"devices": chosen, "seconds": round(seconds, 3), "documents_per_second": round(len(ids) / seconds, 1)}
    result["speedup"] = round(result["several"]["documents_per_second"] / result["one"]["documents_per_second"], 3)
    result["max_abs_difference"] = float(np.abs(encodings["one"] - encodings["several"]).max())
    return result


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    add_common_arguments(parser, output=RESULTS, device="cuda")
    parser.add_argument("--nproc", type=int, default=2, help="processes (GPUs) of the torchrun training and the encoding (default: 2)")
    parser.add_argument("--model", default="default", help="model to train and encode with (default: the bundled all-MiniLM-L6-v2)")
    parser.add_argument("--steps", type=int, default=200, help="optimizer steps of each training run (default: 200)")
    parser.add_argument("--batch-size", type=int, default=64, help="training rows per process and step (default: 64)")
    parser.add_argument("--encode-batch-size", type=int, default=128, help="texts per forward pass when encoding (default: 128)")
    parser.add_argument("--parts", default="training,encoding", help="comma list of training, encoding (default: both)")
    parser.add_argument("--work-dir", default=None, help="scratch folder for the training runs (default: a temporary one)")
    args = parser.parse_args(argv)
    if args.nproc < 2:
        raise SystemExit(f"--nproc: expected at least 2 processes, got {args.nproc}")
    parts = [part.strip() for part in args.parts.split(",") if part.strip()]
    if not parts or set(parts) - {"training", "encoding"}:
        raise SystemExit(f"--parts: expected a comma list of training, encoding, got {args.parts!r}")
    missing = _gpus_missing(args.device, args.nproc)
    if missing is not None:
        print(f"[multi_gpu] skipped: {missing}; nothing written", flush=True)
        return 0
    setup_from_args(args)
    cpu = args.device == "cpu"
    if cpu and not args.dry_run:
        raise SystemExit("--device cpu: only with --dry-run (a smoke test of the path); the measurement is on GPUs")
    if args.dry_run:
        args.steps = min(args.steps, args.max_steps or 2)
    from contrastive_bert.data import resolve_data_dir

    resolved = resolve_data_dir(args.data_dir)
    args.data_dir = str(resolved) if resolved else None
    with tempfile.TemporaryDirectory() as scratch:
        args.work_dir = args.work_dir or scratch
        payload = {"setup": {"model": args.model, "nproc": args.nproc, "steps": args.steps, "batch_size": args.batch_size,
                             "loss": "queue_infonce", "queue_size": QUEUE_SIZE, "dataset": "stsb", "device": args.device, "threads": args.threads,
                             "dry_run": args.dry_run}}
        if "training" in parts:
            payload["training"] = bench_training(args, cpu)
        if "encoding" in parts:
            payload["encoding"] = bench_encoding(args, cpu)
    write_results(args.output, payload, device=args.device)
    print(json.dumps({k: v for k, v in payload.items() if k != "setup"}, indent=1, default=str))
    print(f"[multi_gpu] wrote {args.output}")
    failed = [name for name, run in payload.get("training", {}).items() if isinstance(run, dict) and run.get("returncode") != 0]
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
