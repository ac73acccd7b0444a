"""Which loss trains the best embedding model from pairs, at a realistic budget?

The protocol (same for every method):

* base model: the bundled all-MiniLM-L6-v2; batch 32 (the cached losses: batch 256, mini-batch
  32), sequence length 64, warm-up 10%, the same number of epochs (3) over the setting's data;
* settings: ``sts`` (train: STS-B train — its scores for the score-aware losses, its pairs with
  score >= 0.8 as positives — plus MRPC paraphrases; dev: STS-B validation; test: STS-B test
  Spearman) and ``answer_selection`` (train: its question-answer pairs; dev/test: MRR);
* tuning: each method's own hyperparameters chosen on the **dev split only**, at most 3
  configurations with seed 0, the same number for every method; then the chosen configuration
  with seeds 0, 1, 2 (seed 0 is the tuning run), test mean and std;
* general ability: zero-shot Banking77 accuracy by label names (all 77 intents, template
  "This text is about {}.") for every trained model, and, for runs logged since issue 21, the
  package's general-ability block (``general``: STS-B test plus zero-shot Banking77, emotion and
  SST-2; :mod:`contrastive_bert.inference.general_ability`).

Resumable (``contrastive_bert.benchmarking.RunLog``): every finished run is appended to
``pairs_quality_runs.jsonl`` and skipped on restart; the summary ``pairs_quality.json``
(+ ``pairs_quality.png``) is rebuilt from that log after every run, so partial results are always
valid. Methods run in the order of ``METHODS`` (or of ``--only``); every loss is built through the
loss registry. ``--plan`` lists the runs whose turn has come. The protocol (choice on dev, seeds,
the result shape ``settings -> setting -> method -> entry``) is the shared one of
:mod:`contrastive_bert.benchmarking.protocol`: this script is its methods and its scoring.

    OMP_NUM_THREADS=1 nohup .venv/bin/python eval/bench_pairs_quality.py --threads 1 > pairs.log 2>&1 &
    .venv/bin/python eval/bench_pairs_quality.py --settings sts --only angle,gist --device cuda --max-minutes 8
"""

from __future__ import annotations

import argparse
import logging
import math
import tempfile
import time
from pathlib import Path
from typing import Any

import torch

from contrastive_bert.benchmarking import (
    RunLog,
    add_common_arguments,
    cap_rows,
    json_safe,
    mean_std,
    selected,
    setup_from_args,
    write_results,
)
from contrastive_bert.benchmarking.protocol import Grid, Method
from contrastive_bert.data import labelled_negative_triplets, load_dataset, resolve_data_dir
from contrastive_bert.evaluation.tasks import evaluate_split
from contrastive_bert.inference.general_ability import general_ability, summarize_general, zero_shot_accuracy
from contrastive_bert.models import load_model
from contrastive_bert.training import NothingTrained, TrainingRecipe, fit, get_loss_entry
from contrastive_bert.training.losses_registry import build_loss
from contrastive_bert.training.train_data import build_train_dataset

logger = logging.getLogger("bench_pairs_quality")
RESULTS = Path(__file__).resolve().parent / "results"
EPOCHS = 3
BATCH_SIZE = 32
CACHED_BATCH_SIZE = 256
MAX_SEQ_LENGTH = 64
ZERO_SHOT_TEMPLATE = "This text is about {}."


def method(name: str, loss: str, baseline: bool, configs: tuple[dict[str, Any], ...], rows: str | None = None,
           batch_size: int = BATCH_SIZE, settings: tuple[str, ...] = ("sts", "answer_selection"), note: str = "") -> Method:
    """One row of the table: a loss (its loss-registry name), the configurations tuned on dev (loss
    options plus optional ``learning_rate``), its training rows (None: the loss's format;
    ``"triplets"``: offline-mined (a, p, n); ``"qa_triplets"``: labelled wrong answers)."""
    return Method(name, loss, configs, rows=rows, settings=settings,
                  fields={"baseline": baseline, "batch_size": batch_size, "data_format": rows, "note": note})


