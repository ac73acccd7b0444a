"""Where the time of one early-exit call goes at batch 1: per-layer time, exit-head time, the exit
decision and the Python around it, against the full model's forward (CPU clock).

Each piece of :class:`~contrastive_bert.inference.early_exit.EarlyExitClassifier` is wrapped with a
CPU-clock timer (tokenisation, embeddings, layer mask, each encoder layer, each exit head, the
criterion) and ``predict`` is called once per sentence (batch 1, as a server answers one request);
``other`` is the CPU time of the call not inside any timed piece: the Python of ``_run`` and
``_early_exit`` (argument checks, ordering, the output arrays, the softmax/argmax/indexing around
the decision). ``use_cprofile`` adds cProfile's top functions by own time.

:func:`profile` is what ``eval/profile_early_exit.py`` prints and what ``eval/bench_early_exit.py``
records for the first seed's model (``batch1_profile``).
"""

from __future__ import annotations

import cProfile
import io
import pstats
import statistics
import time
from collections import defaultdict
from collections.abc import Callable
from typing import Any

from torch import nn

from contrastive_bert.inference.early_exit import EarlyExitClassifier

__all__ = ["PieceTimer", "instrument", "profile"]


class PieceTimer:
    """CPU milliseconds spent inside wrapped callables, by piece name; nested pieces are not
    double-counted (only the outermost timed piece counts)."""

    def __init__(self) -> None:
        self.ms: dict[str, float] = defaultdict(float)
        self.calls: dict[str, int] = defaultdict(int)
        self._depth = 0

    def wrap(self, name: str, fn: Callable[..., Any]) -> Callable[..., Any]:
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


def instrument(classifier: EarlyExitClassifier, timer: PieceTimer) -> None:
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


def profile(model: nn.Module, texts: list[str], criterion: str = "margin", threshold: float = 0.0,
            use_cprofile: bool = False) -> dict[str, Any]:
    """Per-sentence CPU milliseconds of ``predict`` at batch 1 on ``texts`` (n sentences), split
    into pieces, and of the full model: medians of uninstrumented calls (``full_model_ms``,
    ``early_exit_ms``), then the pieces of instrumented ones (``pieces_ms``, ``per_call_ms``,
    ``other_ms``, ``full_pieces_ms``); ``cprofile_top`` with ``use_cprofile``."""
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
