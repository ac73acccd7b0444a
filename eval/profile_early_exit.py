"""Where the time of one early-exit call goes at batch 1: per-layer time, exit-head time, the exit
decision and the Python around it, against the full model's forward (CPU, one thread).

Each piece of :class:`~contrastive_bert.inference.early_exit.EarlyExitClassifier` is wrapped with a
CPU-clock timer (tokenisation, embeddings, layer mask, each encoder layer, each exit head, the
criterion) and ``predict`` is called once per sentence (batch 1, as a server answers one request);
``other`` is the CPU time of the call not inside any timed piece: the Python of ``_run`` and
``_early_exit`` (argument checks, ordering, the output arrays, the softmax/argmax/indexing around
the decision). ``--cprofile`` adds cProfile's top functions by own time.

Model: ``--model`` (a multi-exit folder, e.g. ``<output-dir>/final``), else the bundled
all-MiniLM-L6-v2 with random MHA exits on layers 2-5 (the recipes' layout) and the ``margin``
criterion at threshold 0, so every row leaves at layer 2: the layer-2 path the trained Banking77
model takes for ~95% of rows. Seconds, not minutes:

    OMP_NUM_THREADS=1 .venv/bin/python eval/profile_early_exit.py --sentences 48 --output /tmp/profile.json
"""

from __future__ import annotations

import argparse
import cProfile
import io
import json
import pstats
import statistics
import time
from collections import defaultdict
from pathlib import Path

import torch


def build_model(path: str | None, device: str = "cpu"):
    """The multi-exit model at ``path``, else the bundled model with random MHA exits on layers 2-5."""
    from contrastive_bert.heads.exits import add_exit_heads, load_multi_exit_model
    from contrastive_bert.models import load_model

    if path:
        return load_multi_exit_model(path, device=device).eval()
    model = load_model("default", device=device)
    model.max_seq_length = 32
    torch.manual_seed(0)
    add_exit_heads(model, [f"class_{k}" for k in range(77)], exit_layers=[2, 3, 4, 5], head_type="mha")
    return model.eval()


class PieceTimer:
    """CPU milliseconds spent inside wrapped callables, by piece name; nested pieces are not
    double-counted (only the outermost timed piece counts)."""

    def __init__(self) -> None:
        self.ms: dict[str, float] = defaultdict(float)
        self.calls: dict[str, int] = defaultdict(int)
        self._depth = 0

    def wrap(self, name: str, fn):
        def timed(*args, **kwargs):
            if self._depth:
                return fn(*args, **kwargs)
            self._depth += 1
            start = time.process_time()
            try:
                return fn(*args, **kwargs)
            finally:
                self.ms[name] += (time.process_time() - start) * 1000.0
                self.calls[name] += 1
                self._depth -= 1
        return timed


def instrument(classifier, timer: PieceTimer) -> None:
    """Wrap the classifier's pieces (instance attributes shadow the methods; nothing global is patched)."""
    encoder, heads = classifier.encoder, classifier.heads
    classifier.tokenize = timer.wrap("tokenise", classifier.tokenize)
    encoder.embed = timer.wrap("embed", encoder.embed)
    encoder.prepare_mask = timer.wrap("mask", encoder.prepare_mask)
    layer_fn = encoder.layer
    encoder.layer = lambda index, hidden, mask: timer.wrap(f"layer_{index}", layer_fn)(index, hidden, mask)
    head_fn = heads.forward_layer
    heads.forward_layer = lambda layer, hidden, padding: timer.wrap(f"head_{layer}", head_fn)(layer, hidden, padding)
    classifier.criterion.should_exit = timer.wrap("decision", classifier.criterion.should_exit)


