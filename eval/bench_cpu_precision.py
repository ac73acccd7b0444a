"""Training on a CPU in bf16 against fp32 (issue 39, item 4b): is ``--mixed-precision bf16`` faster
on this CPU at equal quality, and how close to the machine's limit do training and encoding run?

The protocol: the SciFact recipe ``scripts/recipes/scifact_best.yaml`` (the bundled all-MiniLM-L6-v2,
MNRL at scale 20 on (claim, abstract, mined negative) rows, batch 32, 3 epochs, 5e-5, 256 tokens),
its training rows the retrieval benchmarks' corpus-mined rows (:mod:`contrastive_bert.training.retrieval_runs`,
mined once and kept in the rows cache), trained through the package's ``fit`` at seed 0 with
``mixed_precision`` ``no`` (fp32) and ``bf16`` (CPU autocast: the forward's matrix products in bf16,
weights and optimizer in fp32).

- **The timing pass** (``--timing``): each precision, back to back in one process on a quiet machine,
  :data:`TIMING_STEPS` optimizer steps (the first, warm-up, not counted): the median seconds of a
  step and the FLOP rate of the counted steps; then :data:`ENCODE_DOCUMENTS` SciFact documents encoded
  (batch 64, as scoring does; fp32, or under ``torch.autocast("cpu", torch.bfloat16)``): documents
  per second and the FLOP rate; and a large matrix product's rate in the same dtype (what this CPU
  reaches at best through torch).
- **The full pass** (default): each precision trained in full at seed 0 and scored as the retrieval
  benchmarks score (:func:`~contrastive_bert.training.retrieval_runs.score`: MTEB-protocol
  nDCG@10 on dev and test, the general-ability block) with the trained weights in fp32, and once
  more with queries and documents encoded under bf16 autocast (what bf16 encoding would cost).

FLOPs are counted, not estimated: the shape (rows x padded tokens) of every forward call is
recorded, and torch's ``FlopCounterMode`` counts one sequence of each length through the model,
forward and backward (matrix products and attention; torch has no formula for CPU attention, so
:func:`count_sequence_flops` gives it torch's own SDPA formula); a batch's FLOPs are its rows times
its length's (the counted operations are linear in the rows). ``6 x parameters x tokens`` (the
non-embedding parameters) is recorded beside it as a check. The loss's own similarity matrix
(under 0.01%) is left out. The peak is cores x clock x FLOPs per cycle per core: fp32 AVX-512 FMA
2 units x 16 lanes x 2 = 64 (AVX2: 32); bf16 AMX 1024 (TDPBF16PS: 16 x 16 x 32 multiply-adds per
tile instruction, one each 16 cycles; Intel's figure for Sapphire Rapids: 1024 bf16 FLOPs per cycle
per core against 64 for fp32 AVX-512), AVX512_BF16 alone 128 (VDPBF16PS: 2 units x 16 lanes x 2
products x 2); the clock is the one /proc/cpuinfo reports (``--clock-ghz`` overrides; a turbo clock
above it would lower the fractions). The cores are the torch threads used.

``auto`` picks bf16 on a CPU only if this says so: bf16 faster per step and its test nDCG@10 no more
than :data:`EQUAL_QUALITY_POINTS` below fp32's (``comparison.bf16_for_auto``); the lead then sets
``contrastive_bert.training.checks.AUTO_BF16_ON_CPU``.

Resumable: each finished run is appended to ``cpu_precision_runs.jsonl``; ``cpu_precision.json``
is rebuilt after every run. ``--dry-run`` (2 steps, :data:`DRY_RUN_ENCODE_DOCUMENTS` documents,
32 evaluation rows) writes under the system's temporary folder, never under eval/results.

Commands (2 threads, this machine quiet; minutes estimated from the retrieval benchmark's fp32 run
of this recipe, 69 steps in about 1,100 s, and SciFact's corpus encoded at about 23 documents a second):

    # the timing pass, about 5 minutes (the rows from the rows cache)
    flock /tmp/cbert_bench.lock env OMP_NUM_THREADS=2 .venv/bin/python eval/bench_cpu_precision.py --threads 2 --timing
    # the full pass, about 45-50 minutes: fp32 ~28 (training ~19, scoring in fp32 ~5 and in bf16 ~3,
    # counting the FLOPs of each sequence length ~1), bf16 ~15-20 depending on its speed-up
    flock /tmp/cbert_bench.lock env OMP_NUM_THREADS=2 nohup .venv/bin/python eval/bench_cpu_precision.py --threads 2 > cpu_precision.log 2>&1 &
    # a smoke run, 2 steps each: about 5 minutes the first time (it mines SciFact's dry-run rows
    # once), seconds after; without --timing about 15 more (scoring encodes the whole corpus 4 times)
    OMP_NUM_THREADS=2 .venv/bin/python eval/bench_cpu_precision.py --threads 2 --dry-run --timing
"""

