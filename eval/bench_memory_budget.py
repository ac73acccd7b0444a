"""Training under a memory budget: at a fixed micro-batch (what fits in memory), which way of
training trains the best retriever, at what time and memory?

The protocol (SciFact, the retrieval benchmark's rows and scoring,
:mod:`contrastive_bert.training.retrieval_runs`): the bundled all-MiniLM-L6-v2, 256 tokens,
3 epochs over our corpus-mined triplets (query, relevant document, mined negative: what the
recipes train on), micro-batch 8, total batch 64 (8 micro-batches per optimizer step), warm-up 10%;
MTEB-protocol nDCG@10 on dev and test and the general-ability block.

Methods (ST: sentence-transformers' own losses):

1. ``mnrl_accumulated`` (ST): MNRL with gradient accumulation, what a sentence-transformers user
   gets today: 15 negatives per query (its micro-batch's), not 127;
2. ``cached_mnrl`` (ST): CachedMNRL (GradCache) at batch 64 in mini-batches of 8: the exact
   large-batch gradient in small memory, at a second forward pass;
3. ``mnrl_large`` (ST): MNRL at batch 64, no accumulation: the large-memory reference;
4. ``mnrl_large_checkpointing`` (ST): the same with gradient checkpointing;
5. ``queue_fifo``: ``queue_infonce`` with today's queue (past positives only, FIFO, the seed's size);
6. ``queue_dual_step``: ``queue_infonce`` with ``dual_bank`` and ``bank_scope: "step"`` (ContAccum:
   the bank holds the anchors and documents of the optimizer step's earlier micro-batches);
7. ``queue_dual_fifo``: the dual bank kept across steps (128 rows: two steps).

Rows 2-4 compute the same large-batch gradient, so they take row 3's dev choice (cost rows that
also confirm equal quality); every other row tries learning rates 5e-5 and 2e-5 on dev at seed 0.
Seeds 1-2 for the decisive rows (the best ST row of 1-3, the best of ours, its ablation), then
NFCorpus's one-epoch CPU protocol on SciFact's choices. Each run records test and dev nDCG@10,
seconds per optimizer step, training seconds, the peak memory of training alone
(:class:`~contrastive_bert.training.retrieval_runs.PeakMemory`: RSS here, the CUDA
allocator's peak on a GPU) and, for the queue rows, the gradient norm of the anchor side and of the
document side per step (ContAccum's diagnosis of a passage-only bank).

Resumable: each finished run is appended to ``memory_budget_runs.jsonl``; ``memory_budget.json``
(+ ``memory_budget.png``) is rebuilt after every run.

    OMP_NUM_THREADS=2 nohup .venv/bin/python eval/bench_memory_budget.py --threads 2 --max-runs 1 > mb.log 2>&1 &
"""

from __future__ import annotations

import argparse
import logging
import math
import os
import tempfile
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

import torch

from contrastive_bert.benchmarking import RunLog, add_common_arguments, mean_std, selected, setup_from_args, write_results
from contrastive_bert.training import retrieval_runs
from contrastive_bert.benchmarking.arguments import DRY_RUN_STEPS
from contrastive_bert.benchmarking.plan_loop import NOTHING_LEFT, run_plan  # noqa: F401 (NOTHING_LEFT: the loop's exit status)
from contrastive_bert.benchmarking.protocol import Grid, Method, Run, choose_on_dev, paired_difference
from contrastive_bert.training.retrieval_runs import METRICS, PeakMemory, RetrievalProtocol, TrainingRows
from contrastive_bert.training import TrainingRecipe, fit, get_loss_entry
from contrastive_bert.training.queue_probe import QueueNegativeProbe
from contrastive_bert.training.step_timer import StepTimer

logger = logging.getLogger("bench_memory_budget")
RESULTS = Path(__file__).resolve().parent / "results"
MICRO_BATCH = 8
TOTAL_BATCH = 64
ACCUMULATION = TOTAL_BATCH // MICRO_BATCH
LR = (5e-5, 2e-5)  # the recipes' rate first: it wins ties
TIMING_STEPS = 4  # optimizer steps of each method in the timing pass (the first one, warm-up, not counted)
ROWS = "corpus_mined"

