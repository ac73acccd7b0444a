"""Per-layer test accuracy of every exit: CE-only vs logit KD vs ACL-CL, linear vs MHA exits, 3 seeds.

Recipe (sized for 2 shared CPU cores; numbers are for this recipe, not a full fine-tune):
- bundled all-MiniLM-L6-v2 (6 layers), max_seq_length 48;
- a stratified-random subsample of the training split (``--train-size``) and of the test split
  (``--test-size``);
- stage 1 (once per data set): backbone + final label-embedding classifier with ACL-Embed
  (``ACLEmbedLoss``, tau 0.5, lambda 0.02, ACL-Grad off) through ``SentenceTransformerTrainer``,
  head warm-started from class centroids;
- stage 2 (per head type x method x seed): backbone + final exit frozen; exits on layers 1-5
  trained on cached hidden states with ``CrossLayerLoss`` (``ce`` / ``kd`` / ``acl_cl``,
  distillation weight 1, KD temperature 2);
- reference rows: ``truncated`` = the stage-1 final classifier applied to each layer's pooled
  embedding (no exit training); ``adaptive_layer`` (``--adaptive``) = a backbone trained with
  sentence-transformers' AdaptiveLayerLoss around ACL-Embed, one shared head on every layer.

Writes ``eval/results/multi_exit.json`` (merged per data set) and ``multi_exit_<dataset>.png``.
Run: ``flock /tmp/cbert_bench.lock .venv/bin/python eval/bench_multi_exit.py --datasets banking77``
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

import numpy as np
import torch

from contrastive_bert.data import resolve_data_dir

RESULTS = Path(__file__).resolve().parent / "results"
DATA_DIR = resolve_data_dir()  # --data-dir-less script: $CONTRASTIVE_BERT_DATA, else the hub


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


def load_split(name: str, train_size: int, test_size: int, seed: int = 0):
    from contrastive_bert.data import load_dataset

    data = load_dataset(name, data_dir=DATA_DIR)
    label_names = data["train"].features["label"].names
    train, test = data["train"], data["test"]
    train = train.select(stratified_subsample(train["label"], train_size, seed))
    test = test.select(stratified_subsample(test["label"], test_size, seed + 1))
    return train, test, label_names


def stage1_model(train, label_names, steps: int, max_seq_length: int, seed: int, adaptive: bool = False):
    """The bundled model after stage 1 (ACL-Embed), or after AdaptiveLayerLoss(ACL-Embed) training."""
    from contrastive_bert.losses.cross_layer import adaptive_layer_baseline
    from contrastive_bert.models import load_model
    from contrastive_bert.training.multi_exit import attach_prototype_head, train_stage1, train_with_trainer

    torch.manual_seed(seed)
    model = load_model("default", device="cpu")
    model[0].max_seq_length = max_seq_length
    attach_prototype_head(model, train["text"], train["label"], label_names, seed=seed)
    if adaptive:
        loss = adaptive_layer_baseline(model, label_names)
        train_with_trainer(model, train, loss, max_steps=steps, learning_rate=5e-5, seed=seed)
    else:
        train_stage1(model, train, label_names, max_steps=steps, learning_rate=5e-5, seed=seed, gradient_gating=False)
    return model


def truncated_accuracy(model, label_names, test_cache) -> dict[int, float]:
    """Every layer classified by the model's final label head (pooled embedding of that layer)."""
    from contrastive_bert.heads.exits import add_exit_heads, remove_exit_heads, tie_exits_to_label_head
    from contrastive_bert.heads.label_embedding import find_label_head
    from contrastive_bert.training.multi_exit import evaluate_exits

    remove_exit_heads(model)
    heads = add_exit_heads(model, label_names, head_type="linear")
    tie_exits_to_label_head(heads, find_label_head(model))
    return evaluate_exits(heads, test_cache)