def profile(model, texts: list[str], criterion: str = "margin", threshold: float = 0.0, use_cprofile: bool = False) -> dict:
    """Per-sentence CPU milliseconds of ``predict`` at batch 1, split into pieces, and of the full model."""
    from contrastive_bert.inference.early_exit import EarlyExitClassifier

    plain = EarlyExitClassifier(model, criterion, threshold, batch_size=1)
    for text in texts[:4]:  # warm-up
        plain.predict([text]), plain.predict_full([text])
    full_ms, early_ms = [], []
    for text in texts:
        full_ms.append(plain.predict_full([text]).cpu_seconds * 1000.0)
        early_ms.append(plain.predict([text]).cpu_seconds * 1000.0)
    classifier = EarlyExitClassifier(model, criterion, threshold, batch_size=1)
    timer = PieceTimer()
    instrument(classifier, timer)
    layers, calls_ms = [], []
    profiler = cProfile.Profile() if use_cprofile else None
    try:
        for text in texts:
            start = time.process_time()
            if profiler is not None:
                profiler.enable()
            result = classifier.predict([text])
            if profiler is not None:
                profiler.disable()
            calls_ms.append((time.process_time() - start) * 1000.0)
            layers.append(float(result.avg_layers))
    finally:
        del classifier.heads.forward_layer  # the heads are the model's: its own method again
    n = len(texts)
    pieces = {name: round(ms / n, 3) for name, ms in sorted(timer.ms.items())}
    per_call = {name: round(ms / timer.calls[name], 3) for name, ms in sorted(timer.ms.items())}
    layer_per_call = sum(v for k, v in timer.ms.items() if k.startswith("layer_")) / max(
        1, sum(c for k, c in timer.calls.items() if k.startswith("layer_")))
    timed_total = sum(timer.ms.values()) / n
    call = statistics.fmean(calls_ms)
    full = EarlyExitClassifier(model, criterion, threshold, batch_size=1)
    full_timer = PieceTimer()
    full.tokenize = full_timer.wrap("tokenise", full.tokenize)
    forward = full.encoder.auto_model.forward
    full.encoder.auto_model.forward = full_timer.wrap("hf_forward_all_layers", forward)
    full.heads.forward_layer = full_timer.wrap("final_head", full.heads.forward_layer)
    full_calls = []
    try:
        for text in texts:
            start = time.process_time()
            full.predict_full([text])
            full_calls.append((time.process_time() - start) * 1000.0)
    finally:
        del full.encoder.auto_model.forward, full.heads.forward_layer  # the modules' own methods again
    full_call = statistics.fmean(full_calls)
    full_pieces = {name: round(ms / n, 3) for name, ms in sorted(full_timer.ms.items())}
    out = {
        "sentences": n, "criterion": criterion, "threshold": threshold, "avg_layers": round(statistics.fmean(layers), 3),
        "full_model_ms": round(statistics.median(full_ms), 3), "early_exit_ms": round(statistics.median(early_ms), 3),
        "speedup_median": round(statistics.median(full_ms) / statistics.median(early_ms), 2),
        "instrumented_call_ms": round(call, 3), "pieces_ms": pieces, "other_ms": round(call - timed_total, 3),
        "per_call_ms": per_call, "layer_ms_per_call": round(layer_per_call, 3),
        "outside_layers_ms": round(call - sum(v for k, v in pieces.items() if k.startswith("layer_")), 3),
        "full_instrumented_call_ms": round(full_call, 3), "full_pieces_ms": full_pieces,
        "full_other_ms": round(full_call - sum(full_timer.ms.values()) / n, 3),
        "note": "CPU milliseconds per sentence (batch 1, one thread): pieces_ms per sentence (a deeper layer or head "
                "counts only for the rows that reach it), per_call_ms per call of that piece; pieces and other from the "
                "instrumented calls (the wrappers add a few microseconds each), full_model_ms / early_exit_ms from "
                "uninstrumented calls",
    }
    if profiler is not None:
        stream = io.StringIO()
        pstats.Stats(profiler, stream=stream).sort_stats("tottime").print_stats(25)
        out["cprofile_top"] = stream.getvalue().splitlines()
    return out


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default=None, help="multi-exit model folder (default: bundled model, random exits)")
    parser.add_argument("--dataset", default="banking77", help="texts from this data set's test split")
    parser.add_argument("--data-dir", default=None)
    parser.add_argument("--sentences", type=int, default=48)
    parser.add_argument("--criterion", default="margin")
    parser.add_argument("--threshold", type=float, default=0.0)
    parser.add_argument("--cprofile", action="store_true", help="add cProfile's top 25 functions by own time")
    parser.add_argument("--output", default=None, help="JSON file (default: print only)")
    args = parser.parse_args(argv)
    torch.set_num_threads(1)
    from contrastive_bert.data import load_dataset

    test = load_dataset(args.dataset, split="test", data_dir=args.data_dir).shuffle(seed=0)
    texts = list(test["text"][: args.sentences])
    result = profile(build_model(args.model), texts, args.criterion, args.threshold, args.cprofile)
    text = json.dumps(result, indent=1)
    if args.output:
        Path(args.output).write_text(text + "\n")
    print(text if not args.cprofile else json.dumps({k: v for k, v in result.items() if k != "cprofile_top"}, indent=1))
    if args.cprofile:
        print("\n".join(result["cprofile_top"]))


if __name__ == "__main__":
    main()
