"""ACL ablation on Banking77, emotion and SST-2 with the bundled all-MiniLM-L6-v2.

CE vs CE + SupCon vs ACL-Embed vs ACL-Embed + ACL-Grad, same steps and seeds; test accuracy of the
label head (mean +/- std over seeds), the CE-vs-contrastive gradient angle (histogram and course),
and a t-SNE of test embeddings (CE vs ACL). Writes ``eval/results/bench_acl.json`` and PNGs.

Sized for 2 shared CPU cores (see ``--help``): short runs (``--steps``), short sequences, test sets
subsampled to ``--test-samples`` rows (fixed seed), recorded in the JSON's ``config``.
The CE + SupCon runs measure the angle too (gating on with threshold 180 degrees: same gradient as
ungated for every finite angle), to compare with the seed's 75-105 degrees.

    flock /tmp/cbert_bench.lock .venv/bin/python eval/bench_acl.py
"""

from __future__ import annotations

import argparse
import json
import math
import statistics
import tempfile
import time
from pathlib import Path

import numpy as np
import torch

RESULTS = Path(__file__).resolve().parent / "results"
METHODS = ("ce", "supcon", "acl", "acl_grad")
LABELS = {"ce": "CE", "supcon": "CE + SupCon", "acl": "ACL-Embed", "acl_grad": "ACL-Embed + ACL-Grad"}