PROTOCOLS = {
    "scifact": RetrievalProtocol("scifact", dev_queries=81, note="the grid: every method, its learning rates on dev, seeds for the decisive rows"),
    "nfcorpus_cpu": RetrievalProtocol("nfcorpus", epochs=1, max_positives=1, follows="scifact", dev_queries=324,
                                      note="the retrieval benchmark's CPU protocol (one positive per query, one epoch): the decisive "
                                           "rows at SciFact's dev-chosen configurations, 3 seeds"),
}
SETTINGS = tuple(PROTOCOLS)

#: the queue rows' scoring: MNRL's scale (1 / 0.05 = 20); no margin filter, so a bank negative
#: counts as it would in a large batch; rows of the same query text stay out (a query with several
#: positives meets its other positives in the bank, never inside one batch of 64)
QUEUE = {"temperature": 0.05, "relative_margin": None, "num_hard_negatives": 0}


def method(name: str, loss: str, baseline: bool, options: Mapping[str, Any], *, batch_size: int = MICRO_BATCH,
           accumulation: int = ACCUMULATION, checkpointing: bool = False, builds_on: str | None = None,
           ablations: tuple[str, ...] = (), note: str = "") -> Method:
    """One row: a registered loss at ``batch_size`` x ``accumulation`` (= :data:`TOTAL_BATCH` rows
    an optimizer step), its learning rates tried on dev (or, with ``builds_on``, that row's choice)."""
    configs = ({},) if builds_on else tuple({"learning_rate": lr} for lr in LR)
    return Method(name, loss, configs, options=dict(options), rows=ROWS, builds_on=builds_on,
                  fields={"baseline": baseline, "batch_size": batch_size, "gradient_accumulation_steps": accumulation,
                          "gradient_checkpointing": checkpointing, "ablations": ablations, "note": note})


METHODS: dict[str, Method] = {m.name: m for m in (
    method("mnrl_accumulated", "mnrl", True, {"scale": 20.0},
           note="MNRL, micro-batch 8 x 8 accumulated: the negatives of one micro-batch"),
    method("mnrl_large", "mnrl", True, {"scale": 20.0}, batch_size=TOTAL_BATCH, accumulation=1,
           note="MNRL at batch 64: the large-memory reference"),
    method("queue_dual_step", "queue_infonce", False, {**QUEUE, "dual_bank": True, "bank_scope": "step"},
           ablations=("mnrl_accumulated",),
           note="ContAccum: a dual bank (anchors and documents) of the optimizer step's earlier micro-batches"),
    method("cached_mnrl", "cached_mnrl", True, {"scale": 20.0, "mini_batch_size": MICRO_BATCH}, batch_size=TOTAL_BATCH,
           accumulation=1, builds_on="mnrl_large", note="CachedMNRL (GradCache) at batch 64, mini-batches of 8: exact, two forwards"),
    method("mnrl_large_checkpointing", "mnrl", True, {"scale": 20.0}, batch_size=TOTAL_BATCH, accumulation=1, checkpointing=True,
           builds_on="mnrl_large", note="MNRL at batch 64 with gradient checkpointing"),
    method("queue_fifo", "queue_infonce", False, QUEUE, ablations=("mnrl_accumulated",),
           note="today's queue: past positives only (a passage-only bank), FIFO, the seed's size"),
    method("queue_dual_fifo", "queue_infonce", False, {**QUEUE, "dual_bank": True, "bank_scope": "fifo", "queue_size": 2 * TOTAL_BATCH},
           ablations=("queue_dual_step", "queue_fifo"),
           note="the dual bank kept across optimizer steps (128 rows: two steps, the older one a step stale)"),
)}


def run_key(setting: str, method_name: str, config: int, seed: int) -> str:
    return f"{setting}/{method_name}/{config}/{seed}"


def _best_on_dev(scores: Mapping[str, float], baseline: bool, among: Sequence[str] | None = None) -> str | None:
    """The ST method (``baseline``) or the method of ours with the best dev score (the first on
    ties), among ``among`` if given; None without one."""
    return choose_on_dev({name: score for name, score in scores.items()
                          if METHODS[name].fields["baseline"] == baseline and (among is None or name in among)})


