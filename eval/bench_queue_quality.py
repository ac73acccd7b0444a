"""Does the queue (and hard negatives mined from it) beat in-batch negatives for the same compute?

Same base model (bundled all-MiniLM-L6-v2), data, optimizer steps, batch and learning rate for
every method, 3 seeds, trained through ``SentenceTransformerTrainer`` (``contrastive_bert.training.fit``):

* ``mnrl``: MultipleNegativesRankingLoss (scale 20 = temperature 0.05)
* ``cached_mnrl``: CachedMultipleNegativesRankingLoss (mini-batch 16; same loss, less memory)
* ``queue``: QueueInfoNCELoss, queue only (seed-rule K = min(65536, 4 N / batch))
* ``queue_hard``: QueueInfoNCELoss + 8 mined hard negatives weighted to 15% of the negatives
* ``queue_hard_ema``: as ``queue_hard`` with a momentum key encoder (m = 0.99), to decide the default

Two settings: ``sts`` trains on STS-B (score >= 4/5) + MRPC paraphrase pairs and reports STS-B
test Spearman; ``answer_selection`` trains on its positive (question, answer) pairs and reports
test MRR/MAP. All scores x100.

    flock /tmp/cbert_bench.lock .venv/bin/python eval/bench_queue_quality.py [--steps 60] [--seeds 0 1 2] [--only mnrl,queue]

Writes eval/results/queue_quality_<settings>.json (+ .png).
"""

from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path

import torch

from contrastive_bert.benchmarking import add_common_arguments, cap_rows, mean_std, selected, setup_from_args, write_results
from contrastive_bert.data import load_dataset
from contrastive_bert.evaluation.tasks import evaluate_split
from contrastive_bert.models import load_model
from contrastive_bert.training import TrainingRecipe, fit, get_loss_entry
from contrastive_bert.training.queue_checkpoint import queue_callbacks
from contrastive_bert.training.train_data import build_train_dataset

RESULTS = Path(__file__).parent / "results" / "queue_quality.json"

METHODS: dict[str, tuple[str, dict]] = {
    "mnrl": ("mnrl", {"scale": 20.0}),
    "cached_mnrl": ("cached_mnrl", {"scale": 20.0, "mini_batch_size": 16}),
    "queue": ("queue_infonce", {"temperature": 0.05}),
    "queue_hard": ("queue_infonce", {"temperature": 0.05, "num_hard_negatives": 8, "hard_negative_share": 0.15}),
    "queue_hard_ema": (
        "queue_infonce",
        {"temperature": 0.05, "num_hard_negatives": 8, "hard_negative_share": 0.15, "momentum": 0.99},
    ),
}
SETTINGS = {
    "sts": {"datasets": ["stsb", "mrpc"], "eval": "stsb", "metrics": ["main_score"]},
    "answer_selection": {"datasets": ["answer_selection"], "eval": "answer_selection", "metrics": ["mrr", "map"]},
}


def run_one(setting: str, method: str, seed: int, steps: int, batch_size: int, data_dir: str, device: str, evaluation) -> dict:
    """Train one model and score it; returns the scores, the loss-part logs and the time."""
    loss_name, options = METHODS[method]
    entry = get_loss_entry(loss_name)
    recipe = TrainingRecipe(
        datasets=SETTINGS[setting]["datasets"], loss=loss_name, loss_options=dict(options), max_steps=steps,
        batch_size=batch_size, max_seq_length=64, seed=seed, save_steps=10**6, logging_steps=10,
        data_dir=data_dir, dev_task=None, eval_tasks=[],
    )
    torch.manual_seed(seed)
    train_dataset = build_train_dataset(recipe.datasets, entry.data_format, data_dir=data_dir, seed=seed)
    model = load_model("default", device=device)
    loss = entry.build(model, train_dataset, recipe)
    start = time.perf_counter()
    with tempfile.TemporaryDirectory() as output_dir:
        trainer = fit(
            model, train_dataset, loss, recipe, output_dir, batch_sampler=entry.batch_sampler,
            callbacks=queue_callbacks(loss),
        )
    seconds = time.perf_counter() - start
    scores = evaluate_split(model, SETTINGS[setting]["eval"], evaluation)
    logs = [e for e in trainer.state.log_history if "loss" in e]
    result = {
        "seed": seed,
        "train_seconds": seconds,
        "train_rows": len(train_dataset),
        "scores": {k: scores[k] for k in SETTINGS[setting]["metrics"]},
        "last_log": {k: logs[-1][k] for k in ("loss", "in_batch", "queue", "hard") if logs and k in logs[-1]},
    }
    if hasattr(loss, "queue_size"):
        result["queue_size"] = loss.queue_size
    return result