from __future__ import annotations

import argparse
import contextlib
import copy
import logging
import math
import os
import statistics
import tempfile
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, Self

import torch
from transformers import TrainerCallback

from contrastive_bert.benchmarking import (
    RunLog,
    add_common_arguments,
    selected,
    setup_from_args,
    write_results,
)
from contrastive_bert.benchmarking.arguments import DRY_RUN_STEPS
from contrastive_bert.benchmarking.plan_loop import NOTHING_LEFT, run_plan  # noqa: F401 (NOTHING_LEFT: the loop's exit status)
from contrastive_bert.benchmarking.protocol import Grid, Method, Run
from contrastive_bert.training import (
    TrainingRecipe,
    fit,
    get_loss_entry,
    retrieval_runs,
)
from contrastive_bert.training.checks import cpu_flags
from contrastive_bert.training.corpus_negatives import CorpusNegatives
from contrastive_bert.training.retrieval_runs import (
    CORPUS_MINER,
    METRICS,
    PeakMemory,
    RetrievalProtocol,
    TrainingRows,
)
from contrastive_bert.training.step_timer import StepTimer

logger = logging.getLogger("bench_cpu_precision")
ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "eval" / "results"
RECIPE = ROOT / "scripts" / "recipes" / "scifact_best.yaml"
SETTING = "scifact"
ROWS = "corpus_mined"
#: the precisions compared: name -> the recipe's ``mixed_precision``
PRECISIONS = {"fp32": "no", "bf16": "bf16"}
TIMING_STEPS = 4  # optimizer steps of each precision in the timing pass (the first, warm-up, not counted)
ENCODE_DOCUMENTS = 512  # SciFact documents encoded in the timing pass (after a warm-up batch)
DRY_RUN_ENCODE_DOCUMENTS = 16
ENCODE_BATCH = 64  # as retrieval_runs.score encodes
MATMUL_SIZE = 2048  # the reference matrix product: (n x n) @ (n x n)
EQUAL_QUALITY_POINTS = 0.5  # bf16's test nDCG@10 may be this much below fp32's and still count as equal
PROTOCOLS = {SETTING: RetrievalProtocol("scifact", dev_queries=81, note="the SciFact recipe's rows and schedule")}

#: FLOPs per cycle per core, by the first CPU flag present (else the last entry), and where the figure comes from
FLOPS_PER_CYCLE: dict[str, tuple[tuple[str | None, int, str], ...]] = {
    "fp32": (("avx512f", 64, "AVX-512 FMA: 2 units x 16 fp32 lanes x 2 FLOPs"),
             ("avx2", 32, "AVX2 FMA: 2 units x 8 fp32 lanes x 2 FLOPs"),
             (None, 8, "SSE: 2 units x 4 fp32 lanes")),
    "bf16": (("amx_bf16", 1024, ("AMX-BF16: TDPBF16PS, 16 x 16 x 32 multiply-adds per tile instruction, one each 16 cycles "
                                 "(Intel, Sapphire Rapids: 1024 bf16 FLOPs per cycle per core, against 64 fp32 with AVX-512)")),
             ("avx512_bf16", 128, "AVX512_BF16: VDPBF16PS, 2 units x 16 fp32 lanes x 2 bf16 products x 2 FLOPs"),
             (None, 0, "no bf16 instructions: bf16 is emulated in fp32 arithmetic, the fp32 figure applies")),
}


