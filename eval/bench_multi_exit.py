"""Per-layer test accuracy of every exit: CE-only vs logit KD vs ACL-CL, linear vs MHA exits, seeds.

Everything runs through the package's recipe path (``contrastive_bert.training.runner.train``,
i.e. ``SentenceTransformerTrainer``): the bundled two-stage recipe of each data set
(``scripts/recipes/<dataset>_multi_exit.yaml``) trains stage 1 once (ACL-Embed) and stage 2 for
the first (head, method, seed); every other combination is the recipe's stage 2 alone, started
from the same stage-1 model, with its ``method`` / ``exit_head`` / ``seed`` changed.

Sized for 2 shared CPU cores: ``--train-size`` training rows (``max_train_samples``) and a
stratified ``--test-size`` subsample of the test split. Reference row ``truncated``: the stage-1
classifier applied to each layer's pooled embedding (no exit training).

Writes ``eval/results/multi_exit.json`` (merged per data set, with the environment block of the
latest run) and ``multi_exit_<dataset>.png``.
Run: ``OMP_NUM_THREADS=1 .venv/bin/python eval/bench_multi_exit.py --datasets banking77`` (``--seeds 0``: one
seed; ``--only acl_cl,ce``: methods)
"""

from __future__ import annotations

import argparse
import json
import logging
import time
from pathlib import Path

import numpy as np

from contrastive_bert.benchmarking import add_common_arguments, selected, setup_from_args, write_results

logger = logging.getLogger("bench_multi_exit")
METHODS = ("acl_cl", "ce", "kd")

RESULTS = Path(__file__).resolve().parent / "results"
RECIPES = Path(__file__).resolve().parents[1] / "scripts" / "recipes"


def stratified_subsample(labels: list[int], size: int, seed: int) -> list[int]:
    """Row indices: a random subsample of ``size`` rows with every class represented (round-robin over classes)."""
    rng = np.random.default_rng(seed)
    by_class: dict[int, list[int]] = {}
    for row in rng.permutation(len(labels)).tolist():
        by_class.setdefault(labels[row], []).append(row)
    picked, queues = [], [list(rows) for rows in by_class.values()]
    while len(picked) < min(size, len(labels)):
        for queue in queues:
            if queue and len(picked) < size:
                picked.append(queue.pop())
    return sorted(picked)


def base_recipe(name: str, args: argparse.Namespace, output_dir: Path):
    from contrastive_bert.training.recipe import TrainingRecipe

    return TrainingRecipe.from_file(RECIPES / f"{name}_multi_exit.yaml", {
        "output_dir": str(output_dir), "max_train_samples": args.train_size, "data_dir": args.data_dir,
        "overwrite": True, **({"max_steps": args.max_steps} if args.max_steps else {}),
    })


def stage2_recipe(recipe, head: str, method: str, seed: int, output_dir: Path):
    """The recipe's stage 2 alone, from its stage-1 model, with another head / method / seed."""
    from contrastive_bert.training.recipe import TrainingRecipe

    stage = dict(recipe.stages[1])
    stage["loss_options"] = {**stage["loss_options"], "method": method, "exit_head": head}
    values = {k: v for k, v in recipe.to_dict().items() if k != "stages"}
    values.update(stage, model=str(Path(recipe.output_dir) / "stage-1" / "final"), seed=seed,
                  output_dir=str(output_dir), overwrite=True)
    return TrainingRecipe.from_dict(values)


def truncated_accuracy(stage1_folder: str, texts: list[str], labels: list[int], device: str = "cpu") -> dict[str, float]:
    """Every layer classified by the stage-1 classifier (pooled embedding of that layer)."""
    from contrastive_bert.heads.exits import add_exit_heads, tie_exits_to_label_head
    from contrastive_bert.heads.label_embedding import find_label_head
    from contrastive_bert.models import load_model
    from contrastive_bert.training.multi_exit import evaluate_exits

    model = load_model(stage1_folder, device=device)
    label_head = find_label_head(model)
    heads = add_exit_heads(model, label_head.label_names, head_type="linear")
    tie_exits_to_label_head(heads, label_head)
    return {str(k): v for k, v in evaluate_exits(model, texts, labels).items()}