ST_CANDIDATES = ("mnrl_accumulated", "cached_mnrl", "mnrl_large")


def decisive_rows(scores: Mapping[str, float]) -> list[str]:
    """The rows that get more seeds: the best ST row among 1-3, the best of ours, its ablations."""
    ours = _best_on_dev(scores, False)
    ablations = METHODS[ours].fields["ablations"] if ours else ()
    return [name for name in dict.fromkeys([_best_on_dev(scores, True, ST_CANDIDATES), ours, *ablations]) if name in scores]


def run_order(settings: Sequence[str], seeds: Sequence[int]) -> Callable[[Run], tuple]:
    """SciFact first: every method at the tuning seed, configuration by configuration (the
    recipes' 5e-5 first), in :data:`METHODS` order; then the decisive rows seed by seed; then
    the following setting seed by seed."""
    names = list(METHODS)

    def key(run: Run) -> tuple:
        if PROTOCOLS[run.setting].follows:
            return (1, settings.index(run.setting), seeds.index(run.seed), names.index(run.method))
        tuning = run.seed == seeds[0]
        return (0, settings.index(run.setting), not tuning, run.config if tuning else seeds.index(run.seed), names.index(run.method))
    return key


def grid(settings: Sequence[str] = SETTINGS, seeds: Sequence[int] = (0, 1, 2)) -> Grid:
    return Grid(list(METHODS.values()), list(settings), list(seeds),
                key=lambda run: run_key(run.setting, run.method, run.config, run.seed),
                dev_score=lambda record: record["dev"]["ndcg_at_10"],
                follows={name: p.follows for name, p in PROTOCOLS.items() if p.follows},
                select={name: decisive_rows for name in PROTOCOLS},
                order=run_order(list(settings), list(seeds)))


