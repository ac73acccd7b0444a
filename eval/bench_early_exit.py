"""Speed/accuracy of real early exit: threshold sweep vs the full model vs truncated models (CPU).

Model: the two-stage ACL-CL multi-exit all-MiniLM-L6-v2 saved by ``bench_multi_exit.py``
(``output/multi_exit/<dataset>``); if it is missing, it is built here with the same library
calls (stage 1 ACL-Embed, stage 2 ACL-CL on cached states). Test data: the same stratified test
subsample as ``bench_multi_exit.py``. Every number (accuracy in percent, throughput in sentences/s
with tokenisation included, average layers) is measured in this run, on the CPU, batch size 32,
sentences sorted by length as ``encode`` does, under ``flock /tmp/cbert_bench.lock``.

Writes ``eval/results/early_exit.json`` (Banking77; ``early_exit_<dataset>.json`` for others)::

    {"dataset": ..., "full": {"accuracy", "throughput", "avg_layers"},
     "sweep": [{"criterion", "threshold", "accuracy", "throughput", "avg_layers"}, ...], ...}

(for ``patience`` the ``threshold`` field holds the patience t) and ``early_exit_<dataset>.png``.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import torch

HERE = Path(__file__).resolve().parent
RESULTS = HERE / "results"

SETTINGS = (
    [("confidence", t) for t in (0.5, 0.7, 0.8, 0.9, 0.95, 0.99)]
    + [("margin", t) for t in (0.1, 0.3, 0.5, 0.7, 0.9)]
    + [("patience", t) for t in (2, 3)]
)


def get_model(name: str, model_dir: Path, args: argparse.Namespace):
    """The saved multi-exit model, or build it (same recipe as bench_multi_exit.py)."""
    from contrastive_bert.heads.exits import load_multi_exit_model, save_multi_exit_model

    if (model_dir / "exit_heads").is_dir():
        return load_multi_exit_model(model_dir, device="cpu")
    sys.path.insert(0, str(HERE))
    import bench_multi_exit as recipe

    from contrastive_bert.training.multi_exit import LayerStateCache, train_stage2_on_cache

    train, _, label_names = recipe.load_split(name, args.train_size, args.test_size)
    model = recipe.stage1_model(train, label_names, args.stage1_steps, args.max_seq_length, seed=0)
    layers = list(range(1, model[0].auto_model.config.num_hidden_layers + 1))
    cache = LayerStateCache(model, train["text"], train["label"], layers)
    train_stage2_on_cache(model, cache, label_names, head_type=args.head_type, method="acl_cl", seed=0,
                          max_steps=args.stage2_steps)
    save_multi_exit_model(model, model_dir)
    return model


def best_within(result: dict, max_loss: float = 1.0) -> dict | None:
    """The fastest sweep setting that loses at most ``max_loss`` accuracy points vs the full model."""
    ok = [s for s in result["sweep"] if s["accuracy"] >= result["full"]["accuracy"] - max_loss]
    if not ok:
        return None
    best = max(ok, key=lambda s: s["throughput"])
    return {**best, "speedup": round(best["throughput"] / result["full"]["throughput"], 2),
            "accuracy_loss": round(result["full"]["accuracy"] - best["accuracy"], 2)}


def plot(result: dict, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 2, figsize=(11, 4.2))
    markers = {"confidence": "o", "margin": "s", "patience": "^"}
    for ax, key, label in ((axes[0], "throughput", "throughput (sentences/s, CPU)"), (axes[1], "avg_layers", "average layers used")):
        for criterion, marker in markers.items():
            points = [s for s in result["sweep"] if s["criterion"] == criterion]
            if points:
                ax.plot([p[key] for p in points], [p["accuracy"] for p in points], marker=marker, label=f"early exit: {criterion}")
                for p in points:
                    ax.annotate(str(p["threshold"]), (p[key], p["accuracy"]), fontsize=6, xytext=(2, 2), textcoords="offset points")
        truncated = result.get("truncated", [])
        ax.plot([t[key] for t in truncated], [t["accuracy"] for t in truncated], "x--", color="gray", label="truncated to depth d")
        ax.plot([result["full"][key]], [result["full"]["accuracy"]], "*", markersize=14, color="black", label="full model")
        ax.axhline(result["full"]["accuracy"] - 1.0, color="red", linewidth=0.8, linestyle=":", label="full - 1 point")
        ax.set_xlabel(label)
        ax.set_ylabel("test accuracy (%)")
        ax.grid(alpha=0.3)
    axes[0].legend(fontsize=7)
    fig.suptitle(f"{result['dataset']}: early exit (ACL-CL {result.get('exit_heads', '')} exits), {result['test_size']} test sentences")
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dataset", default="banking77")
    parser.add_argument("--model-dir", default="output/multi_exit")
    parser.add_argument("--test-size", type=int, default=1000)
    parser.add_argument("--train-size", type=int, default=2000)
    parser.add_argument("--stage1-steps", type=int, default=100)
    parser.add_argument("--stage2-steps", type=int, default=300)
    parser.add_argument("--max-seq-length", type=int, default=48)
    parser.add_argument("--head-type", default="mha", choices=["linear", "mha"])
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--repeats", type=int, default=2, help="timed passes per setting (the fastest is kept)")
    parser.add_argument("--output", default=None)
    args = parser.parse_args(argv)
    torch.set_num_threads(2)
    sys.path.insert(0, str(HERE))
    import bench_multi_exit as recipe

    from contrastive_bert.heads.exits import get_exit_heads
    from contrastive_bert.inference.early_exit import sweep_thresholds

    started = time.time()
    model = get_model(args.dataset, Path(args.model_dir) / args.dataset, args)
    model.eval()
    heads = get_exit_heads(model)
    _, test, _ = recipe.load_split(args.dataset, args.train_size, args.test_size)
    texts, labels = test["text"], test["label"]
    # warm-up (allocations, thread pools) before timing
    sweep_thresholds(model, texts[:64], labels[:64], [], batch_size=args.batch_size)
    measured = sweep_thresholds(model, texts, labels, SETTINGS, batch_size=args.batch_size,
                                truncated_depths=range(1, heads.num_layers), repeats=args.repeats)
    again = sweep_thresholds(model, texts, labels, [], batch_size=args.batch_size, repeats=args.repeats)["full"]
    result = {
        "dataset": args.dataset,
        "full": measured["full"],
        "sweep": measured["sweep"],
        "truncated": measured["truncated"],
        "full_repeat_at_end": again,
        "test_size": len(texts),
        "exit_heads": f"{heads.head_type} on layers {heads.intermediate_layers} + final linear",
        "batch_size": args.batch_size,
        "max_seq_length": model[0].max_seq_length,
        "threads": torch.get_num_threads(),
        "repeats": args.repeats,
        "notes": "throughput includes tokenisation; 'threshold' holds the patience t for criterion 'patience'; "
                 "truncated = first d layers answered by the exit on layer d",
    }
    result["best_within_1_point"] = best_within(result)
    result["seconds"] = round(time.time() - started, 1)
    out = Path(args.output) if args.output else RESULTS / (
        "early_exit.json" if args.dataset == "banking77" else f"early_exit_{args.dataset}.json"
    )
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(result, indent=2))
    plot(result, out.parent / f"early_exit_{args.dataset}.png")
    print(json.dumps({k: result[k] for k in ("full", "best_within_1_point", "full_repeat_at_end")}, indent=1))


if __name__ == "__main__":
    main()