# Answer selection has 93 distinct questions: no batch of 256 pairs without a repeated anchor exists,
# and the no-duplicates sampler then yields no batch at all (0 steps), so the large-batch rows are sts only.
NO_LARGE_BATCH = "sts only: answer selection has 93 distinct questions, fewer than a batch of 256 without repeated anchors"
LR = (2e-5, 5e-5)  # the shared knob: every method gets the same two learning rates ...
# ... and, where it has one, a third configuration of its own temperature/scale at the first rate.
METHODS: dict[str, Method] = {
    "mnrl": method("mnrl", "mnrl", True, ({"scale": 20.0, "learning_rate": LR[0]}, {"scale": 20.0, "learning_rate": LR[1]},
                                  {"scale": 50.0, "learning_rate": LR[0]})),
    "cosent": method("cosent", "cosent", True, ({"scale": 20.0, "learning_rate": LR[0]}, {"scale": 20.0, "learning_rate": LR[1]},
                                      {"scale": 50.0, "learning_rate": LR[0]}), settings=("sts",)),
    "queue_cosent": method("queue_cosent", "queue_cosent", False, (
        # CoSENT's gradient is ~70x the InfoNCE parts' at equal weights (norm 100 vs 1.36 on one
        # STS-B batch), so the InfoNCE term needs a weight of 10-100 to matter at all.
        {"infonce_weight": 10.0, "temperature": 0.05, "learning_rate": LR[0]},
        {"infonce_weight": 30.0, "temperature": 0.05, "learning_rate": LR[0]},
        {"infonce_weight": 30.0, "temperature": 0.05, "learning_rate": LR[1]}), settings=("sts",),
        note="CoSENT over all STS-B train pairs + queue InfoNCE over pairs >= 0.8, pairs <= 0.4 as negatives"),
    "queue_guide": method("queue_guide", "queue_infonce", False, (
        {"temperature": 0.05, "guide_model": "default", "learning_rate": LR[0]},
        {"temperature": 0.05, "guide_model": "default", "learning_rate": LR[1]},
        {"temperature": 0.02, "guide_model": "default", "learning_rate": LR[0]}),
        note="queue negatives vetoed by the frozen bundled model (GISTEmbed's rule)"),
    "queue_hard": method("queue_hard", "queue_infonce", False, (
        {"temperature": 0.05, "num_hard_negatives": 8, "hard_negative_share": 0.15, "learning_rate": LR[0]},
        {"temperature": 0.05, "num_hard_negatives": 8, "hard_negative_share": 0.15, "learning_rate": LR[1]},
        {"temperature": 0.02, "num_hard_negatives": 8, "hard_negative_share": 0.15, "learning_rate": LR[0]})),
    "angle": method("angle", "angle", True, ({"scale": 20.0, "learning_rate": LR[0]}, {"scale": 20.0, "learning_rate": LR[1]},
                                    {"scale": 50.0, "learning_rate": LR[0]}),
                    settings=("sts",)),
    "queue": method("queue", "queue_infonce", False, (
        {"temperature": 0.05, "learning_rate": LR[0]}, {"temperature": 0.05, "learning_rate": LR[1]},
        {"temperature": 0.02, "learning_rate": LR[0]})),
    "gist": method("gist", "gist", True, ({"temperature": 0.01, "learning_rate": LR[0]}, {"temperature": 0.01, "learning_rate": LR[1]},
                                  {"temperature": 0.05, "learning_rate": LR[0]}), rows="pairs",
                   note="guide: the frozen bundled model"),
    "mnrl_hardness": method("mnrl_hardness", "mnrl", True, (
        {"hardness_mode": "in_batch_negatives", "hardness_strength": 1.0, "learning_rate": LR[0]},
        {"hardness_mode": "in_batch_negatives", "hardness_strength": 1.0, "learning_rate": LR[1]},
        {"hardness_mode": "in_batch_negatives", "hardness_strength": 5.0, "learning_rate": LR[0]})),
    "mnrl_mined": method("mnrl_mined", "mnrl", True, ({"scale": 20.0, "learning_rate": LR[0]}, {"scale": 20.0, "learning_rate": LR[1]},
                                        {"scale": 50.0, "learning_rate": LR[0]}), rows="triplets",
                         note="triplets mined offline by the untrained model (ST mine_hard_negatives, relative margin 0.05)"),
    "cached_mnrl": method("cached_mnrl", "cached_mnrl", True, (
        {"mini_batch_size": 32, "learning_rate": LR[1]}, {"mini_batch_size": 32, "learning_rate": 1e-4},
        {"mini_batch_size": 32, "scale": 50.0, "learning_rate": LR[1]}), batch_size=CACHED_BATCH_SIZE, settings=("sts",),
        note=NO_LARGE_BATCH),
    "cached_queue": method("cached_queue", "cached_queue_infonce", False, (
        {"temperature": 0.05, "mini_batch_size": 32, "learning_rate": LR[1]},
        {"temperature": 0.05, "mini_batch_size": 32, "learning_rate": 1e-4},
        {"temperature": 0.02, "mini_batch_size": 32, "learning_rate": LR[1]}), batch_size=CACHED_BATCH_SIZE,
        settings=("sts",), note=NO_LARGE_BATCH),
    "queue_corpus": method("queue_corpus", "queue_infonce", False, (
        {"temperature": 0.05, "queue_size": 4096, "learning_rate": LR[0]},
        {"temperature": 0.05, "queue_size": 4096, "learning_rate": LR[1]},
        {"temperature": 0.02, "queue_size": 4096, "learning_rate": LR[0]}),
        note="queue as large as the training set (4,096 >= its positives): every past positive is a negative, "
             "instead of the seed rule's 4 N / batch rows (43 for answer selection, 476 for sts)"),
    "mnrl_qa_negatives": method("mnrl_qa_negatives", "mnrl", True, ({"scale": 20.0, "learning_rate": LR[0]}, {"scale": 20.0, "learning_rate": LR[1]},
                                               {"scale": 50.0, "learning_rate": LR[0]}), rows="qa_triplets",
                                settings=("answer_selection",),
                                note="(question, answer, a labelled wrong candidate of the same question) triplets"),
    "queue_qa_negatives": method("queue_qa_negatives", "queue_infonce", False, (
        {"temperature": 0.05, "learning_rate": LR[0]}, {"temperature": 0.05, "learning_rate": LR[1]},
        {"temperature": 0.02, "learning_rate": LR[0]}), rows="qa_triplets", settings=("answer_selection",),
        note="the same triplets as mnrl_qa_negatives: their negative column plus the queue"),
}
UNTRAINED = Method("untrained", seeds=(0,))  # the bundled model as it is: scored once per setting
SETTINGS = {
    "sts": {"datasets": ["stsb", "mrpc"], "scored_datasets": ["stsb"], "task": "stsb", "metric": "main_score",
            "extra_metrics": ["cosine_pearson"]},
    "answer_selection": {"datasets": ["answer_selection"], "scored_datasets": None, "task": "answer_selection",
                         "metric": "mrr", "extra_metrics": ["map"]},
}


