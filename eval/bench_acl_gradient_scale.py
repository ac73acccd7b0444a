"""How large is ACL's contrastive gradient next to cross-entropy's? Per-step gradient norms and
angles of the two terms (over the shared trainable parameters) while training the bundled model
on Banking77, for plain SupCon and for ACL-Embed (label embeddings as anchors).

    python eval/bench_acl_gradient_scale.py [--steps 10] [--data-dir ../shared/data]

Writes eval/results/acl_gradient_scale.json. ``grad_norm_contrastive`` is the norm of the
unweighted contrastive term's gradient; the update uses ``contrastive_weight`` (0.02) times it.
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
from pathlib import Path

from contrastive_bert.benchmarking import add_common_arguments, mean_std, setup_from_args, write_results
from contrastive_bert.data import load_dataset
from contrastive_bert.models import load_model
from contrastive_bert.training import TrainingRecipe
from contrastive_bert.training.acl import train_label_classifier


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    add_common_arguments(parser, output=Path(__file__).parent / "results" / "acl_gradient_scale.json",
                         methods=["supcon", "acl_embed"])
    parser.add_argument("--steps", type=int, default=10)
    parser.add_argument("--rows", type=int, default=640)
    args = parser.parse_args(argv)
    setup_from_args(args)
    if args.max_steps:
        args.steps = min(args.steps, args.max_steps)
    train = load_dataset("banking77", split="train", data_dir=args.data_dir).shuffle(seed=0).select(range(args.rows))
    names = train.features["label"].names
    results = {}
    for method in args.only or ("supcon", "acl_embed"):
        model = load_model("default", device=args.device)
        recipe = TrainingRecipe(
            datasets=["banking77"], max_steps=args.steps, batch_size=32, learning_rate=1e-4, head_learning_rate=5e-3,
            max_seq_length=32, save_steps=10**6, dev_task=None, eval_tasks=[], logging_steps=args.steps,
        )
        with tempfile.TemporaryDirectory() as output_dir:  # gating at 180 degrees: measured, never applied
            _, loss = train_label_classifier(model, train, names, method, recipe, output_dir,
                                             gradient_gating=True, angle_threshold=180.0)
        history = loss.angle_history
        if not history:  # e.g. a --dry-run's two steps: no angle was measured
            results[method] = {"angles_measured": 0}
            continue
        ratio = [0.02 * h["grad_norm_contrastive"] / h["grad_norm_ce"] for h in history]
        results[method] = {
            "angle": mean_std([h["angle"] for h in history]),
            "grad_norm_ce": mean_std([h["grad_norm_ce"] for h in history]),
            "grad_norm_contrastive": mean_std([h["grad_norm_contrastive"] for h in history]),
            "weighted_ratio": mean_std(ratio),
        }
        print(method, {k: round(v["mean"], 4) for k, v in results[method].items()}, flush=True)
        print(f"  weighted contrastive / CE gradient norm: {statistics.fmean(ratio):.4f}")
    write_results(args.output, {"recipe": {"data": f"banking77 train, {args.rows} rows", "steps": args.steps,
                                           "contrastive_weight": 0.02, "temperature": 0.5}, "results": results},
                  device=args.device)


if __name__ == "__main__":
    main()