# --------------------------------------------------------------------------- the machine's peak


def cpu_clock_ghz(cpuinfo: str | Path = "/proc/cpuinfo") -> float | None:
    """The mean ``cpu MHz`` /proc/cpuinfo reports over the processors, in GHz (None without it)."""
    try:
        lines = Path(cpuinfo).read_text(encoding="utf-8", errors="replace").splitlines()
    except OSError:
        return None
    values = [float(line.partition(":")[2]) for line in lines if line.partition(":")[0].strip() == "cpu MHz"]
    return statistics.fmean(values) / 1000 if values else None


def flops_per_cycle(flags: frozenset[str] | set[str]) -> dict[str, dict[str, Any]]:
    """FLOPs per cycle per core for fp32 and bf16 given the CPU's ``flags``, each with its source."""
    out: dict[str, dict[str, Any]] = {}
    for precision, table in FLOPS_PER_CYCLE.items():
        flag, value, source = next(row for row in table if row[0] is None or row[0] in flags)
        out[precision] = {"flops_per_cycle": value or out["fp32"]["flops_per_cycle"], "flag": flag, "source": source}
    return out


def machine(threads: int, clock_ghz: float | None = None) -> dict[str, Any]:
    """The peak a run is measured against: ``threads`` cores x the clock x FLOPs per cycle per core
    (the clock /proc/cpuinfo reports unless ``clock_ghz`` is given)."""
    reported = cpu_clock_ghz()
    clock = clock_ghz if clock_ghz is not None else reported
    return {"cores": threads, "clock_ghz": clock, "clock_source": "--clock-ghz" if clock_ghz is not None else "/proc/cpuinfo cpu MHz",
            "cpu_count": os.cpu_count(), "per_core": flops_per_cycle(cpu_flags())}


def peak_gflops(block: Mapping[str, Any], precision: str) -> float | None:
    """The peak GFLOP/s of a :func:`machine` block for ``precision`` (None without a clock)."""
    if not block.get("clock_ghz"):
        return None
    return block["cores"] * block["clock_ghz"] * block["per_core"][precision]["flops_per_cycle"]


# --------------------------------------------------------------------------- counting FLOPs


def _sdpa_forward(query, key, value, *args, out_shape=None, **kwargs) -> int:
    from torch.utils.flop_counter import sdpa_flop_count

    return sdpa_flop_count(query, key, value)


def _sdpa_backward(grad_out, query, key, value, *args, out_shape=None, **kwargs) -> int:
    from torch.utils.flop_counter import sdpa_backward_flop_count

    return sdpa_backward_flop_count(grad_out, query, key, value)


def count_sequence_flops(model, length: int) -> tuple[int, int]:
    """``(forward, forward + backward)`` FLOPs of one sequence of ``length`` tokens through
    ``model`` (a SentenceTransformer, fp32, used as it is: call it on a copy), counted by
    ``FlopCounterMode`` with CPU attention given torch's SDPA formula."""
    from torch.utils.flop_counter import FlopCounterMode

    aten = torch.ops.aten
    mapping = {aten._scaled_dot_product_flash_attention_for_cpu: _sdpa_forward,
               aten._scaled_dot_product_flash_attention_for_cpu_backward: _sdpa_backward}
    device = next(model.parameters()).device
    features = {k: (torch.ones if k == "attention_mask" else torch.zeros)((1, length), dtype=torch.long, device=device)
                if isinstance(v, torch.Tensor) and v.dim() == 2 else v for k, v in model.preprocess(["x"]).items()}
    with FlopCounterMode(display=False, custom_mapping=mapping) as counter:
        output = model(features)["sentence_embedding"]
        forward = counter.get_total_flops()
        output.float().sum().backward()
    model.zero_grad(set_to_none=True)
    return forward, counter.get_total_flops()


