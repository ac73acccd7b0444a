"""The bar every contrastive_bert loss must beat: the bundled model untouched, and
sentence-transformers' own MNRL and CoSENT fine-tunes of it, same steps and batch, 3 seeds.

Recipe (fixed): bundled all-MiniLM-L6-v2; STEPS optimizer steps at batch BATCH, lr 2e-5,
10% warmup, max_seq_length 64; scored on STS-B test (cosine Spearman x100). Variants:
- ``mnrl``: MultipleNegativesRankingLoss on positive pairs of STS-B train (score >= 4/5) + MRPC
  train paraphrases (the data the contrastive losses of this package train on);
- ``cosent``: CoSENTLoss on STS-B train's scored pairs (what a user would pick for STS);
- ``cosent_stsb_mrpc``: CoSENTLoss on STS-B + MRPC scored pairs (MRPC labels as scores 0/1).

    python eval/bench_baselines.py [--steps 80] [--seeds 0 1 2] [--data-dir ../shared/data]

Writes eval/results/baselines.json.
"""

from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path

from contrastive_bert.benchmarking import add_common_arguments, cap_rows, mean_std, selected, setup_from_args, write_results
from contrastive_bert.data import load_dataset
from contrastive_bert.evaluation.tasks import evaluate_split
from contrastive_bert.models import load_model
from contrastive_bert.training import TrainingRecipe, fit, get_loss_entry
from contrastive_bert.training.train_data import build_train_dataset

RESULTS = Path(__file__).parent / "results" / "baselines.json"
VARIANTS = (("mnrl", "mnrl", ["stsb", "mrpc"]), ("cosent", "cosent", ["stsb"]), ("cosent_stsb_mrpc", "cosent", ["stsb", "mrpc"]))


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    add_common_arguments(parser, output=RESULTS, seeds=[0, 1, 2], methods=[v[0] for v in VARIANTS])
    parser.add_argument("--steps", type=int, default=80)
    parser.add_argument("--batch-size", type=int, default=32)
    args = parser.parse_args(argv)
    setup_from_args(args)
    steps = min(args.steps, args.max_steps or args.steps)
    data = {task: cap_rows(load_dataset(task, data_dir=args.data_dir), args.eval_rows)
            for task in ("stsb", "banking77", "emotion")}
    untrained = load_model("default", device=args.device)
    reference = {
        task: evaluate_split(untrained, task, data[task])
        for task in ("stsb", "banking77", "emotion")
    }
    print({task: round(scores["main_score"], 2) for task, scores in reference.items()})

    fine_tunes = {}
    for variant, loss_name, train_sets in VARIANTS:
        if variant not in selected(args, [v[0] for v in VARIANTS]):
            continue
        entry = get_loss_entry(loss_name)
        runs = []
        for seed in args.seeds:
            recipe = TrainingRecipe(
                datasets=train_sets, loss=loss_name, max_steps=steps, batch_size=args.batch_size,
                max_seq_length=64, seed=seed, save_steps=10**6, logging_steps=10, data_dir=args.data_dir,
            )
            train_dataset = build_train_dataset(recipe.datasets, entry.data_format, data_dir=args.data_dir, seed=seed)
            model = load_model("default", device=args.device)
            loss = entry.build(model, train_dataset, recipe)
            start = time.perf_counter()
            with tempfile.TemporaryDirectory() as output_dir:
                fit(model, train_dataset, loss, recipe, output_dir, batch_sampler=entry.batch_sampler)
            seconds = time.perf_counter() - start
            score = evaluate_split(model, "stsb", data["stsb"])["main_score"]
            print(f"{variant} seed {seed}: STS-B test {score:.2f} ({seconds:.0f} s)")
            runs.append({"seed": seed, "stsb_test": score, "train_seconds": seconds, "train_rows": len(train_dataset)})
        fine_tunes[variant] = {"loss": loss_name, "train": train_sets, "runs": runs, "stsb_test": mean_std([r["stsb_test"] for r in runs])}

    write_results(args.output, {
        "recipe": {"model": "default (all-MiniLM-L6-v2)", "steps": steps,
                   "batch_size": args.batch_size, "learning_rate": 2e-5, "max_seq_length": 64, "seeds": args.seeds},
        "untrained": reference,
        "fine_tuned": fine_tunes,
    }, device=args.device)
    print(f"wrote {args.output}")


if __name__ == "__main__":
    main()