def parse_args(argv=None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--datasets", default="banking77,emotion,sst2")
    parser.add_argument("--methods", default=",".join(METHODS))
    parser.add_argument("--seeds", default="0,1,2")
    parser.add_argument("--steps", type=int, default=40)
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--learning-rate", type=float, default=1e-4)
    parser.add_argument("--head-learning-rate", type=float, default=5e-3, help="learning rate of the freshly initialised label head")
    parser.add_argument("--max-seq-length", type=int, default=32)
    parser.add_argument("--test-samples", type=int, default=800)
    parser.add_argument("--temperature", type=float, default=0.5)
    parser.add_argument("--contrastive-weight", type=float, default=0.02)
    parser.add_argument("--tsne-dataset", default="emotion")
    parser.add_argument("--data-dir", default=None)
    parser.add_argument("--output", default=str(RESULTS / "bench_acl.json"))
    parser.add_argument("--threads", type=int, default=2)
    return parser.parse_args(argv)


def subsample(split, n: int, seed: int = 0):
    return split if n <= 0 or len(split) <= n else split.shuffle(seed=seed).select(range(n))


def run_one(name, train, test, names, method, seed, args):
    """Train one model; return its record and its test embeddings (n, d)."""
    from contrastive_bert.heads.label_embedding import find_label_head
    from contrastive_bert.models import load_model
    from contrastive_bert.training.acl import train_label_classifier
    from contrastive_bert.training.recipe import TrainingRecipe

    torch.manual_seed(seed)
    model = load_model("default", device="cpu")
    recipe = TrainingRecipe(
        datasets=[name], max_steps=args.steps, batch_size=args.batch_size, learning_rate=args.learning_rate,
        head_learning_rate=args.head_learning_rate,
        seed=seed, max_seq_length=args.max_seq_length, logging_steps=max(1, args.steps // 6),
        save_steps=10**6, eval_steps=10**6, dev_task=None, eval_tasks=[],
    )
    options = {"temperature": args.temperature, "contrastive_weight": args.contrastive_weight}
    if method == "supcon":  # measure the angle without gating any finite one
        options.update(gradient_gating=True, angle_threshold=180.0)
    start = time.perf_counter()
    with tempfile.TemporaryDirectory() as output_dir:
        trainer, loss = train_label_classifier(model, train, names, method, recipe, output_dir, **options)
    seconds = time.perf_counter() - start
    texts, gold = list(test["text"]), np.asarray(test["label"])
    with torch.no_grad():
        embeddings = model.encode(texts, batch_size=128, convert_to_tensor=True)
        predicted = find_label_head(model).logits(embeddings).argmax(dim=1).cpu().numpy()
    accuracy = float((predicted == gold).mean() * 100)
    embeddings = embeddings.cpu().numpy()
    train_logs = [e for e in trainer.state.log_history if "loss" in e]
    record = {
        "accuracy": accuracy,
        "train_seconds": seconds,
        "final_train_loss": train_logs[-1]["loss"] if train_logs else None,
        "angles": [h["angle"] for h in loss.angle_history],
        "gated_fraction": (sum(h["gated"] for h in loss.angle_history) / len(loss.angle_history)) if loss.angle_history else None,
        "single_class_batches": loss.single_class_batches,
    }
    return record, embeddings


def summarize(values: list[float]) -> dict[str, float]:
    return {"mean": statistics.fmean(values), "std": statistics.stdev(values) if len(values) > 1 else 0.0, "n": len(values)}


def plot_angles(results: dict, path_hist: Path, path_course: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 2, figsize=(11, 4))
    for method, ax in zip(("supcon", "acl_grad"), axes):
        for name, data in results["datasets"].items():
            angles = [a for run in data["runs"].get(method, {}).values() for a in run["angles"] if not math.isnan(a)]
            if angles:
                ax.hist(angles, bins=30, alpha=0.5, label=f"{name} (n={len(angles)})")
        ax.axvline(90, color="k", ls="--", lw=1)
        ax.set_title(f"angle(grad CE, grad contrastive): {LABELS[method]}")
        ax.set_xlabel("degrees")
        ax.legend()
    fig.tight_layout()
    fig.savefig(path_hist, dpi=120)
    plt.close(fig)

    fig, ax = plt.subplots(figsize=(7, 4))
    for name, data in results["datasets"].items():
        for method, style in (("acl_grad", "-"), ("supcon", ":")):
            runs = data["runs"].get(method, {})
            if runs:
                angles = runs[sorted(runs)[0]]["angles"]
                ax.plot(range(1, len(angles) + 1), angles, style, label=f"{name} {LABELS[method]}")
    ax.axhline(90, color="k", ls="--", lw=1)
    ax.set_xlabel("optimizer step")
    ax.set_ylabel("angle (degrees)")
    ax.set_title("Gradient angle over training (first seed)")
    ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path_course, dpi=120)
    plt.close(fig)


def plot_tsne(embeddings: dict[str, np.ndarray], labels: np.ndarray, names: list[str], path: Path, seed: int = 0) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from sklearn.manifold import TSNE

    fig, axes = plt.subplots(1, len(embeddings), figsize=(6 * len(embeddings), 5))
    for ax, (method, x) in zip(np.atleast_1d(axes), embeddings.items()):
        points = TSNE(n_components=2, init="pca", random_state=seed, perplexity=30).fit_transform(x)
        for k, label in enumerate(names):
            mask = labels == k
            ax.scatter(points[mask, 0], points[mask, 1], s=5, label=label)
        ax.set_title(f"t-SNE of test embeddings: {LABELS[method]}")
        ax.set_xticks([])
        ax.set_yticks([])
    np.atleast_1d(axes)[0].legend(markerscale=3, fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def main(argv=None) -> int:
    from contrastive_bert.data import load_dataset

    args = parse_args(argv)
    torch.set_num_threads(args.threads)
    datasets = [d.strip() for d in args.datasets.split(",") if d.strip()]
    methods = [m.strip() for m in args.methods.split(",") if m.strip()]
    unknown = sorted(set(methods) - set(METHODS))
    if unknown:
        raise ValueError(f"--methods: unknown {unknown}; choose from {METHODS}")
    seeds = [int(s) for s in args.seeds.split(",")]
    output = Path(args.output)
    output.parent.mkdir(parents=True, exist_ok=True)
    results = {"config": {k: v for k, v in vars(args).items() if k != "output"}, "datasets": {}}
    results["config"]["model"] = "default (all-MiniLM-L6-v2)"
    results["config"]["note"] = "test sets subsampled to test_samples rows (seed 0); train = full train split, steps x batch rows seen"
    tsne_embeddings: dict[str, np.ndarray] = {}
    tsne_meta = None
    for name in datasets:
        data = load_dataset(name, data_dir=args.data_dir)
        names = data["train"].features["label"].names
        train = data["train"].select_columns(["text", "label"])
        test = subsample(data["test"], args.test_samples)
        entry = results["datasets"].setdefault(name, {"num_labels": len(names), "test_rows": len(test), "runs": {}, "summary": {}})
        for seed in seeds:
            for method in methods:
                record, embeddings = run_one(name, train, test, names, method, seed, args)
                entry["runs"].setdefault(method, {})[str(seed)] = record
                print(f"{name} {method} seed={seed}: acc={record['accuracy']:.2f} ({record['train_seconds']:.0f}s)", flush=True)
                if name == args.tsne_dataset and seed == seeds[0] and method in ("ce", "acl_grad"):
                    tsne_embeddings[method] = embeddings
                    tsne_meta = (np.asarray(test["label"]), names)
                accuracies = [r["accuracy"] for r in entry["runs"][method].values()]
                entry["summary"][method] = summarize(accuracies)
                angles = [a for r in entry["runs"][method].values() for a in r["angles"] if not math.isnan(a)]
                if angles:
                    entry["summary"][method]["angle_mean"] = statistics.fmean(angles)
                    entry["summary"][method]["angle_share_over_90"] = sum(a > 90 for a in angles) / len(angles)
                output.write_text(json.dumps(results, indent=1))
    plot_angles(results, output.with_name("acl_grad_angle_hist.png"), output.with_name("acl_grad_angle_course.png"))
    if len(tsne_embeddings) == 2 and tsne_meta is not None:
        plot_tsne(tsne_embeddings, *tsne_meta, output.with_name(f"acl_tsne_{args.tsne_dataset}.png"))
    for name, entry in results["datasets"].items():
        line = ", ".join(f"{LABELS[m]} {s['mean']:.2f}+/-{s['std']:.2f}" for m, s in entry["summary"].items())
        print(f"{name}: {line}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