class FlopCounter:
    """FLOPs of batches by their shape, one sequence length counted once (on a copy of the model,
    so the trained one is never touched). Training is counted in train mode, encoding in eval mode:
    with attention dropout (training) torch runs attention as plain matrix products, whose backward
    is 2 x their forward; without it, the fused CPU kernel, whose backward recomputes the scores
    (torch's formula: 2.5 x)."""

    def __init__(self, model) -> None:
        self.model = copy.deepcopy(model).float()
        self._by_length: dict[tuple[int, bool], tuple[int, int]] = {}
        named = list(self.model.named_parameters())
        self.non_embedding_parameters = sum(p.numel() for name, p in named if "embeddings" not in name)

    def sequence(self, length: int, training: bool) -> tuple[int, int]:
        """``(forward, forward + backward)`` FLOPs of one sequence of ``length`` tokens, in train or eval mode."""
        if (length, training) not in self._by_length:
            self.model.train(training)
            self._by_length[length, training] = count_sequence_flops(self.model, length)
        return self._by_length[length, training]

    def batches(self, shapes: Sequence[Sequence[int]], backward: bool) -> int:
        """FLOPs of forward calls of ``(rows, tokens)`` shapes: training steps with ``backward``
        (forward and backward, train mode), else encoding (forward, eval mode)."""
        return sum(rows * self.sequence(tokens, backward)[1 if backward else 0] for rows, tokens in shapes)

    def approximate(self, shapes: Sequence[Sequence[int]], backward: bool) -> float:
        """``6 x P x tokens`` (``2 x P x tokens`` without ``backward``), P the non-embedding parameters."""
        return (6 if backward else 2) * self.non_embedding_parameters * sum(rows * tokens for rows, tokens in shapes)


class ShapeLog(TrainerCallback):
    """The ``(rows, padded tokens)`` of every forward call of a SentenceTransformer's first module,
    grouped by optimizer step (``steps``, one list per step, as :class:`StepTimer` counts them) or,
    outside a step (encoding; the trainer's model-card examples), in ``calls``; and the autocast
    dtype the first call ran under (None: fp32).
    Use as a context manager: the hook is removed on exit."""

    def __init__(self, model) -> None:
        self.model = model
        self.steps: list[list[tuple[int, int]]] = []
        self.calls: list[tuple[int, int]] = []
        self.autocast: str | None = "unseen"
        self._in_step = False
        self._handle = None

    def _hook(self, module, args) -> None:
        mask = args[0]["attention_mask"]
        shape = (int(mask.shape[0]), int(mask.shape[1]))
        (self.steps[-1] if self._in_step else self.calls).append(shape)
        if self.autocast == "unseen":
            kind = mask.device.type
            self.autocast = str(torch.get_autocast_dtype(kind)).removeprefix("torch.") if torch.is_autocast_enabled(kind) else None

    def __enter__(self) -> Self:
        self._handle = self.model[0].register_forward_pre_hook(self._hook)
        return self

    def __exit__(self, *exc: object) -> None:
        self._handle.remove()

    def on_step_begin(self, args, state, control, **kwargs):
        self.steps.append([])
        self._in_step = True

    def on_step_end(self, args, state, control, **kwargs):
        self._in_step = False


def matmul_gflops(dtype: torch.dtype, size: int = MATMUL_SIZE, repeats: int = 5) -> float:
    """GFLOP/s of ``(size x size) @ (size x size)`` in ``dtype`` on the CPU (after one warm-up)."""
    a, b = torch.randn(size, size).to(dtype), torch.randn(size, size).to(dtype)
    a @ b
    start = time.perf_counter()
    for _ in range(repeats):
        a @ b
    return 2 * size**3 * repeats / (time.perf_counter() - start) / 1e9


# --------------------------------------------------------------------------- one run