def run_dataset(name: str, args: argparse.Namespace) -> dict:
    from contrastive_bert.training.multi_exit import LayerStateCache, evaluate_exits, train_stage2_on_cache

    started = time.time()
    train, test, label_names = load_split(name, args.train_size, args.test_size)
    model = stage1_model(train, label_names, args.stage1_steps, args.max_seq_length, seed=0)
    print(f"[{name}] stage 1 done in {time.time() - started:.0f}s", flush=True)
    layers = list(range(1, model[0].auto_model.config.num_hidden_layers + 1))
    train_cache = LayerStateCache(model, train["text"], train["label"], layers)
    test_cache = LayerStateCache(model, test["text"], test["label"], layers)
    print(f"[{name}] caches done at {time.time() - started:.0f}s", flush=True)
    result = {
        "dataset": name,
        "train_size": len(train),
        "test_size": len(test),
        "recipe": {
            "model": "all-MiniLM-L6-v2 (bundled)",
            "max_seq_length": args.max_seq_length,
            "stage1_steps": args.stage1_steps,
            "stage1": "ACL-Embed (tau 0.5, lambda 0.02, no gating), lr 5e-5, batch 32, GROUP_BY_LABEL, centroid-initialised head",
            "stage2_steps": args.stage2_steps,
            "stage2": "frozen backbone + final exit, exits on layers 1-5 trained on cached states, AdamW lr 1e-3, batch 32",
            "distill_weight": 1.0,
            "kd_temperature": 2.0,
            "seeds": args.seeds,
        },
        "truncated": {str(k): v for k, v in truncated_accuracy(model, label_names, test_cache).items()},
        "runs": [],
    }
    for head_type in args.head_types:
        for method in args.methods:
            for seed in range(args.seeds):
                heads = train_stage2_on_cache(
                    model, train_cache, label_names, head_type=head_type, method=method, seed=seed,
                    max_steps=args.stage2_steps,
                )
                accuracy = evaluate_exits(heads, test_cache)
                result["runs"].append(
                    {"head": head_type, "method": method, "seed": seed, "accuracy": {str(k): v for k, v in accuracy.items()}}
                )
                print(f"[{name}] {head_type:6s} {method:6s} seed {seed}: "
                      + " ".join(f"L{k}={v:.1f}" for k, v in accuracy.items()), flush=True)
    if args.save_model:
        from contrastive_bert.heads.exits import save_multi_exit_model

        train_stage2_on_cache(model, train_cache, label_names, head_type=args.save_head, method="acl_cl", seed=0,
                              max_steps=args.stage2_steps)
        out = Path(args.save_model) / name
        save_multi_exit_model(model, out)
        print(f"[{name}] saved the ACL-CL {args.save_head} multi-exit model to {out}", flush=True)
    if args.adaptive:
        del train_cache
        adaptive = stage1_model(train, label_names, args.stage1_steps, args.max_seq_length, seed=0, adaptive=True)
        adaptive_cache = LayerStateCache(adaptive, test["text"], test["label"], layers)
        result["adaptive_layer"] = {str(k): v for k, v in truncated_accuracy(adaptive, label_names, adaptive_cache).items()}
        print(f"[{name}] adaptive_layer: {result['adaptive_layer']}", flush=True)
    result["summary"] = summarize(result)
    result["seconds"] = round(time.time() - started, 1)
    return result


def summarize(result: dict) -> dict:
    """Mean and std over seeds per (head, method, layer), and ACL-CL's gain over CE and KD."""
    table: dict[str, dict[str, dict[str, float]]] = {}
    groups: dict[tuple[str, str], list[dict[str, float]]] = {}
    for run in result["runs"]:
        groups.setdefault((run["head"], run["method"]), []).append(run["accuracy"])
    for (head, method), runs in groups.items():
        layers = runs[0].keys()
        table.setdefault(head, {})[method] = {
            layer: {"mean": float(np.mean([r[layer] for r in runs])), "std": float(np.std([r[layer] for r in runs]))}
            for layer in layers
        }
    gains = {}
    for head, methods in table.items():
        if "acl_cl" in methods:
            for baseline in ("ce", "kd"):
                if baseline in methods:
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
            xs = [int(k) for k in layers]
            ax.errorbar(xs, [layers[k]["mean"] for k in layers], yerr=[layers[k]["std"] for k in layers],
                        linestyle=styles.get(method, "-"), color=colors.get(head), marker="o", capsize=3,
                        label=f"{head} / {method}")
    truncated = result["truncated"]
    ax.plot([int(k) for k in truncated], list(truncated.values()), color="gray", marker="x", label="final head on layer (no exit training)")
    if "adaptive_layer" in result:
        adaptive = result["adaptive_layer"]
        ax.plot([int(k) for k in adaptive], list(adaptive.values()), color="tab:green", marker="s", label="AdaptiveLayerLoss (shared head)")
    ax.set_xlabel("exit layer")
    ax.set_ylabel("test accuracy (%)")
    ax.set_title(f"{result['dataset']}: per-exit accuracy (mean ± std over {result['recipe']['seeds']} seeds)")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--datasets", nargs="+", default=["banking77", "emotion"])
    parser.add_argument("--train-size", type=int, default=2000)
    parser.add_argument("--test-size", type=int, default=1000)
    parser.add_argument("--stage1-steps", type=int, default=100)
    parser.add_argument("--stage2-steps", type=int, default=300)
    parser.add_argument("--max-seq-length", type=int, default=48)
    parser.add_argument("--seeds", type=int, default=3)
    parser.add_argument("--head-types", nargs="+", default=["linear", "mha"])
    parser.add_argument("--methods", nargs="+", default=["ce", "kd", "acl_cl"])
    parser.add_argument("--adaptive", action="store_true", help="also train the AdaptiveLayerLoss baseline backbone")
    parser.add_argument("--save-model", default="output/multi_exit", help="folder for the ACL-CL model ('' = do not save)")
    parser.add_argument("--save-head", default="mha", choices=["linear", "mha"])
    parser.add_argument("--output", default=str(RESULTS / "multi_exit.json"))
    args = parser.parse_args(argv)
    torch.set_num_threads(2)
    output = Path(args.output)
    output.parent.mkdir(parents=True, exist_ok=True)
    merged = json.loads(output.read_text()) if output.is_file() else {}
    for name in args.datasets:
        result = run_dataset(name, args)
        merged[name] = result
        output.write_text(json.dumps(merged, indent=2))
        plot(result, output.parent / f"multi_exit_{name}.png")
        print(json.dumps(result["summary"]["acl_cl_gain"], indent=1), flush=True)


if __name__ == "__main__":
    main()