def run_dataset(name: str, args: argparse.Namespace) -> dict:
    from contrastive_bert.data import load_dataset
    from contrastive_bert.models import load_model
    from contrastive_bert.training.multi_exit import evaluate_exits
    from contrastive_bert.training.runner import train

    started = time.time()
    root = Path(args.work_dir) / name
    test = load_dataset(name, split="test", data_dir=args.data_dir)
    test = test.select(stratified_subsample(test["label"], min(args.test_size, args.eval_rows or args.test_size), seed=1))
    texts, labels = list(test["text"]), list(test["label"])
    recipe = base_recipe(name, args, root / "two-stage")
    result = {"dataset": name, "train_size": args.train_size, "test_size": len(texts),
              "recipe": str(RECIPES / f"{name}_multi_exit.yaml"), "seeds": len(args.seeds), "runs": []}
    combos = [(h, m, s) for h in args.head_types for m in args.methods for s in args.seeds]
    for index, (head, method, seed) in enumerate(combos):
        if index == 0:
            stage = recipe.stages[1]
            recipe.stages[1] = {**stage, "loss_options": {**stage["loss_options"], "method": method, "exit_head": head}, "seed": seed}
            train(recipe)
            folder = Path(recipe.output_dir) / "final"
            result["truncated"] = truncated_accuracy(str(Path(recipe.output_dir) / "stage-1" / "final"), texts, labels, args.device)
        else:
            run = stage2_recipe(recipe, head, method, seed, root / f"{head}-{method}-{seed}")
            train(run)
            folder = Path(run.output_dir) / "final"
        accuracy = evaluate_exits(load_model(str(folder), device=args.device), texts, labels)
        result["runs"].append({"head": head, "method": method, "seed": seed, "accuracy": {str(k): v for k, v in accuracy.items()}})
        logger.info("[%s] %s %s seed %d: %s", name, head, method, seed, accuracy)
    result["summary"] = summarize(result)
    result["seconds"] = round(time.time() - started, 1)
    return result


def summarize(result: dict) -> dict:
    """Mean and std over seeds per (head, method, layer), and ACL-CL's gain over CE and KD."""
    table: dict[str, dict[str, dict[str, dict[str, float]]]] = {}
    groups: dict[tuple[str, str], list[dict[str, float]]] = {}
    for run in result["runs"]:
        groups.setdefault((run["head"], run["method"]), []).append(run["accuracy"])
    for (head, method), runs in groups.items():
        table.setdefault(head, {})[method] = {
            layer: {"mean": float(np.mean([r[layer] for r in runs])), "std": float(np.std([r[layer] for r in runs]))}
            for layer in runs[0]
        }
    gains = {}
    for head, methods in table.items():
        for baseline in ("ce", "kd"):
            if "acl_cl" in methods and baseline in methods:
                gains[f"{head}: acl_cl - {baseline}"] = {
                    layer: round(methods["acl_cl"][layer]["mean"] - methods[baseline][layer]["mean"], 2)
                    for layer in methods["acl_cl"]
                }
    return {"per_layer": table, "acl_cl_gain": gains}


def plot(result: dict, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7, 4.5))
    styles = {"ce": ":", "kd": "--", "acl_cl": "-"}
    colors = {"linear": "tab:blue", "mha": "tab:orange"}
    for head, methods in result["summary"]["per_layer"].items():
        for method, layers in methods.items():
            ax.errorbar([int(k) for k in layers], [v["mean"] for v in layers.values()], yerr=[v["std"] for v in layers.values()],
                        linestyle=styles.get(method, "-"), color=colors.get(head), marker="o", capsize=3, label=f"{head} / {method}")
    truncated = result.get("truncated", {})
    ax.plot([int(k) for k in truncated], list(truncated.values()), color="gray", marker="x", label="final head on layer (no exit training)")
    ax.set_xlabel("exit layer")
    ax.set_ylabel("test accuracy (%)")
    ax.set_title(f"{result['dataset']}: per-exit accuracy (mean ± std over {result['seeds']} seeds)")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    add_common_arguments(parser, output=RESULTS / "multi_exit.json", seeds=[0, 1, 2], methods=list(METHODS))
    parser.add_argument("--datasets", nargs="+", default=["banking77", "emotion"])
    parser.add_argument("--train-size", type=int, default=2000)
    parser.add_argument("--test-size", type=int, default=1000)
    parser.add_argument("--head-types", nargs="+", default=["mha", "linear"])
    parser.add_argument("--work-dir", default="output/bench_multi_exit")
    args = parser.parse_args(argv)
    setup_from_args(args)
    args.methods = selected(args, list(METHODS))
    output = Path(args.output)
    merged = json.loads(output.read_text()) if output.is_file() else {}
    for name in args.datasets:
        result = run_dataset(name, args)
        merged[name] = result
        write_results(output, merged, device=args.device)  # {data set: ..., "environment": where the last one ran}
        plot(result, output.with_name(f"{output.stem}_{name}.png"))  # multi_exit.json -> multi_exit_<name>.png
        print(json.dumps(result["summary"]["acl_cl_gain"], indent=1))


if __name__ == "__main__":
    main()