def recipe_fields(precision: str, seed: int, max_steps: int, max_seq_length: int, data_dir: str | None) -> TrainingRecipe:
    """The SciFact recipe as a benchmark trains it: its loss, schedule and batch; ``precision``'s
    ``mixed_precision``; no dev or test scoring inside training, no checkpoints. ``ValueError``
    when its ``corpus_negatives`` differ from the rows the rows cache holds (:data:`CORPUS_MINER`)."""
    recipe = TrainingRecipe.from_file(RECIPE, {
        "mixed_precision": PRECISIONS[precision], "seed": seed, "max_steps": max_steps, "data_dir": data_dir,
        "dev_task": None, "eval_tasks": [], "save_steps": 10**6, "eval_steps": 10**6, "output_dir": "unused",
        "max_seq_length": max_seq_length})
    mined = CorpusNegatives.from_field(recipe.corpus_negatives)
    if (mined is None or mined.num_negatives != 1 or mined.range_max != CORPUS_MINER["range_max"]
            or mined.perc_pos != CORPUS_MINER["perc_pos"] or mined.sampling != CORPUS_MINER["sampling"]
            or recipe.epochs != PROTOCOLS[SETTING].epochs):
        raise ValueError(f"{RECIPE.name}: corpus_negatives {recipe.corpus_negatives} / epochs {recipe.epochs} no longer match the "
                         f"benchmark rows (one negative, {CORPUS_MINER}, {PROTOCOLS[SETTING].epochs} epochs); update "
                         "retrieval_runs.CORPUS_MINER or this benchmark")
    return recipe


def _bf16_autocast(device: str):
    return torch.autocast(device_type=torch.device(device).type, dtype=torch.bfloat16)


def encoding(model, documents: Sequence[str], precision: str, device: str, counter: FlopCounter) -> dict[str, Any]:
    """Seconds to encode ``documents`` (batch :data:`ENCODE_BATCH`, fp32 or under bf16 autocast;
    one warm-up batch first, not timed) and the FLOPs of their forward calls."""
    from contrastive_bert.embeddings import encode_normalized

    context = _bf16_autocast(device) if precision == "bf16" else contextlib.nullcontext()
    with context:
        encode_normalized(model, list(documents[:ENCODE_BATCH]), kind="document", batch_size=ENCODE_BATCH)
        with ShapeLog(model) as shapes:
            start = time.perf_counter()
            encode_normalized(model, list(documents), kind="document", batch_size=ENCODE_BATCH)
            seconds = time.perf_counter() - start
    return {"documents": len(documents), "seconds": seconds, "flops": counter.batches(shapes.calls, backward=False),
            "approx_6pt_flops": counter.approximate(shapes.calls, backward=False), "tokens": sum(r * t for r, t in shapes.calls),
            "autocast": shapes.autocast}