def run_key(setting: str, method: str, config: int, seed: int) -> str:
    return f"{setting}/{method}/{config}/{seed}"


def grid(seeds=(0, 1, 2)) -> Grid:
    """The untrained row and every method in both settings; configurations at seed 0, the dev pick
    at the other seeds (seed 0 first: it is the tuning seed)."""
    return Grid([UNTRAINED, *METHODS.values()], list(SETTINGS), [0, *(s for s in seeds if s != 0)],
                key=lambda run: run_key(run.setting, run.method, run.config, run.seed), dev_score=lambda record: record["dev"])


def _mined_triplets(pairs, device: str | None):
    """(anchor, positive, negative) rows: one hard negative per pair, mined by the untrained model
    among the positives with NV-Retriever's TopK-PercPos (negative score < 0.95 x positive score)."""
    from sentence_transformers.util import mine_hard_negatives

    miner = load_model("default", device=device)
    miner.max_seq_length = MAX_SEQ_LENGTH
    return mine_hard_negatives(pairs, miner, anchor_column_name="anchor", positive_column_name="positive",
                               num_negatives=1, relative_margin=0.05, sampling_strategy="top",
                               use_faiss=False, batch_size=128, output_format="triplet", verbose=False)


def train_rows(setting: str, method: Method, data_dir: str, seed: int, device: str | None, cache: dict):
    """The training rows of ``method`` in ``setting`` (the same rows for every seed but shuffled by it)."""
    spec = SETTINGS[setting]
    data_format = method.rows or get_loss_entry(method.loss).data_format
    if data_format == "scored_pairs" and spec["scored_datasets"] is None:
        raise ValueError(f"{setting}: has no graded pairs for a score-aware loss")
    key = (setting, data_format)
    if key not in cache:
        if data_format == "triplets":
            pairs = build_train_dataset(spec["datasets"], "pairs", data_dir=data_dir, seed=0)
            cache[key] = _mined_triplets(pairs, device)
        elif data_format == "qa_triplets":  # the rows of a recipe's labelled_negatives: true
            cache[key] = labelled_negative_triplets(load_dataset("answer_selection", split="train", data_dir=data_dir), seed=0)
        elif data_format == "scored_pairs":
            cache[key] = build_train_dataset(spec["scored_datasets"], "scored_pairs", data_dir=data_dir, seed=0)
        else:
            cache[key] = build_train_dataset(spec["datasets"], data_format, data_dir=data_dir, seed=0)
    return cache[key].shuffle(seed=seed)