def run_one(setting: str, name: str, options: Mapping[str, Any], config: int, seed: int, ctx: TrainingRows,
            timing_steps: int | None = None) -> dict:
    """One training run, scored; with ``timing_steps``, only that many optimizer steps, timed, not scored."""
    args = ctx.args
    method_ = METHODS[name]
    fields = method_.fields
    options = dict(options)
    learning_rate = options.pop("learning_rate")
    rows, rows_seconds, rows_cached = ctx.train_rows(setting, ROWS)
    torch.manual_seed(seed)
    model = retrieval_runs.base_model(args.device, args.model)
    recipe = TrainingRecipe(
        datasets=[PROTOCOLS[setting].data], loss=method_.loss, loss_options=dict(options), epochs=PROTOCOLS[setting].epochs,
        max_steps=timing_steps or (DRY_RUN_STEPS if args.dry_run else -1), batch_size=fields["batch_size"], learning_rate=learning_rate,
        gradient_accumulation_steps=fields["gradient_accumulation_steps"], gradient_checkpointing=fields["gradient_checkpointing"],
        max_seq_length=model.max_seq_length, seed=seed, save_steps=10**6, eval_steps=10**6, logging_steps=5,
        data_dir=args.data_dir, dev_task=None, eval_tasks=[],
    )
    entry = get_loss_entry(method_.loss)
    loss = entry.build(model, rows, recipe)
    queue_loss = getattr(loss, "loss", loss)  # the cached queue loss wraps the plain one
    probe = None
    if hasattr(queue_loss, "miner"):  # what the queue holds and ContAccum's gradient-norm diagnosis
        probe = QueueNegativeProbe(queue_loss, retrieval_runs.relevance_by_text_id(model, ctx.retrieval(setting)))
    timer = StepTimer()
    start = time.perf_counter()
    with PeakMemory(args.device) as memory, tempfile.TemporaryDirectory() as output_dir:
        trainer = fit(model, rows, loss, recipe, output_dir, batch_sampler=entry.batch_sampler, callbacks=[timer])
    seconds = time.perf_counter() - start
    steady = timer.durations[1:] or timer.durations  # the first step warms up (allocations, lazy queue)
    step_seconds = sorted(steady)[len(steady) // 2] if steady else None
    if probe is not None:
        probe.close()
    steps = trainer.state.global_step
    if steps == 0:
        raise RuntimeError(f"{setting}/{name}: no training step was taken ({len(rows)} rows)")
    losses = [item["loss"] for item in trainer.state.log_history if "loss" in item]
    if losses and not all(math.isfinite(v) for v in losses):
        raise RuntimeError(f"{setting}/{name}: non-finite training loss")
    memory_record = {"kind": memory.kind, "before_mb": memory.before_mb, "peak_mb": memory.peak_mb,
                     "training_mb": memory.peak_mb - memory.before_mb}
    if timing_steps:
        return {"setting": setting, "method": name, "part": "timing", "options": options, "steps": steps,
                "step_seconds": timer.durations, "median_step_seconds": step_seconds, "memory": memory_record,
                "load_average_1min": os.getloadavg()[0], "torch_threads": torch.get_num_threads(), "dry_run": bool(args.dry_run)}
    return {
        "setting": setting, "method": name, "config": config, "seed": seed, "learning_rate": learning_rate, "options": options,
        "batch_size": fields["batch_size"], "gradient_accumulation_steps": fields["gradient_accumulation_steps"],
        "gradient_checkpointing": fields["gradient_checkpointing"], "steps": steps, "train_rows": len(rows),
        "train_seconds": seconds, "seconds_per_step": seconds / steps, "median_step_seconds": step_seconds,
        "rows_seconds": rows_seconds, "rows_cached": rows_cached, "memory": memory_record,
        "load_average_15min": os.getloadavg()[2], "torch_threads": torch.get_num_threads(),
        "queue_probe": None if probe is None else probe.summary(),
        "gradient_norms": None if probe is None else probe.gradient_norm_summary(),
        "last_loss": losses[-1] if losses else None, "dry_run": bool(args.dry_run),
        **retrieval_runs.score(model, ctx.retrieval(setting), args),
    }


def _untrained(setting: str, ctx: TrainingRows) -> dict:
    record = retrieval_runs.score(retrieval_runs.base_model(ctx.args.device, ctx.args.model), ctx.retrieval(setting), ctx.args)
    return {"setting": setting, "method": "untrained", "dry_run": bool(ctx.args.dry_run), **record}


def _mean(records: list[dict], get: Callable[[dict], float | None]) -> dict | None:
    values = [get(r) for r in records]
    return mean_std(values) if values and all(v is not None for v in values) else None


def _row(plan: Grid, log: Mapping[str, dict], setting: str, method_: Method) -> dict | None:
    """A method's summary: the dev-chosen configuration, test mean/std over the seeds so far, and
    its cost (seconds per optimizer step, training seconds, peak memory) and diagnostics."""
    entry = plan.entry(log, setting, method_, test=lambda r: {m: r["test"][m] for m in METRICS}, dev=lambda r: r["dev"],
                       fields=lambda done: {"done": done})
    if entry is None:
        return None
    done = entry.pop("done", [])
    # cost from the runs on the first run's kind of machine only (a run merged from a GPU bundle
    # reports the CUDA allocator's peak and GPU seconds: not to be averaged with RSS and CPU seconds)
    costed = [r for r in done if r["memory"]["kind"] == done[0]["memory"]["kind"]] if done else []
    fields = method_.fields
    return {
        "baseline": fields["baseline"], "loss": method_.loss, "note": fields["note"], "ablations": list(fields["ablations"]),
        "batch_size": fields["batch_size"], "gradient_accumulation_steps": fields["gradient_accumulation_steps"],
        "gradient_checkpointing": fields["gradient_checkpointing"], "builds_on": method_.builds_on,
        "options": entry["chosen_on_dev"]["options"],
        "chosen_on_dev": {k: entry["chosen_on_dev"][k] for k in ("config", "configs_tried", "configs_planned", "dev_by_config")},
        "dev": entry["dev"], "test": entry["test"], "seeds": entry["seeds"], "seeds_planned": entry["seeds_planned"],
        "steps": entry["cost"].get("steps"), "train_rows": entry["cost"].get("train_rows"),
        "train_seconds": _mean(costed, lambda r: r["train_seconds"]) if costed else entry["cost"].get("train_seconds"),
        "seconds_per_step": _mean(costed, lambda r: r["seconds_per_step"]),
        "peak_memory_mb": _mean(costed, lambda r: r["memory"]["peak_mb"]),
        "training_memory_mb": _mean(costed, lambda r: r["memory"]["training_mb"]),
        "memory_kind": costed[0]["memory"]["kind"] if costed else None, "cost_runs": len(costed),
        "gradient_norms": _mean(done, lambda r: (r.get("gradient_norms") or {}).get("document_over_anchor")),
        "stsb": _mean(done, lambda r: r["general"]["stsb"]),
        "zero_shot_mean": _mean(done, lambda r: r["general"]["zero_shot_mean"]),
    }


def verdict(methods: dict[str, dict], decisive: list[str]) -> dict[str, Any]:
    """Best ST row of 1-3 and best of ours (on dev), ours minus theirs and ours minus its
    ablations, paired by seed (``benchmarking.protocol.paired_difference``)."""
    dev = {name: row["dev"]["ndcg_at_10"] for name, row in methods.items() if row.get("dev")}
    baseline, ours = _best_on_dev(dev, True, ST_CANDIDATES), _best_on_dev(dev, False)
    out: dict[str, Any] = {"baseline": baseline, "ours": ours, "decisive": decisive}
    if baseline and ours:
        out["ours_minus_baseline"] = paired_difference(methods[ours], methods[baseline], "ndcg_at_10")
        out["ours_minus_ablations"] = {a: paired_difference(methods[ours], methods[a], "ndcg_at_10")
                                       for a in METHODS[ours].fields["ablations"] if a in methods}
        if "mnrl_accumulated" in methods and ours != "mnrl_accumulated":
            out["ours_minus_accumulated_mnrl"] = paired_difference(methods[ours], methods["mnrl_accumulated"], "ndcg_at_10")
        if "cached_mnrl" in methods:
            out["ours_minus_cached_mnrl"] = paired_difference(methods[ours], methods["cached_mnrl"], "ndcg_at_10")
    out["pending"] = not (baseline and ours and decisive)
    return out


DUAL_BANKS = ("queue_dual_step", "queue_dual_fifo")


def conclusion(summary: Mapping[str, Any], missing_runs: int) -> dict[str, Any]:
    """The issue's rule, applied once every setting's plan is done: the dual bank becomes the
    package's recommendation for small-memory training when, in every setting, the best of ours is
    a dual bank that beats accumulated MNRL by more than the seed noise (paired, every seed the same
    sign, |mean| > std), is not clearly below CachedMNRL (paired), and takes less time a step than
    CachedMNRL in the timing pass. ``missing_runs``: what the whole plan still has to run;
    ``status``: "pending" (runs to go), else "final"; ``checks``: each condition per setting, so a
    reader sees which one failed."""
    settings = [s for s in SETTINGS if s in summary]
    if len(settings) < len(SETTINGS) or missing_runs:
        return {"status": "pending", "missing_runs": missing_runs, "dual_bank_recommended": False}
    timing = summary.get("timing") or {}

    def step_seconds(name: str | None) -> float | None:
        return (timing.get(name) or {}).get("median_step_seconds") if name else None

    checks: dict[str, dict[str, bool]] = {}
    for setting in settings:
        verdict = summary[setting]["verdict"]
        ours = verdict.get("ours")
        over_accumulated = verdict.get("ours_minus_accumulated_mnrl") or {}
        over_cached = verdict.get("ours_minus_cached_mnrl") or {}
        ours_s, cached_s = step_seconds(ours), step_seconds("cached_mnrl")
        checks[setting] = {
            "ours_is_a_dual_bank": ours in DUAL_BANKS,
            "beats_accumulated_mnrl": bool(over_accumulated.get("clear")) and over_accumulated.get("mean", 0.0) > 0,
            "matches_cached_mnrl": bool(over_cached) and not (over_cached.get("clear") and over_cached["mean"] < 0),
            "faster_than_cached_mnrl": ours_s is not None and cached_s is not None and ours_s < cached_s,
        }
    return {"status": "final", "missing_runs": 0, "checks": checks,
            "dual_bank_recommended": all(all(c.values()) for c in checks.values())}


def timing_key(name: str) -> str:
    return f"timing/{name}"


def timing_summary(records: list[dict]) -> dict[str, dict] | None:
    """The timing pass (one process, nothing else running, every method back to back): per method
    the median seconds of an optimizer step after the first. Its memory is left out: in one process
    what an earlier method's allocator kept hides the next one's (CachedMNRL measured 0 MiB of its
    own after MNRL at 64); the grid's runs, one training a process, give each method's peak."""
    timed = {r["method"]: r for r in records if r.get("part") == "timing" and not r.get("dry_run")}
    if not timed:
        return None
    return {name: {"median_step_seconds": r["median_step_seconds"], "steps": r["steps"], "load_average_1min": r["load_average_1min"]}
            for name in METHODS if (r := timed.get(name))}


def summarize(records: list[dict], seeds: list[int]) -> dict:
    out: dict[str, Any] = {}
    timing = timing_summary(records)
    if timing:
        out["timing"] = timing
    records = [r for r in records if r.get("part") != "timing"]
    log = {r["key"]: r for r in records if not r.get("dry_run")}
    plan = grid(SETTINGS, seeds)
    for setting in SETTINGS:
        mine = [r for r in records if r["setting"] == setting and not r.get("dry_run")]
        untrained = next((r for r in mine if r["method"] == "untrained"), None)
        if untrained is None:
            continue
        methods = {name: row for name, m in METHODS.items() if (row := _row(plan, log, setting, m)) is not None}
        decisive = plan.selected(log, setting) or []
        out[setting] = {"verdict": verdict(methods, decisive), "untrained": {"dev": untrained["dev"], "test": untrained["test"],
                                                                             **untrained["general"]},
                        "methods": methods, "decisive": decisive,
                        "protocol": {"data": PROTOCOLS[setting].data, "epochs": PROTOCOLS[setting].epochs,
                                     "max_positives_per_query": PROTOCOLS[setting].max_positives,
                                     "follows": PROTOCOLS[setting].follows, "note": PROTOCOLS[setting].note},
                        "missing_runs": len(plan.plan(log, settings=[setting]))}
    out["conclusion"] = conclusion(out, len(plan.plan(log)))
    return out


MARKERS = ("o", "s", "^", "v", "D", "P", "X")  # one per method (METHODS order), named in the legend


def plot(summary: dict, path: Path) -> None:
    """Test nDCG@10 (mean ± std) against seconds per optimizer step, one marker per method, named in
    the legend with its seeds and peak memory; grey: sentence-transformers, blue: ours. The seconds are the timing
    pass's (quiet machine, every method back to back; the grid's runs shared the machine at times),
    the grid's own where a method was not timed."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    settings = [s for s in SETTINGS if s in summary and summary[s]["methods"]]
    if not settings:
        return
    timing = summary.get("timing") or {}
    titles = {"scifact": "SciFact", "nfcorpus_cpu": "NFCorpus (CPU protocol)"}
    fig, axes = plt.subplots(1, len(settings), figsize=(7.5 * len(settings), 5), squeeze=False)
    for ax, setting in zip(axes[0], settings):
        block = summary[setting]
        points = []
        for name, row in block["methods"].items():
            timed = (timing.get(name) or {}).get("median_step_seconds")
            x = timed if timed else (row.get("seconds_per_step") or {}).get("mean")
            if row["test"] and x is not None:
                points.append((x, name, row, bool(timed)))
        for x, name, row, timed in sorted(points, key=lambda point: point[0]):
            y = row["test"]["ndcg_at_10"]["mean"]
            color = "tab:gray" if row["baseline"] else "tab:blue"
            memory = row["peak_memory_mb"]["mean"] / 1024 if row["peak_memory_mb"] else float("nan")
            label = f"{name} ({len(row['seeds'])} seed{'s' if len(row['seeds']) > 1 else ''}), {memory:.1f} GiB" + ("" if timed else ", grid's s")
            ax.errorbar([x], [y], yerr=[row["test"]["ndcg_at_10"]["std"]], fmt=MARKERS[list(METHODS).index(name) % len(MARKERS)],
                        color=color, capsize=3, markersize=7, label=label)
        ax.axhline(block["untrained"]["test"]["ndcg_at_10"], color="k", linestyle="--", linewidth=1, label="untrained")
        ax.legend(loc="lower right", fontsize=7)
        ax.set_xlabel(f"seconds per optimizer step of {TOTAL_BATCH} rows (timing pass, 2 CPU cores)")
        ax.set_ylabel("test nDCG@10 (mean ± std; (n) seeds)")
        ax.set_title(titles.get(setting, setting))
    fig.suptitle(f"Micro-batch {MICRO_BATCH}, {TOTAL_BATCH} rows a step: grey = sentence-transformers, blue = contrastive_bert; "
                 "peak memory of training in the legend")
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter)
    add_common_arguments(parser, output=RESULTS / "memory_budget.json", run_log=RESULTS / "memory_budget_runs.jsonl",
                         seeds=[0, 1, 2], methods=list(METHODS))
    retrieval_runs.add_run_arguments(parser, SETTINGS)
    parser.add_argument("--timing", action="store_true",
                        help=f"the timing pass instead of the grid: every method not yet timed, {TIMING_STEPS} optimizer steps each, "
                             "back to back in this process (run it on a quiet machine)")
    parser.add_argument("--model", default="default",
                        help="the model trained (default: the bundled all-MiniLM-L6-v2; e.g. BAAI/bge-base-en-v1.5 on a GPU "
                             "machine that has its weights); another model needs its own --output and --run-log")
    args = parser.parse_args(argv)
    if args.model != "default" and Path(args.run_log) == RESULTS / "memory_budget_runs.jsonl":
        raise ValueError("--model: another model's runs go to their own files; give --output and --run-log too")
    budget = setup_from_args(args)
    settings = retrieval_runs.chosen_settings(args, SETTINGS)
    methods = selected(args, list(METHODS))
    log = RunLog(args.run_log)
    output = Path(args.output)

    def write_summary() -> None:
        summary = summarize(log.records(), args.seeds)
        write_results(output, {"protocol": {"micro_batch": MICRO_BATCH, "total_batch": TOTAL_BATCH, "accumulation": ACCUMULATION,
                                            "rows": "our corpus-mined triplets (query, relevant document, mined negative)",
                                            "max_seq_length": retrieval_runs.MAX_SEQ_LENGTH, "learning_rates": list(LR),
                                            "seeds": args.seeds, "queue_scoring": QUEUE, "model": args.model,
                                            "tuning": "learning rates 5e-5 and 2e-5 on dev at the first seed (rows 2 and 4: row 3's "
                                                      "choice); the other seeds for the decisive rows: the best ST row of 1-3, the "
                                                      "best of ours, its ablations"},
                               "methods_planned": {n: {"loss": m.loss, "options": dict(m.options), **{k: v for k, v in m.fields.items()
                                                                                                     if k != "ablations"}}
                                                   for n, m in METHODS.items()},
                               **summary}, device=args.device)
        plot(summary, output.with_suffix(".png"))

    if args.summary_only:
        write_summary()
        return 0
    ctx = TrainingRows(args, PROTOCOLS)
    if args.timing:
        for name in methods:
            if not log.done(timing_key(name)):
                method_ = METHODS[name]
                options = {"learning_rate": LR[0], **method_.config(0)}
                log.append(timing_key(name), run_one("scifact", name, options, 0, args.seeds[0], ctx, timing_steps=TIMING_STEPS))
                logger.info("timed %s: %.1f s a step", name, log.records()[-1]["median_step_seconds"])
        write_summary()
        return 0
    plan = grid(settings, args.seeds)

    def make(run: Run) -> dict:
        untrained = run_key(run.setting, "untrained", 0, 0)
        if untrained not in log.of_mode(args.dry_run):
            log.append(untrained, _untrained(run.setting, ctx))
            write_summary()
        return run_one(run.setting, run.method, plan.options(log, run.setting, METHODS[run.method], run.config),
                       run.config, run.seed, ctx)

    return run_plan(plan, log, methods, args, budget, make, key=lambda run: run_key(run.setting, run.method, run.config, run.seed),
                    write_summary=write_summary,
                    report=lambda r: (f"dev nDCG@10 {r['dev']['ndcg_at_10']:.2f}, test {r['test']['ndcg_at_10']:.2f} "
                                      f"({r['train_seconds']:.0f} s, {r['seconds_per_step']:.2f} s/step, peak {r['memory']['peak_mb']:.0f} MiB)"))

if __name__ == "__main__":
    raise SystemExit(main())