def run_one(precision: str, seed: int, ctx: TrainingRows, clock_ghz: float | None = None, timing_steps: int | None = None) -> dict:
    """One training run of the recipe in ``precision``: scored (the full pass), or with
    ``timing_steps`` only that many optimizer steps, timed, with the encoding and matrix-product
    rates, not scored."""
    args = ctx.args
    rows, rows_seconds, rows_cached = ctx.train_rows(SETTING, ROWS)
    torch.manual_seed(seed)
    model = retrieval_runs.base_model(args.device)
    recipe = recipe_fields(precision, seed, timing_steps or (DRY_RUN_STEPS if args.dry_run else -1), model.max_seq_length, args.data_dir)
    entry = get_loss_entry(recipe.loss)
    loss = entry.build(model, rows, recipe)
    counter = FlopCounter(model)  # before training: the trainer leaves its autocast wrapper on the model
    timer = StepTimer()
    start = time.perf_counter()
    with ShapeLog(model) as shapes, PeakMemory(args.device) as memory, tempfile.TemporaryDirectory() as output_dir:
        trainer = fit(model, rows, loss, recipe, output_dir, batch_sampler=entry.batch_sampler, callbacks=[timer, shapes])
    seconds = time.perf_counter() - start
    trainer.accelerator.unwrap_model(trainer.model, keep_fp32_wrapper=False)  # the model as saved: fp32 forward
    steps = trainer.state.global_step
    if steps == 0 or len(shapes.steps) != len(timer.durations):
        raise RuntimeError(f"{precision}: {steps} steps, {len(shapes.steps)} recorded, {len(timer.durations)} timed")
    if (shapes.autocast == "bfloat16") != (precision == "bf16"):
        raise RuntimeError(f"{precision}: the forward ran under autocast {shapes.autocast!r}")
    losses = [item["loss"] for item in trainer.state.log_history if "loss" in item]
    if losses and not all(math.isfinite(v) for v in losses):
        raise RuntimeError(f"{precision}: non-finite training loss")
    step_flops = [counter.batches(step, backward=True) for step in shapes.steps]
    record: dict[str, Any] = {
        "precision": precision, "mixed_precision": recipe.mixed_precision, "seed": seed, "steps": steps, "train_rows": len(rows),
        "step_seconds": timer.durations, "step_flops": step_flops,
        "step_approx_6pt_flops": [counter.approximate(step, backward=True) for step in shapes.steps],
        "step_tokens": [sum(r * t for r, t in step) for step in shapes.steps], "autocast": shapes.autocast,
        "memory": {"kind": memory.kind, "before_mb": memory.before_mb, "peak_mb": memory.peak_mb,
                   "training_mb": memory.peak_mb - memory.before_mb},
        "machine": machine(torch.get_num_threads(), clock_ghz), "torch_threads": torch.get_num_threads(),
        "last_loss": losses[-1] if losses else None, "dry_run": bool(args.dry_run),
    }
    if timing_steps:
        corpus = list(ctx.retrieval(SETTING).corpus.values())
        documents = corpus[:DRY_RUN_ENCODE_DOCUMENTS if args.dry_run else ENCODE_DOCUMENTS]
        return {**record, "part": "timing", "encoding": encoding(model, documents, precision, args.device, counter),
                "matmul_gflops": matmul_gflops(torch.bfloat16 if precision == "bf16" else torch.float32,
                                               size=256 if args.dry_run else MATMUL_SIZE),
                "load_average_1min": os.getloadavg()[0]}
    from contrastive_bert.evaluation.beir_evaluation import evaluate_retrieval_splits

    data = ctx.retrieval(SETTING)
    with ShapeLog(model) as scoring:
        scored = retrieval_runs.score(model, data, args)
    if scoring.autocast is not None:
        raise RuntimeError(f"{precision}: scoring ran under autocast {scoring.autocast!r}, not in fp32")
    with _bf16_autocast(args.device):  # the same model, queries and documents encoded in bf16
        bf16 = evaluate_retrieval_splits(model, data, ("validation", "test"), max_queries=DRY_RUN_STEPS * 8 if args.dry_run else None,
                                         batch_size=ENCODE_BATCH)
    return {**record, "part": "full", "train_seconds": seconds, "seconds_per_step": seconds / steps,
            "rows_seconds": rows_seconds, "rows_cached": rows_cached, "load_average_15min": os.getloadavg()[2],
            **scored, "bf16_encoding": {"dev": {m: bf16["validation"][m] for m in METRICS}, "test": {m: bf16["test"][m] for m in METRICS}}}


# --------------------------------------------------------------------------- the plan and the summary


def run_key(precision: str, seed: int) -> str:
    return f"full/{precision}/{seed}"


def timing_key(precision: str) -> str:
    return f"timing/{precision}"


def grid(seeds: Sequence[int] = (0,)) -> Grid:
    """Each precision once per seed (nothing to choose on dev: the recipe's configuration)."""
    methods = [Method(name, "mnrl", rows=ROWS, fields={"mixed_precision": mixed}) for name, mixed in PRECISIONS.items()]
    return Grid(methods, [SETTING], list(seeds), key=lambda run: run_key(run.method, run.seed),
                dev_score=lambda record: record["dev"]["ndcg_at_10"])


def _rate(flops: float, seconds: float, record: Mapping[str, Any], precision: str) -> dict[str, float | None]:
    gflops = flops / seconds / 1e9
    peak = peak_gflops(record["machine"], precision)
    return {"gflops_per_second": gflops, "peak_gflops": peak, "fraction_of_peak": gflops / peak if peak else None}