def plot(results: dict, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    settings = list(results)
    fig, axes = plt.subplots(1, len(settings), figsize=(5 * len(settings), 3.5))
    axes = [axes] if len(settings) == 1 else axes
    for ax, setting in zip(axes, settings):
        methods = list(results[setting])
        metric = SETTINGS[setting]["metrics"][0]
        means = [results[setting][m][metric]["mean"] for m in methods]
        stds = [results[setting][m][metric]["std"] for m in methods]
        ax.bar(methods, means, yerr=stds, capsize=4, color="#4C72B0")
        ax.set_ylim(min(means) - 3, max(means) + 2)
        ax.set_title(f"{setting}: {SETTINGS[setting]['eval']} test {metric} (x100)")
        ax.tick_params(axis="x", rotation=30)
    fig.tight_layout()
    fig.savefig(path, dpi=120)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    add_common_arguments(parser, output="eval/results/queue_quality_<settings>.json", seeds=[0, 1, 2], methods=list(METHODS))
    parser.add_argument("--steps", type=int, default=60)
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--settings", nargs="+", default=list(SETTINGS), choices=list(SETTINGS))
    args = parser.parse_args(argv)
    setup_from_args(args)
    args.methods = selected(args, list(METHODS))
    args.steps = min(args.steps, args.max_steps or args.steps)
    if "<settings>" in args.output:
        args.output = str(RESULTS.with_name(f"queue_quality_{'_'.join(args.settings)}.json"))
    evaluation = {s: cap_rows(load_dataset(SETTINGS[s]["eval"], data_dir=args.data_dir), args.eval_rows) for s in args.settings}

    untrained = load_model("default", device=args.device)
    baseline = {s: evaluate_split(untrained, SETTINGS[s]["eval"], evaluation[s]) for s in args.settings}
    results: dict[str, dict] = {}
    runs: dict[str, dict] = {}
    for setting in args.settings:
        results[setting], runs[setting] = {}, {}
        for method in args.methods:
            method_runs = []
            for seed in args.seeds:
                run = run_one(setting, method, seed, args.steps, args.batch_size, args.data_dir, args.device, evaluation[setting])
                print(f"{setting} {method} seed {seed}: {run['scores']} ({run['train_seconds']:.0f} s) {run['last_log']}", flush=True)
                method_runs.append(run)
            runs[setting][method] = method_runs
            results[setting][method] = {
                metric: mean_std([r["scores"][metric] for r in method_runs]) for metric in SETTINGS[setting]["metrics"]
            }
            results[setting][method]["train_seconds"] = mean_std([r["train_seconds"] for r in method_runs])
    output = Path(args.output)
    write_results(output, {
        "recipe": {"model": "default (all-MiniLM-L6-v2)", "steps": args.steps, "batch_size": args.batch_size,
                   "learning_rate": 2e-5, "warmup_ratio": 0.1, "max_seq_length": 64, "seeds": args.seeds,
                   "methods": {m: {"loss": METHODS[m][0], **METHODS[m][1]} for m in args.methods},
                   "settings": {s: SETTINGS[s] for s in args.settings}},
        "untrained": {s: {k: baseline[s][k] for k in SETTINGS[s]["metrics"]} for s in args.settings},
        "results": results,
        "runs": runs,
    }, device=args.device)
    plot(results, output.with_suffix(".png"))
    print(f"wrote {output}")


if __name__ == "__main__":
    main()