def zero_shot_banking77(model, data_dir: str, eval_rows: int | None = None) -> float:
    """Zero-shot Banking77 test accuracy by the 77 label names (the general-ability block's rule)."""
    return zero_shot_accuracy(model, "banking77", data_dir, template=ZERO_SHOT_TEMPLATE, max_rows=eval_rows)


def score(model, setting: str, data_dir: str, splits, eval_rows: int | None = None) -> dict[str, Any]:
    spec = SETTINGS[setting]
    dev = evaluate_split(model, spec["task"], splits, split="validation")
    test = evaluate_split(model, spec["task"], splits, split="test")
    return {
        "dev": dev[spec["metric"]],
        "test": test[spec["metric"]],
        "test_extra": {m: test[m] for m in spec["extra_metrics"] if m in test},
        "zero_shot_banking77": zero_shot_banking77(model, data_dir, eval_rows),
        "general": general_ability(model, data_dir, max_rows=eval_rows),
    }


def run_one(setting: str, name: str, config_index: int, seed: int, args, cache: dict, splits) -> dict:
    method = METHODS[name]
    config = method.config(config_index)
    learning_rate = config.pop("learning_rate", LR[0])
    batch_size = method.fields["batch_size"]
    rows = train_rows(setting, method, args.data_dir, seed, args.device, cache)
    recipe = TrainingRecipe(
        datasets=SETTINGS[setting]["datasets"], loss=method.loss,
        loss_options=dict(config), epochs=EPOCHS, max_steps=args.max_steps or -1, batch_size=batch_size, learning_rate=learning_rate,
        max_seq_length=MAX_SEQ_LENGTH, seed=seed, save_steps=10**6, eval_steps=10**6, logging_steps=25,
        data_dir=args.data_dir, dev_task=None, eval_tasks=[],
    )
    torch.manual_seed(seed)
    model = load_model("default", device=args.device)
    model.max_seq_length = MAX_SEQ_LENGTH
    loss = build_loss(method.loss, model, rows, config, batch_size=batch_size)
    batch_sampler = get_loss_entry(method.loss).batch_sampler
    start = time.perf_counter()
    with tempfile.TemporaryDirectory() as output_dir:
        try:
            trainer = fit(model, rows, loss, recipe, output_dir, batch_sampler=batch_sampler)
        except NothingTrained:
            if not args.dry_run:  # a dry run's tiny model may mine too few triplets for a step
                raise
            trainer = None
    seconds = time.perf_counter() - start
    history = [] if trainer is None else trainer.state.log_history
    losses = [entry["loss"] for entry in history if "loss" in entry]
    if losses and not all(math.isfinite(v) for v in losses):
        raise RuntimeError(f"{setting}/{name}: non-finite training loss")
    return {
        "setting": setting, "method": name,
        "config": config_index, "seed": seed, "learning_rate": learning_rate, "options": config,
        "steps": 0 if trainer is None else trainer.state.global_step, "train_rows": len(rows), "train_seconds": seconds,
        "last_loss": losses[-1] if losses else None, **score(model, setting, args.data_dir, splits, args.eval_rows),
        "dry_run": args.dry_run,
    }