def timing_entry(record: Mapping[str, Any]) -> dict[str, Any]:
    """One precision's timing: the median step after the first, the FLOP rate of those steps
    (their FLOPs over their seconds) against the peak, the same for encoding."""
    precision = record["precision"]
    seconds, flops = record["step_seconds"][1:] or record["step_seconds"], record["step_flops"][1:] or record["step_flops"]
    approx = record["step_approx_6pt_flops"][1:] or record["step_approx_6pt_flops"]
    enc = record["encoding"]
    matmul_peak = peak_gflops(record["machine"], precision)
    return {
        "median_step_seconds": statistics.median(seconds), "steps_counted": len(seconds), "flops_per_step": statistics.fmean(flops),
        "approx_6pt_over_counted": sum(approx) / sum(flops), "autocast": record["autocast"],
        **_rate(sum(flops), sum(seconds), record, precision),
        "peak_memory_mb": record["memory"]["peak_mb"], "training_memory_mb": record["memory"]["training_mb"],
        "encoding": {"documents_per_second": enc["documents"] / enc["seconds"], "flops_per_document": enc["flops"] / enc["documents"],
                     "tokens_per_document": enc["tokens"] / enc["documents"], **_rate(enc["flops"], enc["seconds"], record, precision)},
        "matmul": {"gflops_per_second": record["matmul_gflops"],
                   "fraction_of_peak": record["matmul_gflops"] / matmul_peak if matmul_peak else None},
        "machine": record["machine"], "load_average_1min": record["load_average_1min"], "torch_threads": record["torch_threads"],
    }


def full_entry(record: Mapping[str, Any]) -> dict[str, Any]:
    """One precision's full run: scores (fp32 encoding, and bf16 encoding), time, the run's FLOP rate
    (every step's FLOPs over the training seconds, data loading included)."""
    return {"dev": record["dev"], "test": record["test"], "general": record["general"], "bf16_encoding": record["bf16_encoding"],
            "steps": record["steps"], "train_rows": record["train_rows"], "train_seconds": record["train_seconds"],
            "seconds_per_step": record["seconds_per_step"], "median_step_seconds": statistics.median(record["step_seconds"]),
            **_rate(sum(record["step_flops"]), record["train_seconds"], record, record["precision"]),
            "peak_memory_mb": record["memory"]["peak_mb"], "autocast": record["autocast"], "seed": record["seed"],
            "load_average_15min": record["load_average_15min"]}


def comparison(timing: Mapping[str, dict], full: Mapping[str, dict]) -> dict[str, Any]:
    """bf16 against fp32: speed ratios (fp32 seconds / bf16 seconds: above 1, bf16 is faster), the
    test nDCG@10 difference (bf16 minus fp32), and whether ``auto`` should pick bf16 on such a CPU."""
    out: dict[str, Any] = {"equal_quality_points": EQUAL_QUALITY_POINTS}
    if "fp32" in timing and "bf16" in timing:
        out["step_speed_ratio"] = timing["fp32"]["median_step_seconds"] / timing["bf16"]["median_step_seconds"]
        out["encoding_speed_ratio"] = timing["bf16"]["encoding"]["documents_per_second"] / timing["fp32"]["encoding"]["documents_per_second"]
    if "fp32" in full and "bf16" in full:
        out["train_seconds_ratio"] = full["fp32"]["train_seconds"] / full["bf16"]["train_seconds"]
        out["bf16_minus_fp32_test_ndcg_at_10"] = full["bf16"]["test"]["ndcg_at_10"] - full["fp32"]["test"]["ndcg_at_10"]
        out["bf16_encoding_minus_fp32_test_ndcg_at_10"] = {p: full[p]["bf16_encoding"]["test"]["ndcg_at_10"] - full[p]["test"]["ndcg_at_10"]
                                                          for p in ("fp32", "bf16")}
    speed, diff = out.get("step_speed_ratio"), out.get("bf16_minus_fp32_test_ndcg_at_10")
    out["pending"] = speed is None or diff is None
    out["bf16_for_auto"] = None if out["pending"] else bool(speed > 1 and diff >= -EQUAL_QUALITY_POINTS)
    return out


def summarize(records: list[dict], dry_run: bool = False, seed: int = 0) -> dict[str, Any]:
    """``timing`` and ``full`` (at ``seed``) per precision, the runs of this mode only (a dry run's
    numbers never mix with a real run's), and their ``comparison``."""
    mine = [r for r in records if bool(r.get("dry_run")) == dry_run]
    timing = {p: timing_entry(r) for p in PRECISIONS if (r := next((x for x in mine if x["key"] == timing_key(p)), None))}
    full = {p: full_entry(r) for p in PRECISIONS if (r := next((x for x in mine if x["key"] == run_key(p, seed)), None))}
    return {"timing": timing, "full": full, "comparison": comparison(timing, full)}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter)
    add_common_arguments(parser, output=RESULTS / "cpu_precision.json", run_log=RESULTS / "cpu_precision_runs.jsonl",
                         seeds=[0], methods=list(PRECISIONS))
    retrieval_runs.add_run_arguments(parser, (SETTING,), default=SETTING)
    parser.add_argument("--timing", action="store_true",
                        help=f"the timing pass instead of the full one: each precision not yet timed, {TIMING_STEPS} optimizer steps "
                             f"and {ENCODE_DOCUMENTS} documents encoded, back to back in this process (run it on a quiet machine)")
    parser.add_argument("--clock-ghz", type=float, default=None,
                        help="the core clock the peak is computed at (default: what /proc/cpuinfo reports)")
    args = parser.parse_args(argv)
    if args.clock_ghz is not None and not args.clock_ghz > 0:
        raise ValueError(f"--clock-ghz: expected a positive number, got {args.clock_ghz}")
    budget = setup_from_args(args)
    retrieval_runs.chosen_settings(args, (SETTING,))
    if args.dry_run:  # a smoke run never writes under eval/results
        scratch = Path(tempfile.gettempdir()) / "bench_cpu_precision_dry_run"
        if Path(args.output) == RESULTS / "cpu_precision.json":
            args.output = str(scratch / "cpu_precision.json")
        if Path(args.run_log) == RESULTS / "cpu_precision_runs.jsonl":
            args.run_log = str(scratch / "cpu_precision_runs.jsonl")
        logger.info("dry run: results in %s, run log %s", args.output, args.run_log)
    precisions = selected(args, list(PRECISIONS))
    log = RunLog(args.run_log)
    output = Path(args.output)

    def write_summary() -> None:
        recipe = TrainingRecipe.read_file(RECIPE)
        write_results(output, {"benchmark": "bench_cpu_precision", "dry_run": bool(args.dry_run),
                               "protocol": {"recipe": str(RECIPE.relative_to(ROOT)), "rows": "our corpus-mined triplets (the rows cache)",
                                            "training": {k: recipe.get(k) for k in ("loss", "loss_options", "epochs", "batch_size",
                                                                                     "learning_rate", "warmup_ratio", "max_seq_length")},
                                            "precisions": PRECISIONS, "seeds": args.seeds, "timing_steps": TIMING_STEPS,
                                            "encode_documents": ENCODE_DOCUMENTS, "encode_batch": ENCODE_BATCH,
                                            "flops": "counted (FlopCounterMode per sequence length, attention included), forward + "
                                                     "backward for training; peak = cores x clock x FLOPs per cycle per core"},
                               "machine": machine(args.threads, args.clock_ghz),
                               **summarize(log.records(), dry_run=bool(args.dry_run), seed=args.seeds[0])}, device=args.device)

    if args.summary_only:
        write_summary()
        return 0
    ctx = TrainingRows(args, PROTOCOLS)
    if args.timing:
        for precision in precisions:
            if not log.done(timing_key(precision)):
                record = log.append(timing_key(precision), run_one(precision, args.seeds[0], ctx, args.clock_ghz,
                                                                  DRY_RUN_STEPS if args.dry_run else TIMING_STEPS))
                logger.info("timed %s: %.2f s a step, encoding %.1f documents a second", precision,
                            statistics.median(record["step_seconds"][1:] or record["step_seconds"]),
                            record["encoding"]["documents"] / record["encoding"]["seconds"])
                write_summary()
        write_summary()
        return 0

    def make(run: Run) -> dict:
        return run_one(run.method, run.seed, ctx, args.clock_ghz)

    return run_plan(grid(args.seeds), log, precisions, args, budget, make, key=lambda run: run_key(run.method, run.seed),
                    write_summary=write_summary,
                    report=lambda r: (f"test nDCG@10 {r['test']['ndcg_at_10']:.2f} ({r['train_seconds']:.0f} s, "
                                      f"{r['seconds_per_step']:.2f} s/step, autocast {r['autocast']})"))


if __name__ == "__main__":
    raise SystemExit(main())