def untrained_run(setting: str, args, splits) -> dict:
    model = load_model("default", device=args.device)
    model.max_seq_length = MAX_SEQ_LENGTH
    return {"setting": setting, "method": "untrained", "config": 0, "seed": 0,
            **score(model, setting, args.data_dir, splits, args.eval_rows), "dry_run": args.dry_run}


def test_scores(record: dict) -> dict[str, float]:
    """A run's test scores: the setting's metric, then its extra metrics."""
    return {SETTINGS[record["setting"]]["metric"]: record["test"], **record["test_extra"]}


def general_block(records: list[dict]) -> dict | None:
    """The general-ability block over the seeds; runs logged before it existed: zero-shot Banking77 alone."""
    return summarize_general([r.get("general") for r in records]) or {
        "zero_shot_banking77": mean_std([r["zero_shot_banking77"] for r in records])}


def summarize(log, seeds=(0, 1, 2)) -> dict[str, dict[str, dict]]:
    """``setting -> method -> entry`` (the shared result shape, :mod:`contrastive_bert.benchmarking.protocol`)
    from the run log (``key -> record``): per method with runs, the dev-chosen configuration and its
    test mean/std over the seeds finished so far; ``untrained`` is the bundled model as it is."""
    log = {key: record for key, record in log.items() if not record.get("dry_run")}  # dry runs: numbers meaningless
    return grid(seeds).results(log, test=test_scores, dev=lambda r: {SETTINGS[r["setting"]]["metric"]: r["dev"]},
                               general=general_block)


def plot(summary: dict, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    settings = [s for s, methods in summary.items() if set(methods) - {"untrained"}]
    if not settings:
        return
    fig, axes = plt.subplots(1, len(settings), figsize=(6 * len(settings), 3.8), squeeze=False)
    for ax, setting in zip(axes[0], settings):
        metric = SETTINGS[setting]["metric"]
        methods = {name: entry for name, entry in summary[setting].items() if name != "untrained"}
        names = list(methods)
        means = [methods[n]["test"][metric]["mean"] for n in names]
        stds = [methods[n]["test"][metric]["std"] for n in names]
        colors = ["#999999" if methods[n]["baseline"] else "#C44E52" for n in names]
        ax.bar(names, means, yerr=stds, capsize=3, color=colors)
        if "untrained" in summary[setting]:
            ax.axhline(summary[setting]["untrained"]["test"][metric]["mean"], color="k", ls="--", lw=1, label="untrained")
            ax.legend(loc="lower right")
        ax.set_ylim(min(means) - 2, max(means) + 1)
        ax.set_title(f"{setting}: test {metric} x100 (grey: sentence-transformers)")
        ax.tick_params(axis="x", rotation=35)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def write_summary(log_path: Path, summary_path: Path, seeds, device: str | None) -> None:
    """``pairs_quality.json`` (+ ``.png``) rebuilt from the whole run log (also a parallel process's runs)."""
    summary = summarize({r["key"]: r for r in RunLog(log_path).records()}, seeds)
    payload = {"protocol": {"epochs": EPOCHS, "batch_size": BATCH_SIZE, "cached_batch_size": CACHED_BATCH_SIZE,
                            "max_seq_length": MAX_SEQ_LENGTH, "warmup_ratio": 0.1, "model": "all-MiniLM-L6-v2 (bundled)",
                            "selection": "config with the best dev score at seed 0; then seeds 0, 1, 2",
                            "test_metric": {s: SETTINGS[s]["metric"] for s in SETTINGS},
                            "zero_shot": f"Banking77 test, all 77 names, template {ZERO_SHOT_TEMPLATE!r}"},
               "settings": summary}
    write_results(summary_path, payload, device=device)
    plot(summary, summary_path.with_suffix(".png"))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    add_common_arguments(parser, output=RESULTS / "pairs_quality.json", run_log=RESULTS / "pairs_quality_runs.jsonl",
                         seeds=[0, 1, 2], methods=list(METHODS))
    parser.add_argument("--settings", default="sts,answer_selection", help="comma-separated (default: both)")
    parser.add_argument("--plan", action="store_true", help="list the runs whose turn has come and stop")
    args = parser.parse_args(argv)
    budget = setup_from_args(args)
    settings = [s for s in args.settings.split(",") if s]
    methods = selected(args, list(METHODS))
    unknown = [s for s in settings if s not in SETTINGS]
    if unknown:
        raise SystemExit(f"--settings: unknown {unknown}; known: {', '.join(SETTINGS)}")
    if 0 not in args.seeds:
        raise SystemExit("--seeds: must include 0 (the tuning seed)")
    args.data_dir = str(resolve_data_dir(args.data_dir) or "")
    log_path, summary_path = Path(args.run_log), Path(args.output)
    if args.summary_only:
        write_summary(log_path, summary_path, args.seeds, args.device)
        return 0
    log = RunLog(log_path)
    plan = grid(args.seeds)
    order = ["untrained", *methods]  # the untrained rows first, then method-major: a method in both settings before the next
    if args.plan:
        for run in plan.plan(log.of_mode(args.dry_run), order, settings):
            print("todo", run_key(run.setting, run.method, run.config, run.seed))
        return 0
    splits_by_setting = {setting: cap_rows(load_dataset(SETTINGS[setting]["task"], data_dir=args.data_dir), args.eval_rows)
                         for setting in settings}
    cache: dict = {}
    while True:
        todo = plan.plan(log.of_mode(args.dry_run), order, settings)  # again after every run: a method's seeds follow its dev choice
        if not todo or not budget.allows(todo[0].setting):
            break
        run = todo[0]
        key = run_key(run.setting, run.method, run.config, run.seed)
        logger.info("run %s", key)
        with budget.timed(run.setting):
            if run.method == "untrained":
                record = untrained_run(run.setting, args, splits_by_setting[run.setting])
            else:
                record = run_one(run.setting, run.method, run.config, run.seed, args, cache, splits_by_setting[run.setting])
        logger.info("done %s: dev %.2f test %.2f zero-shot %.2f (%d steps, %.0f s)", key, record["dev"], record["test"],
                    record["zero_shot_banking77"], record.get("steps", 0), record.get("train_seconds", 0.0))
        log.append(key, json_safe(record))
        write_summary(log_path, summary_path, args.seeds, args.device)
    write_summary(log_path, summary_path, args.seeds, args.device)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
